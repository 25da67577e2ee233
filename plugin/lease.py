"""Who owns a store's captures: one process at a time holds the capture lease.

A desktop host's short-lived stdio server and a headless ``reflectworld run`` can both point at the
same store. The background captures (cameras, streams, ``capture_start``) must run in exactly one
of them: two workers would resolve the same live cameras side by side, each with its own galleries.
The first process that starts a capture takes the lease: an exclusive ``flock`` on
``<store>/.capture-owner`` holding its pid, command and HTTP address. It keeps the lease until it
closes; the kernel drops the lock when the process dies, so a ``kill -9`` never leaves a stale
owner. Another process that tries to capture is refused with a message that names the owner and
what to do instead (use the owner's capture tools at its HTTP address, or stop it).

Reading memory, editing rules and editing identities need no lease (identity edits reach the
owner's running captures through the identity epoch file, see ``perception.identity.service``).
A one-shot ``reflectworld ingest`` of a file needs none either: entity ids come from the store's
atomic counter (``memory/identity/ids.py``), so concurrent writers never share an id; it warns that people
it meets may be recorded a second time while another process captures.

Object-store URIs (``s3://…``) have no local lock file; there the lease is per process.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import IO, Any

from plugin.errors import PluginError

__all__ = ["CaptureLease", "LEASE_FILE", "LeaseHeldError"]

logger = logging.getLogger(__name__)

LEASE_FILE = ".capture-owner"


class LeaseHeldError(PluginError, ValueError):
    """Another process owns this store's captures."""


class CaptureLease:
    """The capture lease of one store URI (see the module docstring)."""

    def __init__(self, uri: str, command: str = "", http: str | None = None) -> None:
        self.uri = uri
        self.command = command or " ".join(["reflectworld", *sys.argv[1:2]])
        self.http = http
        self._file: IO[str] | None = None

    @property
    def path(self) -> Path | None:
        return None if "://" in self.uri else Path(self.uri) / LEASE_FILE

    @property
    def held(self) -> bool:
        return self._file is not None

    def acquire(self) -> None:
        """Take the lease (idempotent).

        Raises:
            LeaseHeldError: another live process holds it; the message names it and the way out.
        """
        if self._file is not None or self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+", encoding="utf-8")  # noqa: SIM115 - held open for the lease's life
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            owner = _parse(handle.read())
            handle.close()
            raise LeaseHeldError(_refusal(owner)) from None
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({"pid": os.getpid(), "command": self.command, "http": self.http,
                                 "since": round(time.time(), 3)}))
        handle.flush()
        self._file = handle
        logger.info("this process (pid %d) owns the captures of %s", os.getpid(), self.uri)

    def release(self) -> None:
        """Give the lease up (idempotent)."""
        if self._file is None:
            return
        try:
            self._file.seek(0)
            self._file.truncate()
            fcntl.flock(self._file, fcntl.LOCK_UN)
        finally:
            self._file.close()
            self._file = None

    def owner(self) -> dict[str, Any] | None:
        """The process that holds the lease now (``None`` when nobody does)."""
        if self.path is None or not self.path.is_file():
            return None
        if self._file is not None:
            return {"pid": os.getpid(), "command": self.command, "http": self.http}
        with open(self.path, encoding="utf-8") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return _parse(handle.read())
            fcntl.flock(handle, fcntl.LOCK_UN)
        return None


def _parse(text: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _refusal(owner: dict[str, Any]) -> str:
    who = f"`{owner.get('command') or 'reflectworld'}` (pid {owner.get('pid', '?')})"
    via = (f"; use the capture tools of that server at {owner['http']}" if owner.get("http")
           else "; add the source to that process (its manifest's `sources:` or its capture_start tool)")
    return (f"captures and identity writes of this store are owned by {who}{via}, or stop it first. "
            "Searching memory and editing rules or entities work from here meanwhile.")
