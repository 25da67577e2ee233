"""Per-segment analysis shared by every driver (files now, live streams later).

:class:`SegmentAnalyzer` turns one :class:`~perception.segment.Segment` into one
:class:`~memory.models.SegmentWrite`: key frames → faces → identity → local describer. It holds
the per-source state (camera, wall clock, entity cache) and knows nothing of where frames come
from, so a file driver (:mod:`perception.ingest`) and a stream driver share it unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from memory.errors import NotFoundError
from memory.models import Entity, EntityKind, GalleryFace, IngestState, Keyframe, Observation, SegmentWrite, Trace, stable_id
from perception.describe import FrameFaces, LocalDescriber, SegmentFacts, format_ts
from perception.faces import SFACE_MATCH_THRESHOLD, FaceDetector, FaceEmbedder
from perception.identity import FaceInput, IdentityResolver
from perception.keyframes import encode_jpeg, select_keyframes
from perception.segment import DEFAULT_SCENE_THRESHOLD, Segment

__all__ = ["AnalysisStore", "IngestSettings", "SegmentAnalyzer"]

logger = logging.getLogger(__name__)


class AnalysisStore(Protocol):
    """The store operations ingestion uses (``memory.MemoryStore`` implements them)."""

    def write_segment(self, seg: SegmentWrite) -> None: ...
    def ingest_state(self, source: str) -> IngestState | None: ...
    def resume_point(self, source: str) -> int | None: ...
    def reset_source(self, source: str) -> None: ...
    def mark_source_done(self, source: str, camera_id: str = "") -> None: ...
    def face_gallery(self) -> list[GalleryFace]: ...
    def next_entity_id(self, kind: EntityKind) -> str: ...
    def get_entity(self, entity_id: str) -> Entity: ...


class IngestSettings(BaseModel):
    """Tunable parameters of file ingestion."""

    model_config = ConfigDict(extra="forbid")

    sample_fps: float = Field(4.0, gt=0, le=30, description="frames analysed per second of video")
    min_segment_s: float = Field(
        0.5, ge=0, description="shortest segment a scene cut may end (the last one may be shorter)"
    )
    max_segment_s: float = Field(10.0, gt=0, description="longest segment; longer shots are split")
    scene_threshold: float = Field(
        DEFAULT_SCENE_THRESHOLD, gt=0, le=1, description="HSV histogram Bhattacharyya distance that counts as a cut"
    )
    keyframes_per_segment: int = Field(2, ge=1, le=10)
    keyframe_min_gap_s: float = Field(1.0, ge=0, description="minimum time between two key frames of a segment")
    faces: bool = Field(True, description="detect, embed and identify faces")
    face_match_threshold: float = Field(SFACE_MATCH_THRESHOLD, ge=-1, le=1, description="SFace cosine for a match")
    jpeg_max_side: int = Field(640, ge=64, le=4096)
    jpeg_quality: int = Field(85, ge=10, le=100)


@dataclass
class SegmentAnalyzer:
    """Analyses the segments of one source into idempotent segment writes.

    ``wall_clock(t)`` maps a media time to wall-clock epoch seconds (files: mtime + t; live
    sources: the capture time). ``size``/``mtime`` identify a file source (``None`` for streams).
    """

    source: str
    camera_id: str
    settings: IngestSettings
    store: AnalysisStore
    wall_clock: Callable[[float], float]
    detector: FaceDetector | None
    embedder: FaceEmbedder | None
    resolver: IdentityResolver
    describer: LocalDescriber = field(default_factory=LocalDescriber)
    entities: dict[str, Entity] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)
    size: int | None = None
    mtime: float | None = None

    def analyse(self, segment: Segment) -> SegmentWrite:
        """Key frames, faces, identity and description of one segment, as one write."""
        return _analyse(self, segment)


def _entity(run: SegmentAnalyzer, entity_id: str) -> Entity | None:
    """The current record of an entity (run cache, then store); ``None`` when unknown."""
    if entity_id in run.entities:
        return run.entities[entity_id]
    try:
        entity = run.store.get_entity(entity_id)
    except NotFoundError:
        return None
    run.entities[entity.id] = entity
    return entity


def _analyse(run: SegmentAnalyzer, segment: Segment) -> SegmentWrite:
    """Run key frames, faces, identity and the describer on one segment; build its write."""
    s, src, idx = run.settings, run.source, segment.index
    wall = run.wall_clock(segment.t_start)
    picks = select_keyframes(segment.frames, s.keyframes_per_segment, s.keyframe_min_gap_s)
    kf_ids = [stable_id("kf_", src, idx, pos) for pos in range(len(picks))]

    faces: list[FaceInput] = []
    per_frame: list[tuple[int, int]] = []  # (start, end) into faces for each key frame
    for pick, kf_id in zip(picks, kf_ids):
        image = pick.frame.image_bgr
        begin = len(faces)
        if run.detector is not None and run.embedder is not None:
            for det in run.detector.detect(image):
                # Only faces the resolver will use are embedded; the rest are still counted.
                vec = run.embedder.embed(image, det) if run.resolver.identifiable(det) else None
                faces.append(FaceInput(det, vec, pick.frame.t, kf_id))
        per_frame.append((begin, len(faces)))
    ids = run.resolver.resolve(faces, src, idx, now=wall)

    # Entities: follow merges, then update sightings/last_seen once per segment.
    canonical: dict[str, str] = {}
    entities: list[Entity] = []
    for entity_id in ids.entity_ids:
        existing = None if entity_id in ids.new_entity_ids else _entity(run, entity_id)
        if existing is None:
            entity = Entity(id=entity_id, kind="person", description=f"person first seen on {run.camera_id} "
                            f"at {format_ts(segment.t_start)}", first_seen=wall, last_seen=wall, sightings=1,
                            cameras=[run.camera_id])
        else:
            cameras = existing.cameras if run.camera_id in existing.cameras else [*existing.cameras, run.camera_id]
            entity = existing.model_copy(update={"last_seen": max(existing.last_seen, wall),
                                                 "first_seen": min(existing.first_seen or wall, wall),
                                                 "sightings": existing.sightings + 1, "cameras": cameras})
        canonical[entity_id] = entity.id
        if entity.id not in {e.id for e in entities}:
            entities.append(entity)
        run.entities[entity.id] = entity
        run.seen.add(entity.id)
    assigned = [canonical.get(e, e) if e is not None else None for e in ids.assignments]

    analysed = [
        FrameFaces(t=pick.frame.t, width=pick.frame.image_bgr.shape[1], height=pick.frame.image_bgr.shape[0],
                   faces=[f.detection for f in faces[b:e]], entity_ids=assigned[b:e])
        for pick, (b, e) in zip(picks, per_frame)
    ]
    names = {e.id: e.name for e in entities if e.name}
    facts = SegmentFacts(t_start=segment.t_start, t_end=segment.t_end, images=[f.image_bgr for f in segment.frames],
                         analysed=analysed, names=names, first=idx == 0,
                         scene_cut=segment.cut_score >= s.scene_threshold,
                         faces_enabled=run.detector is not None)
    text = run.describer.describe(facts)

    keyframes = [
        Keyframe(id=kf_id, camera_id=run.camera_id, source=src, segment_index=idx, t=pick.frame.t,
                 wall_time=run.wall_clock(pick.frame.t), quality=pick.quality, width=pick.frame.image_bgr.shape[1],
                 height=pick.frame.image_bgr.shape[0],
                 entity_ids=list(dict.fromkeys(e for e in a.entity_ids if e is not None)),
                 jpeg=encode_jpeg(pick.frame.image_bgr, s.jpeg_max_side, s.jpeg_quality))
        for pick, kf_id, a in zip(picks, kf_ids, analysed)
    ]
    entity_ids = [e.id for e in entities]
    observations = [
        Observation(id=stable_id("obs_", src, idx, eid), entity_id=eid, camera_id=run.camera_id, source=src,
                    segment_index=idx, t_start=segment.t_start, t_end=segment.t_end, wall_start=wall,
                    text=text.observations[eid], keyframe_ids=[k.id for k in keyframes if eid in k.entity_ids],
                    confidence=round(_confidence(ids.similarity, canonical, eid), 4))
        for eid in entity_ids if eid in text.observations
    ]
    trace = Trace(id=stable_id("trc_", src, idx), camera_id=run.camera_id, source=src, segment_index=idx,
                  t_start=segment.t_start, t_end=segment.t_end, wall_start=wall, summary=text.summary,
                  entity_ids=entity_ids, keyframe_ids=kf_ids)
    gallery = [g.model_copy(update={"entity_id": canonical.get(g.entity_id, g.entity_id)}) for g in ids.gallery_faces]
    logger.debug("segment %d %.2f–%.2fs: %d key frames, %d faces, entities %s", idx, segment.t_start,
                 segment.t_end, len(keyframes), len(faces), entity_ids)
    return SegmentWrite(source=src, camera_id=run.camera_id, segment_index=idx, trace=trace,
                        observations=observations, keyframes=keyframes, entities=entities, gallery_faces=gallery,
                        source_size=run.size, source_mtime=run.mtime)


def _confidence(similarity: dict[str, float], canonical: dict[str, str], entity_id: str) -> float:
    values = [v for k, v in similarity.items() if canonical.get(k, k) == entity_id]
    return max(values, default=0.0)

