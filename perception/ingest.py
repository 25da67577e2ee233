"""File ingestion: decode → segment → key frames → faces → identity → describe → store.

:func:`ingest_file` is resumable and idempotent:

* The source key is the file's resolved absolute path. The store's ingest log records the
  file's size and mtime; a changed file is reset (its traces, observations and key frames are
  deleted) and ingested from the start.
* Resuming seeks to the ``t_end`` of the last committed segment. That is safe because sampling
  is on an absolute time grid (:mod:`perception.video`) and the segmenter's state resets at
  every cut (:mod:`perception.segment`): the resumed run sees exactly the frames and cuts an
  uninterrupted run would, so segment indices, ids and rows are identical.
* Every id is deterministic (``stable_id`` over source, segment index and position/entity), and
  each segment is one ``store.write_segment`` call, so a re-run upserts the same rows.
* ``stop`` is checked between segments only, so an interrupt never leaves a partial segment.

Wall-clock time of a file segment (``wall_start``) is the file's mtime plus the segment's
media ``t_start``: files carry no reliable recording time, and mtime is stable across re-runs
(a changed mtime means a changed file, which is re-ingested anyway).

The code is blocking; async callers run it with ``anyio.to_thread.run_sync``.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from memory.errors import NotFoundError
from memory.models import (
    Entity,
    EntityKind,
    GalleryFace,
    IngestState,
    Keyframe,
    Observation,
    SegmentWrite,
    Trace,
    stable_id,
)
from perception.describe import FrameFaces, LocalDescriber, SegmentFacts, format_ts
from perception.faces import SFACE_MATCH_THRESHOLD, FaceDetector, FaceEmbedder
from perception.identity import FaceInput, IdentityResolver
from perception.keyframes import encode_jpeg, select_keyframes
from perception.segment import DEFAULT_SCENE_THRESHOLD, Segment, Segmenter
from perception.video import iter_frames, probe

logger = logging.getLogger(__name__)

#: ``progress(done_s, total_s, segments_done)``, called after each segment.
ProgressCallback = Callable[[float, float, int], None]


class IngestStore(Protocol):
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


class IngestReport(BaseModel):
    """What one :func:`ingest_file` call did."""

    source: str
    camera_id: str
    segments_total: int = Field(description="segments of the file known so far (all of them when done)")
    segments_written: int
    segments_skipped: int = Field(description="segments already committed by an earlier run")
    entities: list[str] = Field(default_factory=list, description="entities seen in the segments written")
    seconds: float = Field(description="wall time of this call")
    done: bool = Field(description="the file was ingested to its end")
    interrupted: bool = False


@dataclass
class _Run:
    """Per-call state shared by the segment steps."""

    source: str
    camera_id: str
    size: int
    mtime: float
    settings: IngestSettings
    store: IngestStore
    detector: FaceDetector | None
    embedder: FaceEmbedder | None
    resolver: IdentityResolver
    describer: LocalDescriber = field(default_factory=LocalDescriber)
    entities: dict[str, Entity] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)


def ingest_file(
    path: str | Path,
    store: IngestStore,
    settings: IngestSettings | None = None,
    camera_id: str | None = None,
    progress: ProgressCallback | None = None,
    stop: threading.Event | None = None,
    detector: FaceDetector | None = None,
    embedder: FaceEmbedder | None = None,
) -> IngestReport:
    """Ingest a video file into ``store``, resuming where an earlier run stopped.

    Args:
        path: the video file; its resolved absolute path is the source key.
        store: an open ``memory.MemoryStore``.
        settings: ingestion parameters (defaults when ``None``).
        camera_id: camera label of every row; defaults to the file stem.
        progress: called as ``progress(done_s, total_s, segments_done)`` after each segment.
        stop: when set, ingestion stops cleanly before the next segment.
        detector, embedder: face models to reuse across calls (created lazily otherwise).

    Raises:
        MediaError: the file is missing, unreadable or corrupt.
    """
    started = time.monotonic()
    settings = settings or IngestSettings()
    p = Path(path)
    info = probe(p)  # raises MediaError with "check the path" for a missing file
    p = p.resolve()
    source = str(p)
    stat = p.stat()
    camera = camera_id or p.stem

    state = store.ingest_state(source)
    if state is not None and (state.source_size != stat.st_size or state.source_mtime != stat.st_mtime):
        logger.info("%s changed since it was ingested (size/mtime); re-ingesting from the start", source)
        store.reset_source(source)
        state = None
    resume = store.resume_point(source) if state is not None else None
    skipped = 0 if resume is None else resume + 1
    if state is not None and state.done:
        logger.info("%s already ingested (%d segments); nothing to do", source, skipped)
        return IngestReport(source=source, camera_id=camera, segments_total=skipped, segments_written=0,
                            segments_skipped=skipped, seconds=time.monotonic() - started, done=True)

    if settings.faces:
        detector = detector or FaceDetector()
        embedder = embedder or FaceEmbedder()
        if not (detector.available and embedder.available):
            detector = embedder = None
    else:
        detector = embedder = None
    run = _Run(
        source=source, camera_id=camera, size=stat.st_size, mtime=stat.st_mtime, settings=settings, store=store,
        detector=detector, embedder=embedder,
        resolver=IdentityResolver(store.face_gallery(), store, threshold=settings.face_match_threshold),
    )

    start_s = state.last_t_end if (state is not None and resume is not None) else 0.0
    # Decode from two grid slots earlier: the frame before the resume point primes the segmenter.
    # Any grid time is a safe decode start (see perception.video), so frames and indices match.
    step = 1.0 / settings.sample_fps
    decode_from = max(0, math.floor(start_s * settings.sample_fps + 1e-6) - 2) * step if start_s > 0 else 0.0
    if skipped:
        logger.info("resuming %s after segment %d (t=%.2fs)", source, resume, start_s)
    segmenter = Segmenter(settings.min_segment_s, settings.max_segment_s, settings.scene_threshold,
                          first_index=skipped)
    end_t = info.start_s + info.duration_s
    written = 0
    interrupted = False
    frames = iter_frames(p, settings.sample_fps, start_s=decode_from)
    with contextlib.closing(frames):
        for segment in segmenter.segments(frames, end_t=end_t, start_t=start_s if start_s > 0 else None):
            if stop is not None and stop.is_set():
                interrupted = True
                break
            store.write_segment(_analyse(run, segment))
            written += 1
            if progress is not None:
                progress(max(0.0, segment.t_end - info.start_s), info.duration_s, segment.index + 1)
    if not interrupted:
        store.mark_source_done(source, camera)
    seconds = time.monotonic() - started
    logger.info("ingested %s: %d segments written, %d skipped, %.1fs%s", source, written, skipped, seconds,
                " (interrupted)" if interrupted else "")
    return IngestReport(source=source, camera_id=camera, segments_total=skipped + written, segments_written=written,
                        segments_skipped=skipped, entities=sorted(run.seen), seconds=seconds,
                        done=not interrupted, interrupted=interrupted)


def _entity(run: _Run, entity_id: str) -> Entity | None:
    """The current record of an entity (run cache, then store); ``None`` when unknown."""
    if entity_id in run.entities:
        return run.entities[entity_id]
    try:
        entity = run.store.get_entity(entity_id)
    except NotFoundError:
        return None
    run.entities[entity.id] = entity
    return entity


def _analyse(run: _Run, segment: Segment) -> SegmentWrite:
    """Run key frames, faces, identity and the describer on one segment; build its write."""
    s, src, idx = run.settings, run.source, segment.index
    wall = run.mtime + segment.t_start
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
                 wall_time=run.mtime + pick.frame.t, quality=pick.quality, width=pick.frame.image_bgr.shape[1],
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

