"""Per-segment analysis shared by every driver (files now, live streams later).

:class:`SegmentAnalyzer` turns one :class:`~perception.segment.Segment` into one
:class:`~memory.models.SegmentWrite`: key frames → faces, objects, person bodies and text on each
key frame, speech over the segment's audio → resolver (the only identity writer) → local
describer. Optional models come from :func:`perception.backends.load_perceivers`. It holds
the per-source state (camera, wall clock, entity cache) and knows nothing of where frames come
from, so a file driver (:mod:`perception.ingest`) and a stream driver share it unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Protocol

import cv2
import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from memory.errors import NotFoundError
from memory.models import Entity, EntityKind, GalleryFace, IngestState, Keyframe, Observation, SegmentWrite, Trace, stable_id
from perception.anchoring import Anchor
from perception.asr import Transcript
from perception.backends import Perceivers, load_perceivers
from perception.body import body_quality
from perception.describe import Description, FrameFaces, LocalDescriber, SegmentFacts, format_ts
from perception.faces import SFACE_MATCH_THRESHOLD, FaceDetector, FaceEmbedder
from perception.identity import FaceInput, IdentityResolver
from perception.keyframes import encode_jpeg, select_keyframes
from perception.objects import ObjectDetection
from perception.reid import Slot, unit
from perception.resolver import Resolver
from perception.scheduler import Scheduler, SegmentSignals, audio_rms, segment_motion
from perception.segment import DEFAULT_SCENE_THRESHOLD, Segment
from perception.vlm_describer import VLMSegmentResult, VLMSegmentStage, enrich_write

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
    def next_entity_id(self, kind: EntityKind, key: str | None = None) -> str: ...
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
    objects: bool = Field(True, description="detect objects on key frames (vendored SSD unless object_model)")
    object_model: str | None = Field(None, description="a YOLO-style ONNX detector instead of the SSD")
    object_labels: str | None = Field(None, description="label file of object_model, one name per line")
    object_threshold: float = Field(0.5, ge=0, le=1, description="minimum object score")
    ocr: bool = Field(True, description="read text on key frames (extra `ocr`)")
    asr: bool = Field(True, description="transcribe segment audio (extra `asr`)")
    asr_model_dir: str | None = Field(None, description="a CTranslate2 Whisper folder instead of tiny.en")
    body: bool = Field(True, description="describe person boxes for the body gallery")
    body_model: str | None = Field(None, description="a person re-ID ONNX model instead of colour/texture")
    identity_frames: int = Field(
        8, ge=0, le=32, description="sampled frames per segment, besides key frames, searched for faces: more "
        "poses of each person reach the resolver (identity evidence only; nothing else runs on them)")


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
    #: optional models (objects, OCR, ASR, body); ``None`` = built from ``settings`` on first use
    perceivers: Perceivers | None = None
    #: the VLM stage (manifest ``vlm`` set): its text replaces the local describer's; ``None`` = local only
    vlm_stage: VLMSegmentStage | None = None
    #: active rule texts of a camera, surfaced into the VLM prompt
    active_rules: Callable[[str], list[str]] | None = None
    #: the segment gate (``live_latency`` skips static/silent segments); ``None`` = analyse every one
    scheduler: Scheduler | None = None
    #: end of the previous segment and how many people it had (scheduler signals)
    last_t_end: float | None = None
    last_people: int = 0
    #: live_latency: the deferred VLM enrichment of the segment just analysed
    _enrichment: Callable[[SegmentWrite], SegmentWrite | None] | None = None

    def __post_init__(self) -> None:
        body_gallery = getattr(self.store, "body_gallery", None)
        if isinstance(self.resolver, Resolver) and not self.resolver.bodies.entities and body_gallery is not None:
            for row in body_gallery():
                self.resolver.bodies.seed(row.entity_id, Slot(row.id, unit(np.asarray(row.embedding)), row.quality,
                                                              row.keyframe_id, row.created_at))

    def analyse(self, segment: Segment) -> SegmentWrite:
        """Key frames, faces, objects, text, speech, identity and description of one segment, as one write."""
        if self.perceivers is None:
            self.perceivers = load_perceivers(self.settings)
        self._enrichment = None
        return _analyse(self, segment)

    @property
    def two_phase(self) -> bool:
        """``live_latency`` with a VLM: identities are committed before the VLM describes the segment."""
        return self.scheduler is not None and self.scheduler.mode == "live_latency"

    def commit(self, segment: Segment, store: AnalysisStore,
               lock: AbstractContextManager[Any] | None = None) -> SegmentWrite:
        """Analyse and store one segment; returns the identity-phase write (what hooks should see).

        ``offline_quality``: one write, analysis and commit under ``lock``. ``live_latency`` with a
        VLM: the identity-critical write is committed first under ``lock``; the VLM call runs
        outside it and its text is reconciled in a second write (same ids). A failed enrichment
        leaves the first write standing.
        """
        with lock or nullcontext():
            first = self.analyse(segment)
            store.write_segment(first)
        enrich, self._enrichment = self._enrichment, None
        if enrich is None:
            return first
        try:
            enriched = enrich(first)
        except Exception:  # the VLM path must never lose a committed segment
            logger.exception("enrichment of segment %d failed; keeping the identity-phase write", segment.index)
            return first
        if enriched is not None:
            with lock or nullcontext():
                store.write_segment(enriched)
        return first


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


def _perceive_frame(run: SegmentAnalyzer, image: np.ndarray, t: float, kf_id: str) -> tuple[
        list[FaceInput], list[ObjectDetection], list[str]]:
    """Faces (with body evidence), objects and text lines of one key frame."""
    models = run.perceivers or Perceivers()
    objects: list[ObjectDetection] = models.objects.detect(image) if models.objects is not None else []
    people = [o for o in objects if o.label == "person"]
    faces: list[FaceInput] = []
    if run.detector is not None and run.embedder is not None:
        for det in run.detector.detect(image):
            # Only faces the resolver may use are embedded; the rest are still counted.
            vec = run.embedder.embed(image, det) if run.resolver.identifiable(det) else None
            body, body_q = None, 0.0
            box = _person_box(det.box, people)
            if vec is not None and box is not None and models.body is not None:
                body = models.body.describe(image, box.box)
                body_q = body_quality(box.box, box.score)
            faces.append(FaceInput(det, vec, t, kf_id, body=body, body_quality=body_q,
                                   sharpness=_face_sharpness(image, det.box), frame_shape=image.shape[:2]))
    lines = [line.text for line in models.ocr.read(image)] if models.ocr is not None else []
    return faces, objects, lines


#: a gap in media time longer than this starts a new event (the scheduler always analyses its first segment)
EVENT_GAP_S = 60.0


def _gate(run: SegmentAnalyzer, segment: Segment) -> str:
    """``skip`` / ``light`` / ``full`` for this segment; the scheduler decides and counts.

    ``full`` runs every configured model; ``light`` only describes the key frames (with the VLM
    when one is configured); ``skip`` keeps the local describer. Every segment is still committed,
    with its key frames, so the timeline has no holes and resuming stays exact.
    """
    if run.scheduler is None:
        return "full"
    first = run.last_t_end is None or segment.t_start - run.last_t_end > EVENT_GAP_S
    signals = SegmentSignals(
        first_of_event=first, motion=segment_motion([f.image_bgr for f in segment.frames]),
        audio_rms=audio_rms(segment.audio), speech=segment.speech, detections=run.last_people,
        scene_cut=segment.cut_score >= run.settings.scene_threshold)
    return run.scheduler.decide(signals).action


def _identity_faces(run: SegmentAnalyzer, segment: Segment, key_frames: set[int]) -> list[FaceInput]:
    """Faces on up to ``identity_frames`` evenly spaced non-key frames (no key-frame id, no body)."""
    n = run.settings.identity_frames
    if n == 0 or run.detector is None or run.embedder is None:
        return []
    others = [f for f in segment.frames if id(f) not in key_frames]
    if len(others) > n:
        others = [others[round(i * (len(others) - 1) / max(n - 1, 1))] for i in range(n)]
    faces: list[FaceInput] = []
    for frame in others:
        image = frame.image_bgr
        for det in run.detector.detect(image):
            if run.resolver.identifiable(det):
                faces.append(FaceInput(det, run.embedder.embed(image, det), frame.t, None,
                                       sharpness=_face_sharpness(image, det.box), frame_shape=image.shape[:2]))
    return faces


def _person_box(face_box: tuple[int, int, int, int], people: list[ObjectDetection]) -> ObjectDetection | None:
    """The smallest person box that contains the face's centre."""
    cx, cy = face_box[0] + face_box[2] / 2, face_box[1] + face_box[3] / 2
    inside = [p for p in people if p.box[0] <= cx <= p.box[0] + p.box[2] and p.box[1] <= cy <= p.box[1] + p.box[3]]
    return min(inside, key=lambda p: p.box[2] * p.box[3], default=None)


def _face_sharpness(image: np.ndarray, box: tuple[int, int, int, int]) -> float | None:
    x, y, w, h = box
    crop = image[max(0, y):max(0, y + h), max(0, x):max(0, x + w)]
    if crop.size == 0:
        return None
    grey = cv2.cvtColor(cv2.resize(crop, (64, 64), interpolation=cv2.INTER_AREA), cv2.COLOR_BGR2GRAY)
    return float(cv2.Laplacian(grey, cv2.CV_64F).var())


def _transcribe(run: SegmentAnalyzer, segment: Segment) -> Transcript:
    models = run.perceivers or Perceivers()
    audio = getattr(segment, "audio", None)
    if models.asr is None or audio is None or len(audio) == 0 or not getattr(segment, "speech", True):
        return Transcript()
    return models.asr.transcribe(audio).shifted(segment.t_start)


def _analyse(run: SegmentAnalyzer, segment: Segment) -> SegmentWrite:
    """Run every perceiver, the resolver and the describer on one segment; build its write."""
    s, src, idx = run.settings, run.source, segment.index
    wall = run.wall_clock(segment.t_start)
    picks = select_keyframes(segment.frames, s.keyframes_per_segment, s.keyframe_min_gap_s)
    kf_ids = [stable_id("kf_", src, idx, pos) for pos in range(len(picks))]

    action = _gate(run, segment)
    deep = action == "full"  # detectors, re-ID and speech; "light" still gets the (VLM) describer
    faces: list[FaceInput] = []
    per_frame: list[tuple[int, int]] = []  # (start, end) into faces for each key frame
    labels: dict[str, int] = {}  # object label → most seen on one key frame
    text_lines: list[str] = []
    for pick, kf_id in zip(picks, kf_ids):
        found, objects, lines = _perceive_frame(run, pick.frame.image_bgr, pick.frame.t, kf_id) if deep else ([], [], [])
        per_frame.append((len(faces), len(faces) + len(found)))
        faces.extend(found)
        for label in dict.fromkeys(o.label for o in objects):
            labels[label] = max(labels.get(label, 0), sum(1 for o in objects if o.label == label))
        text_lines.extend(line for line in lines if line not in text_lines)
    transcript = _transcribe(run, segment) if deep else Transcript()
    extra = _identity_faces(run, segment, {id(p.frame) for p in picks}) if deep else []
    ids = run.resolver.resolve(faces + extra, src, idx, now=wall, camera_id=run.camera_id)
    run.last_t_end, run.last_people = segment.t_end, len(ids.entity_ids)

    # Entities: follow merges, then update last_seen once per segment (sightings: the store counts).
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
                         faces_enabled=run.detector is not None, objects=labels, text_lines=text_lines,
                         transcript=transcript.text)
    use_vlm = run.vlm_stage is not None and action != "skip"
    if use_vlm and not run.two_phase:
        text = _vlm_describe(run, facts, [p.frame.image_bgr for p in picks], faces, per_frame, assigned,
                             [e.id for e in entities])
    else:
        text = run.describer.describe(facts)
    if use_vlm and run.two_phase:  # live_latency: commit identities now, let the VLM enrich the text after
        images, entity_list = [p.frame.image_bgr for p in picks], [e.id for e in entities]
        run._enrichment = lambda first: enrich_write(first, _vlm_result(run, facts, images, faces, per_frame,
                                                                        assigned, entity_list))

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
    models = run.perceivers or Perceivers()
    full = deep and (run.detector is not None or models.objects is not None)
    trace = Trace(id=stable_id("trc_", src, idx), camera_id=run.camera_id, source=src, segment_index=idx,
                  t_start=segment.t_start, t_end=segment.t_end, wall_start=wall, summary=text.summary,
                  entity_ids=entity_ids, objects=list(labels), ocr_text=" | ".join(text_lines),
                  transcript=transcript.text, quotes=transcript.sentences, keyframe_ids=kf_ids,
                  level="full" if full else "light")
    gallery = [g.model_copy(update={"entity_id": canonical.get(g.entity_id, g.entity_id)}) for g in ids.gallery_faces]
    bodies = [g.model_copy(update={"entity_id": canonical.get(g.entity_id, g.entity_id)}) for g in ids.gallery_bodies]
    decisions = [d.model_copy(update={"entity_id": canonical.get(d.entity_id, d.entity_id)}) for d in ids.decisions]
    logger.debug("segment %d %.2f–%.2fs: %d key frames, %d faces, entities %s, objects %s", idx, segment.t_start,
                 segment.t_end, len(keyframes), len(faces), entity_ids, list(labels))
    return SegmentWrite(source=src, camera_id=run.camera_id, segment_index=idx, trace=trace,
                        observations=observations, keyframes=keyframes, entities=entities, gallery_faces=gallery,
                        gallery_bodies=bodies, decisions=decisions, source_size=run.size, source_mtime=run.mtime)


def _confidence(similarity: dict[str, float], canonical: dict[str, str], entity_id: str) -> float:
    values = [v for k, v in similarity.items() if canonical.get(k, k) == entity_id]
    return max(values, default=0.0)


def _vlm_describe(run: SegmentAnalyzer, facts: SegmentFacts, keyframes: list[np.ndarray], faces: list[FaceInput],
                  per_frame: list[tuple[int, int]], assigned: list[str | None], entity_ids: list[str]) -> Description:
    """The VLM stage's description, anchored to this segment's face detections.

    The stage falls back to the local describer on any VLM failure, so a segment is never lost
    to a model outage; identities stay the resolver's (anchors carry its committed entity ids).
    """
    return _vlm_result(run, facts, keyframes, faces, per_frame, assigned, entity_ids).description


def _vlm_result(run: SegmentAnalyzer, facts: SegmentFacts, keyframes: list[np.ndarray], faces: list[FaceInput],
                per_frame: list[tuple[int, int]], assigned: list[str | None], entity_ids: list[str]) -> VLMSegmentResult:
    """Run the VLM stage on one segment and update its working memory."""
    stage = run.vlm_stage
    assert stage is not None
    anchors = [Anchor(f"A{i + 1}", "face", k, tuple(int(v) for v in faces[i].detection.box[:4]),
                      candidates=tuple(entity_ids), entity_id=assigned[i])
               for k, (b, e) in enumerate(per_frame) for i in range(b, e)]
    rules = run.active_rules(run.camera_id) if run.active_rules is not None else []
    context = stage.context(run.camera_id, reid_hits=entity_ids, rules=rules)
    result = stage.describe(facts, anchors, context, keyframes=keyframes,
                            known_entities=[*entity_ids, *stage.builder.memory(run.camera_id).entities])
    stage.commit(run.camera_id, facts, result, entity_ids=entity_ids)
    return result
