"""Retrieval by what is in view: the memories that name the people, objects and words in focus now.

No text query and no embedding: a reminder must tie to what a camera sees, so a memory is a
candidate only when it names a thing in focus exactly — a person by entity id (its links) or by a
name or alias as written, a detector class by the words for it (``memory/search/focus_terms.py``), a word
spoken or read by that word. Candidates are notes (``memory/store/notes.py``) and active facts about the
people in view; whether one is worth saying is the gate's decision, not this module's.

Notes are kept in memory (:class:`FocusIndex`) and re-read when their number changes (checked at
most every ``check_s``): a count over the notes' camera is an index look-up, a scan per segment
would grow with the store. Facts are re-read when the facts table's version changes (looked at as often).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from .focus_terms import mentions_label, mentions_name, name_pattern
from ..store.notes import NOTES_CAMERA, note_kind, note_text
from .modes import sql_literal

__all__ = ["Candidate", "Focus", "FocusIndex", "FocusPerson"]

logger = logging.getLogger(__name__)

#: most notes a store keeps in the focus index (the newest)
MAX_NOTES = 50_000


@dataclass(frozen=True)
class FocusPerson:
    """A recognised person in view: entity id and the names that may be written for them."""

    entity_id: str
    names: tuple[str, ...] = ()


@dataclass(frozen=True)
class Focus:
    """What is in view in one segment."""

    people: tuple[FocusPerson, ...] = ()
    labels: tuple[str, ...] = ()
    words: frozenset[str] = frozenset()

    def empty(self) -> bool:
        return not (self.people or self.labels or self.words)


@dataclass(frozen=True)
class Candidate:
    """One memory that names something in focus, and what it names."""

    id: str
    level: str  # "note" | "fact"
    text: str
    wall: float
    kind: str = "C"
    #: focus keys it names: entity ids, detector labels, or ``word:<w>``
    keys: tuple[str, ...] = ()


@dataclass
class _Note:
    id: str
    text: str
    lower: str
    wall: float
    kind: str
    entity_ids: tuple[str, ...]


@dataclass
class FocusIndex:
    """Notes in memory, looked up by the people, classes and words in focus."""

    store: Any
    check_s: float = 2.0
    _notes: list[_Note] = field(default_factory=list)
    _count: int = -1
    _checked: float = float("-inf")
    _facts: tuple[int, dict[str, list[Any]]] | None = None
    _facts_checked: float = float("-inf")
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def invalidate(self) -> None:
        """Re-read the notes at the next look-up (this process wrote or forgot some)."""
        with self._lock:
            self._checked, self._count = float("-inf"), -1

    def notes(self) -> list[_Note]:
        """The stored notes, oldest first (re-read when their number changed)."""
        with self._lock:
            now = time.monotonic()
            if now - self._checked >= self.check_s:
                self._checked = now
                count = self.store.count_traces(NOTES_CAMERA)
                if count != self._count:
                    self._notes = self._load()
                    self._count = count
            return self._notes

    def _load(self) -> list[_Note]:
        rows = self.store.scan_rows("traces", f"camera_id = {sql_literal(NOTES_CAMERA)}")
        rows.sort(key=lambda r: (r["wall_start"] or 0.0, r["id"]))
        out = []
        for r in rows[-MAX_NOTES:]:
            summary = r["summary"] or ""
            text = note_text(summary)
            out.append(_Note(id=r["id"], text=text, lower=text.lower(), wall=float(r["wall_start"] or 0.0),
                             kind=note_kind(summary), entity_ids=tuple(r["entity_ids"] or ())))
        logger.debug("focus index: %d note(s)", len(out))
        return out

    def candidates(self, focus: Focus, with_facts: bool = True) -> list[Candidate]:
        """Notes (and facts about the people in view) that name something in ``focus``, oldest first."""
        if focus.empty():
            return []
        out: list[Candidate] = []
        names = {p.entity_id: [n for n in p.names if name_pattern(n) is not None] for p in focus.people}
        for note in self.notes():
            keys = [p.entity_id for p in focus.people
                    if p.entity_id in note.entity_ids or (names[p.entity_id] and
                                                          mentions_name(note.text, names[p.entity_id]))]
            keys += [label for label in focus.labels if mentions_label(note.lower, label)]
            keys += [f"word:{w}" for w in focus.words if w in note.lower and _has_word(note.lower, w)]
            if keys:
                out.append(Candidate(id=note.id, level="note", text=note.text, wall=note.wall, kind=note.kind,
                                     keys=tuple(dict.fromkeys(keys))))
        if with_facts and focus.people:
            out.extend(self._fact_candidates(focus))
        out.sort(key=lambda c: (c.wall, c.id))
        return out

    def _fact_candidates(self, focus: Focus) -> list[Candidate]:
        now = time.monotonic()
        if self._facts is None or now - self._facts_checked >= self.check_s:
            self._facts_checked = now
            version = self.store.table_version("facts")
        else:
            version = self._facts[0]
        if self._facts is None or self._facts[0] != version:
            by_entity: dict[str, list[Any]] = {}
            for fact in self.store.facts():
                for eid in fact.entity_ids:
                    by_entity.setdefault(eid, []).append(fact)
            self._facts = (version, by_entity)
        out = []
        for person in focus.people:
            for fact in self._facts[1].get(person.entity_id, []):
                if fact.kind == "identity":
                    continue
                out.append(Candidate(id=fact.id, level="fact", text=fact.text,
                                     wall=fact.updated_at or fact.created_at, kind="C", keys=(person.entity_id,)))
        return out


def _has_word(text: str, word: str) -> bool:
    return re.search(rf"\b{re.escape(word)}\b", text) is not None
