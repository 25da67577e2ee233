"""Object entities: selected detector classes become remembered things, re-identified per camera.

A detection of a configured class (``perception.object_entities.classes``: pets, vehicles, bags,
bikes, …) is described by :func:`object_descriptor` (colour histogram + gradient texture of the
box and of its centre, no weights) and compared with the appearance galleries of the object
entities *of the same class seen on the same camera*. At or above ``match_threshold`` it is that
entity; otherwise a large, confident box starts a new ``object_…`` entity, and a small or weak one
is shown as a plain label only. Identity across cameras is not attempted: two identical mugs on
two cameras cannot be told apart from appearance, and a wrong merge is worse than two entities.

Like the face resolver, this only decides; the rows it returns (gallery slots, decisions) are
committed with the segment.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import cv2
import numpy as np

from memory.models import GalleryObject, GallerySlot, IdentityDecision, stable_id
from perception.detectors.objects import ObjectDetection
from perception.identity.reid import Gallery, Slot, unit

__all__ = ["ObjectIdentities", "ObjectResolver", "ObjectSighting", "object_descriptor"]


def _features(part: np.ndarray) -> np.ndarray:
    hsv = cv2.cvtColor(part, cv2.COLOR_BGR2HSV)
    h, s, v = hsv[..., 0].ravel(), hsv[..., 1].ravel(), hsv[..., 2].ravel()
    coloured = s >= 40
    colour = np.histogram2d(h[coloured], s[coloured], bins=[12, 4], range=[[0, 180], [40, 256]])[0].ravel()
    grey = np.histogram(v[~coloured], bins=6, range=(0, 256))[0]
    hist = np.concatenate([colour, grey]).astype(np.float32)
    hist /= max(float(hist.sum()), 1.0)
    gray = cv2.cvtColor(part, cv2.COLOR_BGR2GRAY).astype(np.float32)
    mag, ang = cv2.cartToPolar(cv2.Sobel(gray, cv2.CV_32F, 1, 0), cv2.Sobel(gray, cv2.CV_32F, 0, 1))
    tex = np.histogram(ang.ravel() % np.pi, bins=8, range=(0, np.pi), weights=mag.ravel())[0].astype(np.float32)
    tex /= max(float(tex.sum()), 1e-6)
    return np.concatenate([hist, 0.5 * tex])


def object_descriptor(image_bgr: np.ndarray, box: tuple[int, int, int, int]) -> np.ndarray | None:
    """Unit appearance vector of a box: whole box + centre half (``None`` when the box is degenerate)."""
    x, y, w, h = box
    H, W = image_bgr.shape[:2]
    x0, y0, x1, y1 = max(0, x), max(0, y), min(W, x + w), min(H, y + h)
    if x1 - x0 < 8 or y1 - y0 < 8:
        return None
    crop = cv2.resize(image_bgr[y0:y1, x0:x1], (96, 96), interpolation=cv2.INTER_AREA)
    vec = np.sqrt(np.concatenate([_features(crop), _features(crop[24:72, 24:72])]))
    norm = float(np.linalg.norm(vec))
    return (vec / norm).astype(np.float32) if norm > 0 else None


@dataclass(frozen=True)
class ObjectSighting:
    """One detection of an entity class on a frame, with its appearance vector."""

    detection: ObjectDetection
    embedding: np.ndarray | None
    frame_t: float
    keyframe_id: str | None
    frame_shape: tuple[int, int]


@dataclass
class ObjectIdentities:
    """What the object resolver decided for one segment."""

    #: per sighting: the object entity id or ``None`` (too small / weak to identify)
    assignments: list[str | None]
    new_entity_ids: list[str] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    similarity: dict[str, float] = field(default_factory=dict)
    gallery: list[GalleryObject] = field(default_factory=list)
    decisions: list[IdentityDecision] = field(default_factory=list)
    #: the sightings decided, in input order (``assignments`` is parallel to it)
    sightings: list[ObjectSighting] = field(default_factory=list)

    @property
    def entity_ids(self) -> list[str]:
        """Distinct object entities, in order of first appearance."""
        return list(dict.fromkeys(e for e in self.assignments if e is not None))


class ObjectResolver:
    """Match / new decisions for object sightings over a shared per-camera appearance gallery.

    Args:
        gallery: the shared object gallery (entity → slots); ``meta`` maps entity → (label, camera).
        ids: source of new entity ids (``next_entity_id("object")``); ``reserved`` ids handed out already.
        classes: detector labels that become entities.
    """

    def __init__(self, gallery: Gallery, meta: dict[str, tuple[str, str]], ids: object, reserved: set[str],
                 classes: list[str], match_threshold: float = 0.8, min_box_px: int = 48,
                 min_score: float = 0.3) -> None:
        self.gallery, self.meta, self._ids, self._reserved = gallery, meta, ids, reserved
        self.classes = {c.lower() for c in classes}
        self.match_threshold, self.min_box_px, self.min_score = match_threshold, min_box_px, min_score

    def wants(self, det: ObjectDetection) -> bool:
        """Whether a detection's class becomes an entity."""
        return det.label in self.classes

    def resolve(self, sightings: list[ObjectSighting], source: str, segment_index: int, now: float,
                camera_id: str) -> ObjectIdentities:
        """Decide every sighting of one segment (largest boxes first)."""
        out = ObjectIdentities(assignments=[None] * len(sightings), sightings=list(sightings))
        taken: dict[float, set[str]] = {}
        slots: list[str] = []
        evidence: dict[str, list[dict[str, object]]] = {}
        order = sorted(range(len(sightings)), key=lambda i: -(sightings[i].detection.box[2]
                                                               * sightings[i].detection.box[3]))
        for pos in order:
            s = sightings[pos]
            det = s.detection
            if s.embedding is None or min(det.box[2], det.box[3]) < self.min_box_px or det.score < self.min_score:
                continue
            on_frame = taken.setdefault(s.frame_t, set())
            same = [e for e, (label, cam) in self.meta.items() if label == det.label and cam == camera_id
                    and e not in on_frame]
            cands = [c for c in self.gallery.candidates(s.embedding, top=len(self.gallery.entities) or 1)
                     if c.entity_id in same]
            best = cands[0] if cands else None
            quality = float(det.score) * min(1.0, min(det.box[2], det.box[3]) / 160.0)
            slot = Slot(stable_id("go_", source, segment_index, pos), unit(s.embedding), quality, s.keyframe_id, now)
            if best is not None and best.score >= self.match_threshold:
                entity_id, action = best.entity_id, "match"
                written = self.gallery.offer(entity_id, slot)
            else:
                entity_id, action = self._allocate(stable_id("alloc_", source, segment_index, "object", pos)), "new"
                self.meta[entity_id] = (det.label, camera_id)
                written = self.gallery.seed(entity_id, slot)
                out.new_entity_ids.append(entity_id)
            if written is not None:
                slots.append(written.id)
            on_frame.add(entity_id)
            out.assignments[pos] = entity_id
            out.labels[entity_id] = det.label
            out.similarity.setdefault(entity_id, 1.0 if action == "new" else best.score)  # type: ignore[union-attr]
            evidence.setdefault(entity_id, []).append({
                "kind": "object", "label": det.label, "frame_t": round(s.frame_t, 3), "box": list(det.box),
                "det_score": round(det.score, 3), "keyframe_id": s.keyframe_id, "outcome": action,
                "best": [best.entity_id, round(best.score, 4)] if best else None})
        rows = self.gallery.rows(slots, GallerySlot)
        out.gallery = [GalleryObject(**r.model_dump(), label=self.meta[r.entity_id][0],
                                     camera_id=self.meta[r.entity_id][1]) for r in rows]
        for entity_id, items in evidence.items():
            action = "new" if entity_id in out.new_entity_ids else "match"
            score = out.similarity[entity_id]
            reason = (f"{out.labels[entity_id]} unlike every {out.labels[entity_id]} seen on {camera_id}: new object"
                      if action == "new" else
                      f"{out.labels[entity_id]} matched its appearance gallery on {camera_id} at cosine {score:.3f} "
                      f"(threshold {self.match_threshold:.2f})")
            out.decisions.append(IdentityDecision(
                id=stable_id("dec_", source, segment_index, entity_id), entity_id=entity_id, action=action,
                source=source, camera_id=camera_id, segment_index=segment_index, score=round(score, 4),
                reason=reason, evidence_json=json.dumps(items), created_at=now))
        return out

    def _allocate(self, key: str) -> str:
        """A new object id from the store's cross-process counter (the same again for claim ``key``)."""
        candidate = self._ids.next_entity_id("object", key)  # type: ignore[attr-defined]
        while candidate in self._reserved or candidate in self.gallery.entities:  # id sources without claims
            prefix, number = candidate.rsplit("_", 1)
            candidate = f"{prefix}_{int(number) + 1:0{len(number)}d}"
        self._reserved.add(candidate)
        return candidate
