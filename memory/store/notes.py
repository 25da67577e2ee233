"""Notes: what a user or host tells memory ("remind me the remote needs batteries"), as episodic memory.

A note has a time, a kind (``V`` something seen, ``C`` something said or agreed in conversation) and
its text. It is stored as a trace of the pseudo-camera :data:`NOTES_CAMERA` (source
:data:`NOTES_SOURCE`), so it is searchable like any segment (``memory_search``), opens with
``memory_get``, shows in the dashboard timeline, and is erased when an entity it names is
forgotten. Its ``entity_ids`` link the people (names and aliases known to the store) and its
``objects`` the detector classes it names, so what a camera sees reaches it (``memory/search/focus.py``).

The id derives from (user, time, kind, text): telling the same note twice stores it once.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..search.focus_terms import OBJECT_WORDS, mentions_label, mentions_name
from ..models import Entity, Trace, stable_id
from .rows import trace_text

__all__ = ["NOTES_CAMERA", "NOTES_SOURCE", "Note", "NoteError", "is_note", "note_kind", "parse_notes",
           "write_notes"]

logger = logging.getLogger(__name__)

#: the pseudo-camera (and source) of notes
NOTES_CAMERA = "notes"
NOTES_SOURCE = "notes"
#: longest note text kept
MAX_NOTE_CHARS = 2000
_KIND_WORD = {"V": "Seen", "C": "Said"}


class NoteError(ValueError):
    """A note that cannot be stored; the message names the line (for files) and the fix."""


class Note(BaseModel):
    """One thing to remember: when, what kind, and the text."""

    model_config = ConfigDict(extra="forbid")

    time: datetime = Field(description="when it was seen or said (ISO-8601; no zone = UTC)")
    kind: Literal["V", "C"] = Field("C", description="V = something seen, C = something said or agreed")
    text: str = Field(min_length=1, max_length=MAX_NOTE_CHARS)

    @field_validator("kind", mode="before")
    @classmethod
    def _upper(cls, value: object) -> object:
        return value.strip().upper() if isinstance(value, str) else value

    @field_validator("text")
    @classmethod
    def _strip(cls, value: str) -> str:
        value = " ".join(value.split())
        if not value:
            raise ValueError("text is empty")
        return value

    @property
    def epoch(self) -> float:
        """The note's time as epoch seconds (a time without a zone is read as UTC)."""
        t = self.time if self.time.tzinfo is not None else self.time.replace(tzinfo=timezone.utc)
        return t.timestamp()


def parse_notes(lines: Iterable[str], origin: str = "notes") -> list[Note]:
    """Notes from JSON lines ``{"time": ISO-8601, "kind": "V"|"C", "text": "…"}`` (blank lines skipped).

    Raises:
        NoteError: a line is not JSON or not a note; the message names ``origin`` and the line.
    """
    out: list[Note] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except ValueError as exc:
            raise NoteError(f"{origin} line {n}: not JSON ({exc.msg}); write one object a line, e.g. "
                            '{"time": "2026-03-01T18:00:00Z", "kind": "C", "text": "Kit will bring the charger"}'
                            ) from None
        try:
            out.append(Note.model_validate(data))
        except ValidationError as exc:
            detail = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'line'}: {e['msg']}" for e in exc.errors())
            raise NoteError(f"{origin} line {n}: {detail}") from None
    return out


def is_note(trace: Trace | dict[str, Any]) -> bool:
    """Whether a trace (or trace row) is a note."""
    camera = trace.get("camera_id") if isinstance(trace, dict) else trace.camera_id
    return camera == NOTES_CAMERA


def note_kind(summary: str) -> str:
    """``V`` or ``C`` from a note trace's summary (``Seen: …`` / ``Said: …``)."""
    return "V" if summary.startswith(_KIND_WORD["V"] + ":") else "C"


def note_text(summary: str) -> str:
    """The note's own words, without the kind prefix."""
    head, _, rest = summary.partition(": ")
    return rest if head in _KIND_WORD.values() and rest else summary


def note_trace(user_id: str, note: Note, people: Sequence[Entity], labels: Sequence[str]) -> Trace:
    """The trace that stores ``note``, linked to the ``people`` and detector ``labels`` it names."""
    linked = [e.id for e in people if mentions_name(note.text, [n for n in [e.name, *e.aliases] if n])]
    objects = [label for label in labels if label != "person" and mentions_label(note.text, label)]
    wall = note.epoch
    return Trace(id=stable_id("trc_", user_id, NOTES_SOURCE, f"{wall:.3f}", note.kind, note.text),
                 camera_id=NOTES_CAMERA, source=NOTES_SOURCE, segment_index=0, t_start=0.0, t_end=0.0,
                 wall_start=wall, summary=f"{_KIND_WORD[note.kind]}: {note.text}", entity_ids=linked,
                 objects=objects, level="light")


def write_notes(store: Any, notes: Sequence[Note], labels: Sequence[str] | None = None) -> list[Trace]:
    """Store ``notes`` as note traces (idempotent) and return them.

    ``labels`` are the detector classes a note may name (default: COCO-80). People are linked by
    the names and aliases the store knows now; notes written before a person was named still reach
    them by name when that person is in view.
    """
    if not notes:
        return []
    people = [e for e in store.list_entities(kind="person", limit=100_000) if e.name or e.aliases]
    traces = [note_trace(store.user_id, n, people, list(labels) if labels is not None else list(OBJECT_WORDS))
              for n in notes]
    unique = list({t.id: t for t in traces}.values())
    store.upsert_searchable("traces", [{**t.model_dump(), "text": trace_text(t)} for t in unique])
    logger.info("stored %d note(s) (%d linked to people, %d to objects)", len(unique),
                sum(bool(t.entity_ids) for t in unique), sum(bool(t.objects) for t in unique))
    return traces
