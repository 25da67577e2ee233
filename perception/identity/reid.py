"""Re-identification galleries: bounded, quality-gated multi-slot embeddings per entity.

A :class:`Gallery` holds up to ``max_slots`` unit vectors per entity for one modality (SFace
faces, body descriptors). It only *scores*: :meth:`Gallery.candidates` returns entities ranked
by their best slot's cosine. Deciding what a score means is the resolver's job
(:mod:`perception.identity.resolver`).

Updates are gated: a slot is added only when the new vector adds diversity (its similarity to
the entity's best slot is below ``diverse_below``) and its quality reaches ``min_quality``; a full
entity swaps its weakest slot for a better one, keeping that slot's id so the store overwrites
the row instead of growing the table.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from typing import TypeVar

from memory.models import GalleryFace, GallerySlot

__all__ = ["CROSS_POSE_DISCOUNT", "Candidate", "Gallery", "PROFILE_TURN", "Slot", "is_profile", "unit"]

#: a face turned further than this (nose offset from between the eyes, in eye widths) is a profile
PROFILE_TURN = 0.8
#: subtracted from the cosine of a frontal face to a profile slot. Measured with SFace on the
#: repository's media: the Hamilton pianist's profiles (turn 0.9–2.2) score up to 0.371 against
#: unrelated frontal GRID speakers, above the match threshold, so a gallery that has only seen
#: someone's profile cannot vouch for a frontal face. The other way round (a profile face against a
#: frontal slot) is not discounted: single profiles of the pianist stay below the threshold against
#: his frontal reference photo (≤ 0.345) and match it only when several pending sightings agree.
CROSS_POSE_DISCOUNT = 0.09

S = TypeVar("S", bound=GallerySlot)


def is_profile(turn: float) -> bool:
    """Whether a face turned by ``turn`` (see :data:`PROFILE_TURN`) is a profile."""
    return turn > PROFILE_TURN


def unit(vec: np.ndarray) -> np.ndarray:
    """``vec`` as float32 with unit L2 norm (zero vectors stay zero)."""
    v = np.asarray(vec, dtype=np.float32).ravel()
    n = float(np.linalg.norm(v))
    return v / n if n > 0 else v


@dataclass(eq=False)
class Slot:
    """One gallery embedding of an entity (compared by identity: it holds an array)."""

    id: str
    embedding: np.ndarray
    quality: float
    keyframe_id: str | None = None
    created_at: float = 0.0
    turn: float = 0.0  # faces: the pose the slot was seen in


@dataclass(frozen=True)
class Candidate:
    """An entity and how similar its best gallery slot is to the query."""

    entity_id: str
    score: float


@dataclass
class Gallery:
    """Multi-slot gallery of one modality (see the module docstring)."""

    max_slots: int = 8
    diverse_below: float = 0.9
    min_quality: float = 0.0
    entities: dict[str, list[Slot]] = field(default_factory=dict)

    @classmethod
    def from_rows(cls, rows: Iterable[GallerySlot], **kwargs: float) -> Gallery:
        """Build a gallery from stored slot rows (``GalleryFace`` rows carry their pose)."""
        gallery = cls(**kwargs)  # type: ignore[arg-type]
        for r in sorted(rows, key=lambda r: (r.entity_id, r.id)):
            gallery.entities.setdefault(r.entity_id, []).append(
                Slot(r.id, unit(np.asarray(r.embedding)), r.quality, r.keyframe_id, r.created_at,
                     float(getattr(r, "turn", 0.0) or 0.0)))
        return gallery

    @staticmethod
    def _score(q: np.ndarray, slot: Slot, turn: float | None) -> float:
        """Cosine of ``q`` to ``slot``, less :data:`CROSS_POSE_DISCOUNT` for a frontal ``turn`` and a profile slot."""
        score = float(np.dot(q, slot.embedding))
        if turn is not None and not is_profile(turn) and is_profile(slot.turn):
            score -= CROSS_POSE_DISCOUNT
        return score

    def candidates(self, vec: np.ndarray, exclude: Iterable[str] = (), top: int = 3,
                   turn: float | None = None) -> list[Candidate]:
        """Entities ranked by best-slot score to ``vec`` (highest first), ``exclude`` left out.

        ``turn``: the query face's pose; a frontal query scores lower against profile slots.
        """
        skip = set(exclude)
        q = unit(vec)
        scored = [Candidate(e, max(self._score(q, s, turn) for s in slots))
                  for e, slots in self.entities.items() if e not in skip and slots]
        scored.sort(key=lambda c: (-c.score, c.entity_id))
        return scored[:top]

    def similarity(self, entity_id: str, vec: np.ndarray, turn: float | None = None) -> float | None:
        """Best-slot score of ``vec`` to one entity (``None`` when it has no slots); ``turn`` as in :meth:`candidates`."""
        slots = self.entities.get(entity_id)
        if not slots:
            return None
        q = unit(vec)
        return max(self._score(q, s, turn) for s in slots)

    def seed(self, entity_id: str, slot: Slot) -> Slot:
        """Start (or extend, bounded) an entity's slots unconditionally; return the slot to write."""
        slots = self.entities.setdefault(entity_id, [])
        if len(slots) < self.max_slots:
            slots.append(slot)
            return slot
        weakest = min(range(len(slots)), key=lambda i: (slots[i].quality, slots[i].id))
        slots[weakest] = Slot(slots[weakest].id, slot.embedding, slot.quality, slot.keyframe_id, slot.created_at,
                                slot.turn)
        return slots[weakest]

    def offer(self, entity_id: str, slot: Slot) -> Slot | None:
        """Add ``slot`` if it passes the quality gate and adds diversity; return the row to write."""
        if slot.quality < self.min_quality:
            return None
        best = self.similarity(entity_id, slot.embedding, slot.turn)
        if best is None:
            return self.seed(entity_id, slot)
        if best >= self.diverse_below:
            return None
        slots = self.entities[entity_id]
        if len(slots) < self.max_slots:
            slots.append(slot)
            return slot
        weakest = min(range(len(slots)), key=lambda i: (slots[i].quality, slots[i].id))
        if slot.quality <= slots[weakest].quality:
            return None
        slots[weakest] = Slot(slots[weakest].id, slot.embedding, slot.quality, slot.keyframe_id, slot.created_at,
                                slot.turn)
        return slots[weakest]

    def rows(self, slot_ids: Sequence[str], model: type[S] = GalleryFace) -> list[S]:  # type: ignore[assignment]
        """The current rows of the given slot ids as ``model`` records (for writing)."""
        wanted = set(slot_ids)
        pose = "turn" in model.model_fields
        return [model(id=s.id, entity_id=e, embedding=[float(x) for x in s.embedding], quality=s.quality,
                      keyframe_id=s.keyframe_id, created_at=s.created_at, **({"turn": s.turn} if pose else {}))
                for e, slots in sorted(self.entities.items()) for s in slots if s.id in wanted]
