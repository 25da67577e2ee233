"""Telling memory a history: ``reflectworld remember FILE.jsonl`` (and ``eval proactive``'s cases).

Each note (``{"time": ISO-8601, "kind": "V"|"C", "text": "…"}``) becomes episodic memory through
:func:`memory.store.notes.write_notes`: searchable, in the dashboard timeline, linked to the people and
object classes it names, erased with an entity it names. With a running engine the notes go through
:meth:`~plugin.engine.Engine.remember`, as ``memory_note``'s do.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memory.models import Trace
from memory.store.notes import NoteError, parse_notes, write_notes

__all__ = ["remember_file"]

#: largest history file `remember` reads
MAX_FILE_BYTES = 64 * 1024 * 1024


def remember_file(store: Any, path: Path, engine: Any = None) -> list[Trace]:
    """Store every note of the JSON-lines file ``path`` (validated first: a bad line stores nothing)."""
    if not path.is_file():
        raise NoteError(f"{path} is not a file; give a JSON-lines file with one note a line")
    if path.stat().st_size > MAX_FILE_BYTES:
        raise NoteError(f"{path} is larger than {MAX_FILE_BYTES // (1024 * 1024)} MB; split it")
    with path.open(encoding="utf-8") as f:
        notes = parse_notes(f, origin=path.name)
    return engine.remember(notes) if engine is not None else write_notes(store, notes)
