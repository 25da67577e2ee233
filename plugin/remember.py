"""Telling memory things: ``reflectworld remember FILE.jsonl`` and the ``memory_note`` tool share this code.

Each note (``{"time": ISO-8601, "kind": "V"|"C", "text": "…"}``) becomes episodic memory through
:func:`memory.store.notes.write_notes`: searchable, in the dashboard timeline, linked to the people and
object classes it names, erased with an entity it names. The proactive stage reads notes on its
next segment.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memory.models import Trace
from memory.store.notes import Note, NoteError, parse_notes, write_notes

__all__ = ["remember_file", "remember_notes"]

#: largest history file `remember` reads
MAX_FILE_BYTES = 64 * 1024 * 1024


def remember_notes(store: Any, notes: list[Note], engine: Any = None) -> list[Trace]:
    """Store ``notes``; with the running ``engine``, its detector's classes link them and its
    reminder stage sees them on its next segment."""
    labels = getattr(getattr(engine, "notifications", None), "labels", None) or None
    traces = write_notes(store, notes, labels=labels)
    reminders = getattr(engine, "reminders", None)
    if reminders is not None:
        reminders.index.invalidate()
    return traces


def remember_file(store: Any, path: Path, engine: Any = None) -> list[Trace]:
    """Store every note of the JSON-lines file ``path`` (validated first: a bad line stores nothing)."""
    if not path.is_file():
        raise NoteError(f"{path} is not a file; give a JSON-lines file with one note a line")
    if path.stat().st_size > MAX_FILE_BYTES:
        raise NoteError(f"{path} is larger than {MAX_FILE_BYTES // (1024 * 1024)} MB; split it")
    with path.open(encoding="utf-8") as f:
        notes = parse_notes(f, origin=path.name)
    return remember_notes(store, notes, engine)
