"""Face → person entity resolution (the foundation version of the resolver).

Each usable face embedding of a segment is matched against the face gallery: an entity's score
is the best cosine over its slots, and the best entity at or above the threshold (SFace: 0.363)
wins. Otherwise the face becomes a new ``person_NNNN`` entity; its embedding joins the working
gallery at once, so later faces of the same new person in the segment collapse into it. Two
faces on the same frame never resolve to the same entity.

The gallery stays diverse and bounded: a matched face becomes a new slot only when its best-slot
similarity is below ``diverse_below`` (0.9); an entity keeps at most ``max_slots`` (5) slots,
and when full a better-quality face replaces its weakest slot (same slot id, so the store
upserts it). Slot ids derive from (source, segment index, face position), so a re-run
produces the same rows.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from memory.models import EntityKind, GalleryFace, stable_id
from perception.faces import SFACE_MATCH_THRESHOLD, FaceDetection

logger = logging.getLogger(__name__)

_ID_NUMBER = re.compile(r"^(?P<prefix>[a-z]+_)(?P<n>\d+)$")


class EntityIdSource(Protocol):
    """The part of the store identity needs: the next free entity id of a kind."""

    def next_entity_id(self, kind: EntityKind) -> str: ...


@dataclass(frozen=True)
class FaceInput:
    """One detected face of a segment: where it was seen and its SFace embedding (or ``None``)."""

    detection: FaceDetection
    embedding: np.ndarray | None
    frame_t: float
    keyframe_id: str | None = None


@dataclass
class _Slot:
    id: str
    embedding: np.ndarray
    quality: float
    keyframe_id: str | None
    created_at: float


@dataclass
class SegmentIdentities:
    """What identity resolution decided for one segment."""

    #: per input face: the entity id, or ``None`` when the face was too small/weak to identify
    assignments: list[str | None]
    #: per assigned entity: best similarity to its gallery before this segment (1.0 for new ones)
    similarity: dict[str, float] = field(default_factory=dict)
    new_entity_ids: list[str] = field(default_factory=list)
    gallery_faces: list[GalleryFace] = field(default_factory=list)

    @property
    def entity_ids(self) -> list[str]:
        """Distinct resolved entities, in order of first appearance."""
        return list(dict.fromkeys(e for e in self.assignments if e is not None))


def face_quality(det: FaceDetection) -> float:
    """Slot quality: detection score weighted by face size (saturating at 160 px)."""
    return float(det.score) * min(1.0, det.size / 160.0)


class IdentityResolver:
    """Matches segment faces to person entities and maintains the in-memory face gallery.

    Args:
        gallery: the store's gallery (``store.face_gallery()``) at the start of the run.
        ids: where new entity ids come from (the store).
        threshold: cosine at or above which a face matches an entity.
        min_face_px: faces whose shorter box side is smaller are not identified.
        min_score: faces with a lower detection score are not identified.
        diverse_below: a matched face becomes a new slot only below this similarity.
        max_slots: most gallery slots per entity.
    """

    def __init__(
        self,
        gallery: list[GalleryFace],
        ids: EntityIdSource,
        threshold: float = SFACE_MATCH_THRESHOLD,
        min_face_px: int = 40,
        min_score: float = 0.75,
        diverse_below: float = 0.9,
        max_slots: int = 5,
    ) -> None:
        self.threshold = threshold
        self.min_face_px = min_face_px
        self.min_score = min_score
        self.diverse_below = diverse_below
        self.max_slots = max_slots
        self._ids = ids
        self._reserved: set[str] = set()
        self._gallery: dict[str, list[_Slot]] = {}
        for g in sorted(gallery, key=lambda g: (g.entity_id, g.id)):
            vec = np.asarray(g.embedding, dtype=np.float32)
            norm = float(np.linalg.norm(vec))
            self._gallery.setdefault(g.entity_id, []).append(
                _Slot(g.id, vec / norm if norm else vec, g.quality, g.keyframe_id, g.created_at)
            )

    @property
    def known_entities(self) -> list[str]:
        """Entity ids that have at least one gallery slot."""
        return sorted(self._gallery)

    def identifiable(self, det: FaceDetection) -> bool:
        """Whether a detection is big and confident enough to be identified."""
        return det.size >= self.min_face_px and det.score >= self.min_score

    def usable(self, face: FaceInput) -> bool:
        """Whether a face is identifiable and has an embedding."""
        return face.embedding is not None and self.identifiable(face.detection)

    def resolve(self, faces: list[FaceInput], source: str, segment_index: int, now: float) -> SegmentIdentities:
        """Assign each usable face to an entity; return assignments and gallery rows to write."""
        result = SegmentIdentities(assignments=[None] * len(faces))
        taken_on_frame: dict[float, set[str]] = {}
        touched: dict[str, _Slot] = {}
        for pos, face in enumerate(faces):
            if not self.usable(face):
                continue
            assert face.embedding is not None
            vec = face.embedding / max(float(np.linalg.norm(face.embedding)), 1e-12)
            taken = taken_on_frame.setdefault(face.frame_t, set())
            entity_id, best = self._best_match(vec, exclude=taken)
            quality = face_quality(face.detection)
            slot_id = stable_id("gal_", source, segment_index, pos)
            new_slot = _Slot(slot_id, vec, quality, face.keyframe_id, now)
            if entity_id is None or best < self.threshold:
                entity_id = self._allocate("person")
                result.new_entity_ids.append(entity_id)
                result.similarity.setdefault(entity_id, 1.0)
                self._gallery[entity_id] = [new_slot]
                touched[slot_id] = new_slot
                logger.debug("face %d of segment %d: new entity %s", pos, segment_index, entity_id)
            else:
                result.similarity.setdefault(entity_id, best)
                replaced = self._add_slot(entity_id, new_slot, best)
                if replaced is not None:
                    touched[replaced.id] = replaced
            taken.add(entity_id)
            result.assignments[pos] = entity_id
        for entity_id, slots in self._gallery.items():
            for slot in slots:
                if slot.id in touched:
                    result.gallery_faces.append(
                        GalleryFace(
                            id=slot.id,
                            entity_id=entity_id,
                            embedding=[float(x) for x in slot.embedding],
                            quality=slot.quality,
                            keyframe_id=slot.keyframe_id,
                            created_at=slot.created_at,
                        )
                    )
        return result

    def _best_match(self, vec: np.ndarray, exclude: set[str]) -> tuple[str | None, float]:
        best_id: str | None = None
        best = -1.0
        for entity_id in sorted(self._gallery):
            if entity_id in exclude:
                continue
            sim = max(float(np.dot(vec, s.embedding)) for s in self._gallery[entity_id])
            if sim > best:
                best_id, best = entity_id, sim
        return best_id, best

    def _add_slot(self, entity_id: str, slot: _Slot, best: float) -> _Slot | None:
        """Add (or swap in) ``slot`` when it adds diversity; return the slot row to write."""
        if best >= self.diverse_below:
            return None
        slots = self._gallery[entity_id]
        if len(slots) < self.max_slots:
            slots.append(slot)
            return slot
        weakest = min(range(len(slots)), key=lambda i: (slots[i].quality, slots[i].id))
        if slot.quality <= slots[weakest].quality:
            return None
        # Reuse the weakest slot's id so the store overwrites that row (bounded gallery).
        replacement = _Slot(slots[weakest].id, slot.embedding, slot.quality, slot.keyframe_id, slot.created_at)
        slots[weakest] = replacement
        return replacement

    def _allocate(self, kind: EntityKind) -> str:
        """Next free entity id, skipping ids already handed out in this run."""
        candidate = self._ids.next_entity_id(kind)
        while candidate in self._reserved or candidate in self._gallery:
            m = _ID_NUMBER.match(candidate)
            if m is None:
                raise ValueError(f"unexpected entity id format {candidate!r}; expected e.g. person_0001")
            candidate = f"{m['prefix']}{int(m['n']) + 1:0{len(m['n'])}d}"
        self._reserved.add(candidate)
        return candidate
