"""Errors raised by the composition root.

Tree::

    PluginError                  root of everything plugin/ raises on purpose
    ├── ManifestError            a manifest that cannot be loaded or validated (carries every problem)
    ├── BackendUnavailableError  a configured backend (model, provider) cannot be used
    └── ServeError               a transport that refuses to start (e.g. unsafe bind)

Every message names what is wrong and how to fix it.
"""

from __future__ import annotations

from dataclasses import dataclass


class PluginError(Exception):
    """Root of the errors the composition root raises on purpose."""


@dataclass(frozen=True)
class ManifestProblem:
    """One problem in a manifest: where it is, what is wrong, how to fix it."""

    path: str
    message: str
    fix: str = ""

    def __str__(self) -> str:
        text = f"{self.path or '<root>'}: {self.message}"
        return f"{text} — {self.fix}" if self.fix else text


class ManifestError(PluginError):
    """A manifest that failed to load; ``problems`` lists each bad key once."""

    def __init__(self, source: str, problems: list[ManifestProblem]) -> None:
        self.source = source
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"invalid manifest {source} ({len(problems)} problem(s)):\n{lines}")


class BackendUnavailableError(PluginError):
    """A configured backend cannot be built (missing package, model file or endpoint)."""


class ServeError(PluginError):
    """A transport refused to start, for example a non-loopback bind without a token."""
