"""Errors raised by the perception package.

::

    PerceptionError
     └── MediaError (also a FileNotFoundError when the file is missing)

Every message names the file and what to do about it.
"""

from __future__ import annotations


class PerceptionError(Exception):
    """Root of the perception errors."""


class MediaError(PerceptionError, FileNotFoundError):
    """A media file is missing, unreadable, corrupt or has no video stream.

    It derives from :class:`FileNotFoundError` so that callers catching ``OSError`` for a
    missing path keep working; ``str(err)`` always says what was wrong and which file.
    """

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.path = path

    def __str__(self) -> str:
        return self.message
