"""``reflectworld eval …``: evaluation commands, one module per subject.

Each module in :data:`EVALS` exposes ``add_parser(subparsers)``, which adds its sub-command
(``reflectworld eval NAME …``) and sets ``func`` on it. Modules print a human table by default
and one JSON object with ``--json``.
"""

from __future__ import annotations

import argparse
import importlib
import logging

__all__ = ["EVALS", "add_eval_parsers"]

logger = logging.getLogger(__name__)

#: evaluation modules under ``plugin.evals``; a missing one is simply not offered
EVALS = ("reid", "asr", "diarization", "rules", "qa", "proactive", "objects")


def add_eval_parsers(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add every available ``eval`` sub-command to ``sub``."""
    for name in EVALS:
        try:
            module = importlib.import_module(f"plugin.evals.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"plugin.evals.{name}":
                raise
            continue
        module.add_parser(sub)
