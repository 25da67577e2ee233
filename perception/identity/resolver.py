"""The resolver: the only component that creates entities or assigns identities.

Detectors and galleries (:mod:`perception.identity.reid`) only produce scored candidates; this module
decides, per face evidence of a segment:

* **unsafe** (no embedding, tiny, low detector score, blurred, cut off by the frame edge): shown
  as an unidentified face, never written to a gallery, never given an identity;
* **match**: best gallery similarity ≥ ``match_threshold`` and clear of the runner-up by
  ``margin`` (a body-descriptor difference may break a near tie). Every face slot records its pose
  (:func:`face_turn`); a frontal face compared with a profile slot scores
  :data:`~perception.identity.reid.CROSS_POSE_DISCOUNT` lower (a gallery that has only seen a
  profile cannot vouch for a frontal face);
* **new**: best similarity < ``new_threshold`` and the evidence is *strong* (large, confident);
* otherwise the evidence is **pending**: weak or ambiguous sightings are kept in short-term
  memory (bounded, expiring). When enough mutually similar pending sightings accumulate from
  different frames, they confirm a new entity (or a match) together.

Galleries are updated only by strong evidence. Every decision that gives an entity a sighting
is returned as an :class:`~memory.models.IdentityDecision` with its evidence, committed with the
segment, and shown by ``entity_get``.
"""

from __future__ import annotations

import json
import logging
import re
from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from memory.models import EntityKind, GalleryBody, GalleryFace, IdentityDecision, stable_id
from perception.detectors.faces import SFACE_MATCH_THRESHOLD, FaceDetection
from perception.identity.reid import Candidate, Gallery, Slot, unit

__all__ = ["EntityIdSource", "FaceInput", "Resolver", "SegmentIdentities", "face_quality", "face_turn"]

logger = logging.getLogger(__name__)

_ID_NUMBER = re.compile(r"^(?P<prefix>[a-z]+_)(?P<n>\d+)$")


class EntityIdSource(Protocol):
    """The part of the store the resolver needs: the next free entity id of a kind."""

    def next_entity_id(self, kind: EntityKind, key: str | None = None) -> str: ...


@dataclass(frozen=True)
class FaceInput:
    """One face of a segment: detection, SFace embedding (or ``None``) and optional body evidence."""

    detection: FaceDetection
    embedding: np.ndarray | None
    frame_t: float
    keyframe_id: str | None = None
    #: descriptor of the person box around the face, and that box's slot quality
    body: np.ndarray | None = None
    body_quality: float = 0.0
    #: variance of the Laplacian of the face crop (``None``: not measured)
    sharpness: float | None = None
    #: (height, width) of the frame, to flag faces cut off at its edge ((0, 0): unknown)
    frame_shape: tuple[int, int] = (0, 0)


@dataclass(eq=False)
class _Pending:
    """A weak sighting waiting for confirmation; compared by identity (it holds an array)."""

    vec: np.ndarray
    frame_t: float
    segment_index: int
    evidence: dict[str, object]


@dataclass
class SegmentIdentities:
    """What the resolver decided for one segment."""

    #: per input face: the entity id, or ``None`` (unsafe, pending or ambiguous)
    assignments: list[str | None]
    #: per assigned entity: its best similarity before this segment (1.0 for new ones)
    similarity: dict[str, float] = field(default_factory=dict)
    new_entity_ids: list[str] = field(default_factory=list)
    gallery_faces: list[GalleryFace] = field(default_factory=list)
    gallery_bodies: list[GalleryBody] = field(default_factory=list)
    decisions: list[IdentityDecision] = field(default_factory=list)
    #: per input face: ``unsafe:<reasons>``, ``pending``, ``ambiguous``, ``match``, ``new``, ``confirm_pending``
    outcomes: list[str] = field(default_factory=list)

    @property
    def entity_ids(self) -> list[str]:
        """Distinct resolved entities, in order of first appearance."""
        return list(dict.fromkeys(e for e in self.assignments if e is not None))


def face_turn(det: FaceDetection) -> float:
    """How far a face is turned: the nose's horizontal offset from between the eyes, in eye distances.

    About 0 for a frontal face, 0.3–0.5 for three-quarter views, above 1 for profiles (the eyes
    then nearly overlap in the image; :data:`~perception.identity.reid.PROFILE_TURN` separates them).
    0 when the landmarks are missing.
    """
    if len(det.landmarks) < 3:
        return 0.0
    (rx, _), (lx, _), (nx, _) = det.landmarks[:3]
    return abs(nx - (rx + lx) / 2.0) / max(abs(lx - rx), 1e-6)


def face_quality(det: FaceDetection) -> float:
    """Slot quality: detection score weighted by face size (saturating at 160 px)."""
    return float(det.score) * min(1.0, det.size / 160.0)


class Resolver:
    """Match / new / ambiguous decisions over face (and body) galleries; see the module docstring.

    Args:
        gallery: stored face slots at the start of the run; ids: source of new entity ids.
        body_gallery: stored body slots.
        match_threshold: SFace cosine at or above which a face matches (0.363).
        new_threshold: below this, strong evidence creates a new entity; between the two the
            evidence is ambiguous and stays pending.
        margin: a match must beat the runner-up by this much (else ambiguous).
        min_face_px, min_score, min_sharpness: safety gates; strong_face_px, strong_score: strength.
        min_visible: share of a face box that must lie inside the frame for it to be safe.
        confirm_count: pending sightings (from distinct frames) that together confirm an entity.
        pending_segments: pending sightings expire after this many segments.
    """

    def __init__(self, gallery: list[GalleryFace], ids: EntityIdSource, *,
                 body_gallery: list[GalleryBody] | None = None, match_threshold: float = SFACE_MATCH_THRESHOLD,
                 new_threshold: float = 0.28, margin: float = 0.04, min_face_px: int = 40,
                 min_score: float = 0.75, min_sharpness: float = 15.0, strong_face_px: int = 40,
                 strong_score: float = 0.85, diverse_below: float = 0.9, max_slots: int = 8,
                 confirm_count: int = 2, pending_segments: int = 6, max_pending: int = 32,
                 min_visible: float = 0.85) -> None:
        self.match_threshold = match_threshold
        self.new_threshold = min(new_threshold, match_threshold)
        self.margin = margin
        self.min_face_px, self.min_score, self.min_sharpness = min_face_px, min_score, min_sharpness
        self.min_visible = min_visible
        self.strong_face_px, self.strong_score = strong_face_px, strong_score
        self.confirm_count, self.pending_segments = confirm_count, pending_segments
        self.faces = Gallery.from_rows(gallery, max_slots=max_slots, diverse_below=diverse_below)
        self.bodies = Gallery.from_rows(body_gallery or [], max_slots=max_slots, diverse_below=0.97,
                                        min_quality=0.3)
        self.pending: deque[_Pending] = deque(maxlen=max_pending)
        self._ids = ids
        self._reserved: set[str] = set()

    # ------------------------------------------------------------------ evidence gates

    def unsafe_reasons(self, face: FaceInput) -> list[str]:
        """Why a face may not be used for identity (empty list: it is safe)."""
        det, reasons = face.detection, []
        if face.embedding is None:
            reasons.append("no embedding")
        if det.size < self.min_face_px:
            reasons.append(f"tiny ({det.size}px)")
        if det.score < self.min_score:
            reasons.append(f"low score ({det.score:.2f})")
        if face.sharpness is not None and face.sharpness < self.min_sharpness:
            reasons.append(f"blurred ({face.sharpness:.0f})")
        h, w = face.frame_shape
        x, y, bw, bh = det.box
        if w and h and bw > 0 and bh > 0:
            # Detector boxes of close-ups often poke a few pixels past the edge; only a face whose
            # box is substantially outside the frame lacks the features identity needs.
            inside = max(0, min(x + bw, w) - max(x, 0)) * max(0, min(y + bh, h) - max(y, 0))
            if inside < self.min_visible * bw * bh:
                reasons.append(f"cut off at the frame edge ({inside / (bw * bh):.0%} visible)")
        return reasons

    def identifiable(self, det: FaceDetection) -> bool:
        """Whether a detection is big and confident enough to be worth embedding."""
        return det.size >= self.min_face_px and det.score >= self.min_score

    def strong(self, face: FaceInput) -> bool:
        """Safe evidence good enough to create an entity or update a gallery."""
        return face.detection.size >= self.strong_face_px and face.detection.score >= self.strong_score

    # ------------------------------------------------------------------ resolution

    def resolve(self, faces: list[FaceInput], source: str, segment_index: int, now: float,
                camera_id: str = "") -> SegmentIdentities:
        """Decide every face of one segment; return assignments, gallery rows and decisions."""
        out = SegmentIdentities(assignments=[None] * len(faces), outcomes=[""] * len(faces))
        self._expire(segment_index)
        taken: dict[float, set[str]] = {}
        face_slots: list[str] = []
        body_slots: list[str] = []
        per_entity: dict[str, dict[str, object]] = {}
        seen: dict[str, list[np.ndarray]] = {}  # faces already assigned in this segment, per entity
        for pos in self._order(faces):
            face = faces[pos]
            reasons = self.unsafe_reasons(face)
            if reasons:
                out.outcomes[pos] = "unsafe:" + "; ".join(reasons)
                continue
            assert face.embedding is not None
            vec = unit(face.embedding)
            on_frame = taken.setdefault(face.frame_t, set())
            turn = face_turn(face.detection)
            cands = self._candidates(vec, on_frame, seen, turn)
            best = cands[0] if cands else None
            second = cands[1] if len(cands) > 1 else None
            strong = self.strong(face)
            item = _evidence(face, best, second, strong)
            outcome, entity_id = self._decide(face, vec, best, second, strong)
            if outcome == "pending":
                self.pending.append(_Pending(vec, face.frame_t, segment_index, item))
                entity_id, outcome, support = self._confirm_pending(vec, turn)
                if outcome == "pending":
                    out.outcomes[pos] = "ambiguous" if best is not None and best.score >= self.new_threshold \
                        else "pending"
                    continue
                item["pending_support"] = support
            if entity_id is None:
                entity_id = self._allocate("person", stable_id("alloc_", source, segment_index, pos))
            if entity_id not in self.faces.entities:
                out.new_entity_ids.append(entity_id)
            slot_id = stable_id("gal_", source, segment_index, pos)
            if entity_id not in self.faces.entities or (strong and outcome != "confirm_pending"):
                slot = Slot(slot_id, vec, face_quality(face.detection), face.keyframe_id, now, round(turn, 3))
                written = (self.faces.seed(entity_id, slot) if entity_id not in self.faces.entities
                           else self.faces.offer(entity_id, slot))
                if written is not None:
                    face_slots.append(written.id)
                    item["gallery"] = "face slot written"
            if strong and face.body is not None:
                written = self.bodies.offer(entity_id, Slot(stable_id("gb_", source, segment_index, pos),
                                                            unit(face.body), face.body_quality, face.keyframe_id, now))
                if written is not None:
                    body_slots.append(written.id)
            on_frame.add(entity_id)
            seen.setdefault(entity_id, []).append(vec)
            out.assignments[pos] = entity_id
            out.outcomes[pos] = item["outcome"] = outcome
            score = 1.0 if entity_id in out.new_entity_ids else (best.score if best else 0.0)
            out.similarity.setdefault(entity_id, score)
            record = per_entity.setdefault(entity_id, {"action": outcome, "score": score, "items": [],
                                                       "runner_up": second})
            record["items"].append(item)  # type: ignore[union-attr]
        out.gallery_faces = self.faces.rows(face_slots)
        out.gallery_bodies = self.bodies.rows(body_slots, GalleryBody)
        for entity_id, rec in per_entity.items():
            runner: Candidate | None = rec["runner_up"]  # type: ignore[assignment]
            out.decisions.append(IdentityDecision(
                id=stable_id("dec_", source, segment_index, entity_id), entity_id=entity_id,
                action=str(rec["action"]), source=source, camera_id=camera_id, segment_index=segment_index,
                score=round(float(rec["score"]), 4), runner_up=runner.entity_id if runner else None,
                runner_up_score=round(runner.score, 4) if runner else None,
                reason=_reason(str(rec["action"]), float(rec["score"]), self.match_threshold, self.new_threshold),
                evidence_json=json.dumps(rec["items"]), created_at=now))
        return out

    def _candidates(self, vec: np.ndarray, exclude: set[str], seen: dict[str, list[np.ndarray]],
                    turn: float = 0.0) -> list[Candidate]:
        """The two best entities for ``vec``: gallery slots, plus faces assigned earlier in this segment.

        Within one segment the same person shows several poses; a pose that only resembles the
        person's other pose in this shot (not yet in the gallery, e.g. a weak match) must still
        count as that person rather than as someone new.
        """
        scores = {c.entity_id: c.score for c in self.faces.candidates(vec, exclude=exclude, top=3, turn=turn)}
        for entity_id, vecs in seen.items():
            if entity_id not in exclude:
                scores[entity_id] = max(scores.get(entity_id, -1.0), max(float(np.dot(vec, v)) for v in vecs))
        ranked = sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[:2]
        return [Candidate(e, score) for e, score in ranked]

    def _order(self, faces: list[FaceInput]) -> list[int]:
        """Positions in the order they are decided: the clearest gallery matches first.

        A segment holds several poses of each person; deciding the pose closest to a known
        entity first lets it match (and add that pose to the entity's gallery) before a harder
        pose of the same person could be mistaken for someone new.
        """
        def best(pos: int) -> float:
            face = faces[pos]
            if face.embedding is None or self.unsafe_reasons(face):
                return -2.0
            cands = self.faces.candidates(unit(face.embedding), top=1, turn=face_turn(face.detection))
            return cands[0].score if cands else -1.0

        return sorted(range(len(faces)), key=lambda pos: (-best(pos), pos))

    def _decide(self, face: FaceInput, vec: np.ndarray, best: Candidate | None, second: Candidate | None,
                strong: bool) -> tuple[str, str | None]:
        if best is None or best.score < self.new_threshold:
            return ("new", None) if strong else ("pending", None)
        if best.score < self.match_threshold:
            return "pending", None
        if second is not None and second.score >= self.match_threshold and best.score - second.score < self.margin:
            if face.body is not None:
                b1 = self.bodies.similarity(best.entity_id, face.body)
                b2 = self.bodies.similarity(second.entity_id, face.body)
                if b1 is not None and b2 is not None and abs(b1 - b2) >= 0.05:
                    return "match", best.entity_id if b1 > b2 else second.entity_id
            return "pending", None
        return "match", best.entity_id

    def _confirm_pending(self, vec: np.ndarray, turn: float = 0.0) -> tuple[str | None, str, int]:
        """Try to confirm an entity from the pending sightings similar to ``vec``."""
        group = [p for p in self.pending if float(np.dot(p.vec, vec)) >= self.match_threshold]
        frames = {p.frame_t for p in group}
        if len(group) < self.confirm_count or len(frames) < min(self.confirm_count, 2):
            return None, "pending", len(group)
        centroid = unit(np.mean([p.vec for p in group], axis=0))
        cands = self.faces.candidates(centroid, top=2, turn=turn)
        if cands and self.new_threshold <= cands[0].score < self.match_threshold:
            return None, "pending", len(group)  # still ambiguous together: keep waiting, never force it
        confirmed = {id(p) for p in group}
        kept = [p for p in self.pending if id(p) not in confirmed]
        self.pending.clear()
        self.pending.extend(kept)
        if cands and cands[0].score >= self.match_threshold:
            return cands[0].entity_id, "confirm_pending", len(group)
        return None, "confirm_pending", len(group)

    def _expire(self, segment_index: int) -> None:
        while self.pending and segment_index - self.pending[0].segment_index > self.pending_segments:
            self.pending.popleft()

    def _allocate(self, kind: EntityKind, key: str) -> str:
        """A new entity id from the store (unique across processes; the same again for ``key``)."""
        candidate = self._ids.next_entity_id(kind, key)
        if candidate in self._reserved or candidate in self.faces.entities:
            # only an id source without claims repeats itself (tests' stand-ins): step past it
            m = _ID_NUMBER.match(candidate)
            if m is None:
                raise ValueError(f"unexpected entity id format {candidate!r}; expected e.g. person_0001")
            while candidate in self._reserved or candidate in self.faces.entities:
                candidate = f"{m['prefix']}{int(m['n']) + 1:0{len(m['n'])}d}"
                m = _ID_NUMBER.match(candidate)
                assert m is not None
        self._reserved.add(candidate)
        return candidate


def _evidence(face: FaceInput, best: Candidate | None, second: Candidate | None, strong: bool) -> dict[str, object]:
    det = face.detection
    return {"kind": "face", "frame_t": round(face.frame_t, 3), "box": list(det.box), "det_score": round(det.score, 3),
            "keyframe_id": face.keyframe_id, "strength": "strong" if strong else "weak",
            "best": [best.entity_id, round(best.score, 4)] if best else None,
            "runner_up": [second.entity_id, round(second.score, 4)] if second else None}


def _reason(action: str, score: float, match: float, new: float) -> str:
    if action == "match":
        return f"face matched the gallery at cosine {score:.3f} (match threshold {match:.3f})"
    if action == "new":
        return f"strong face unlike every known entity (best cosine below {new:.3f}): new entity"
    if action == "confirm_pending":
        return "several weak/ambiguous sightings from different frames agreed with each other"
    return action
