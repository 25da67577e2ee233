"""Per-segment analysis shared by every driver, and the pipeline bundle the drivers run on.

:class:`Pipeline` is the frozen bundle of collaborators one engine hands to every driver: the
store, the perception settings, the per-user :class:`~perception.identity.service.IdentityService`,
the models, the scheduler, the VLM stage, the rule hooks and the post-commit hooks. Only
``plugin.engine.Engine`` builds one; drivers and the worker only read it.

:class:`SegmentAnalyzer` turns one :class:`~perception.segmenting.segment.Segment` into one
:class:`~memory.models.SegmentWrite`: key frames → faces, objects and person bodies on each key
frame, text on the one most likely to hold it, speech over the segment's audio (or the driver's
per-turn transcript) → resolver (the only identity writer) → local describer or VLM. A static,
silent segment (the scheduler's ``skip``) carries the last analysis forward instead. It holds the
per-source state (camera, wall clock, pending identity evidence, the carried analysis) and knows
nothing of where frames come from, so the file and live drivers share it unchanged. What the frames
show (faces, objects, bodies, text) is found by :mod:`perception.drivers.frames`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Protocol

import numpy as np

from memory.models import Entity, EntityKind, GalleryFace, IngestState, Keyframe, Observation, SegmentWrite, Trace, stable_id
from perception.describe.anchoring import Anchor
from perception.describe.local import Description, FrameFaces, LocalDescriber, SegmentFacts, format_ts
from perception.describe.vlm_stage import VLMSegmentResult, VLMSegmentStage, enrich_write, vlm_signals
from perception.detectors.asr import Transcript
from perception.detectors.backends import Perceivers, load_perceivers
from perception.detectors.faces import FaceDetector, FaceEmbedder
from perception.detectors.objects import ObjectDetection
from perception.drivers.frames import add_bodies, identity_faces, perceive_keyframes, read_text
from perception.drivers.speech_objects import (
    mouth_motion,
    object_observation,
    resolve_objects,
    resolve_speech,
    said_by,
    speech_text,
)
from perception.identity.reid import is_profile
from perception.identity.resolver import FaceInput, Resolver, SegmentIdentities, face_turn
from perception.identity.service import IdentityService
from perception.segmenting.keyframes import encode_jpeg, select_keyframes
from perception.segmenting.scheduler import Scheduler, SegmentSignals, audio_rms, segment_motion
from perception.segmenting.segment import Segment
from perception.settings import PerceptionConfig

__all__ = ["AnalysisStore", "Models", "Pipeline", "RuleInterest", "SegmentAnalyzer"]

logger = logging.getLogger(__name__)

#: ``rule_interest(camera_id, people_last_segment, objects_last_segment)``: could an active rule match?
RuleInterest = Callable[[str, int, Sequence[str]], bool]


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


class Models:
    """The per-segment models of one pipeline, loaded on first use and shared by its drivers."""

    def __init__(self, settings: PerceptionConfig) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._faces: tuple[FaceDetector | None, FaceEmbedder | None] | None = None
        self._perceivers: Perceivers | None = None

    def faces(self) -> tuple[FaceDetector | None, FaceEmbedder | None]:
        """YuNet + SFace, or ``(None, None)`` when faces are off or the models are unavailable."""
        with self._lock:
            if self._faces is None:
                self._faces = (None, None)
                if self.settings.faces_on:
                    detector, embedder = _face_models()
                    if detector.available and embedder.available:
                        self._faces = (detector, embedder)
            return self._faces

    def perceivers(self) -> Perceivers:
        """Objects, OCR, speech and body models the settings ask for (each ``None`` when off)."""
        with self._lock:
            if self._perceivers is None:
                self._perceivers = load_perceivers(self.settings)
            return self._perceivers


@lru_cache(maxsize=1)
def _face_models() -> tuple[FaceDetector, FaceEmbedder]:
    """YuNet + SFace, loaded once per process (analysis of one engine runs under its identity lock)."""
    return FaceDetector(), FaceEmbedder()


@dataclass(frozen=True)
class Pipeline:
    """Everything a driver needs to turn segments into memory (built by the engine only)."""

    store: AnalysisStore
    settings: PerceptionConfig
    identity: IdentityService
    models: Models
    #: the segment gate and its counters; ``None`` analyses every segment at the settings' level
    scheduler: Scheduler | None = None
    #: the VLM describer stage (manifest ``vlm``); ``None`` = the local describer
    vlm_stage: VLMSegmentStage | None = None
    #: ``camera_id -> active rule texts`` surfaced into the VLM prompt
    active_rules: Callable[[str], list[str]] | None = None
    #: whether a segment could match an active rule (such a segment is never skipped)
    rule_interest: RuleInterest | None = None
    #: called with each committed write (rules, semantic memory, live perception state)
    on_commit: Callable[[SegmentWrite], None] | None = None
    #: called with ``(source, camera_id)`` when a finite source was ingested to its end
    on_source_done: Callable[[str, str], None] | None = None

    def analyzer(self, source: str, camera_id: str, wall_clock: Callable[[float], float],
                 size: int | None = None, mtime: float | None = None) -> SegmentAnalyzer:
        """A fresh analyzer for one source of this pipeline."""
        return SegmentAnalyzer(source=source, camera_id=camera_id, pipeline=self, wall_clock=wall_clock,
                               size=size, mtime=mtime)

    def commit(self, write: SegmentWrite) -> None:
        """Run the post-commit hooks on a committed write."""
        if self.on_commit is not None:
            self.on_commit(write)

    def source_done(self, source: str, camera_id: str) -> None:
        """Tell the post-commit side that a finite source ended (its last event becomes a chapter)."""
        if self.on_source_done is not None:
            self.on_source_done(source, camera_id)


@dataclass
class SegmentAnalyzer:
    """Analyses the segments of one source into idempotent segment writes.

    ``wall_clock(t)`` maps a media time to wall-clock epoch seconds (files: mtime + t; live
    sources: the capture time). ``size``/``mtime`` identify a file source (``None`` for streams).
    """

    source: str
    camera_id: str
    pipeline: Pipeline
    wall_clock: Callable[[float], float]
    size: int | None = None
    mtime: float | None = None
    describer: LocalDescriber = field(default_factory=LocalDescriber)
    seen: set[str] = field(default_factory=set)
    #: end of the previous segment, how many people and which objects it had (scheduler signals)
    last_t_end: float | None = None
    last_people: int = 0
    last_objects: list[str] = field(default_factory=list)
    #: live_latency: the deferred VLM enrichment of the segment just analysed
    _enrichment: Callable[[SegmentWrite], SegmentWrite | None] | None = None
    #: the last analysed segment's findings, carried onto the static, silent segments after it
    _carry: _Carried | None = None
    #: the frame OCR read last and its lines
    _ocr_last: tuple[np.ndarray, list[str]] | None = None
    #: the key frame whose faces and objects were detected last, with them (faces embedded)
    _perceived: tuple[np.ndarray, list[FaceInput], list[ObjectDetection]] | None = None

    def __post_init__(self) -> None:
        p = self.pipeline
        self.settings, self.store, self.identity = p.settings, p.store, p.identity
        self.scheduler, self.vlm_stage, self.active_rules = p.scheduler, p.vlm_stage, p.active_rules
        self.resolver: Resolver = p.identity.resolver()
        oe = self.settings.object_entities
        self.object_resolver = p.identity.object_resolver(oe.classes, oe.match_threshold, oe.min_box_px)
        self.voice_resolver = p.identity.voice_resolver(getattr(self.settings.speakers, "match_threshold", 0.65))
        self.detector: FaceDetector | None = None
        self.embedder: FaceEmbedder | None = None
        self.perceivers: Perceivers | None = None

    def analyse(self, segment: Segment) -> SegmentWrite:
        """Key frames, faces, objects, text, speech, identity and description of one segment, as one write."""
        if self.perceivers is None:
            self.detector, self.embedder = self.pipeline.models.faces()
            self.perceivers = self.pipeline.models.perceivers()
        self._enrichment = None
        return _analyse(self, segment)

    @property
    def two_phase(self) -> bool:
        """``live_latency`` with a VLM: identities are committed before the VLM describes the segment."""
        return self.scheduler is not None and self.scheduler.mode == "live_latency"

    def commit(self, segment: Segment) -> SegmentWrite:
        """Analyse and store one segment, then run the post-commit hooks; returns the identity-phase write.

        ``offline_quality``: one write, analysis and commit under the identity lock. ``live_latency``
        with a VLM: the identity-critical write is committed first under the lock; the VLM call runs
        outside it and its text (and rule signals) are reconciled in a second write with the same
        ids, which the hooks see as an enrichment. A failed enrichment leaves the first write standing.
        """
        lock = self.identity.lock
        with lock:
            self.identity.check()
            first = self.analyse(segment)
            self.store.write_segment(first)
        self.pipeline.commit(first)
        enrich, self._enrichment = self._enrichment, None
        if enrich is None:
            return first
        try:
            enriched = enrich(first)
        except Exception:  # the VLM path must never lose a committed segment
            logger.exception("enrichment of segment %d failed; keeping the identity-phase write", segment.index)
            return first
        if enriched is not None:
            with lock:
                self.store.write_segment(enriched)
            self.pipeline.commit(enriched)
        return first


def _entity(run: SegmentAnalyzer, entity_id: str) -> Entity | None:
    """The current record of an entity (identity service cache, then store); ``None`` when unknown."""
    return run.identity.entity(entity_id)


@dataclass(frozen=True)
class _Carried:
    """The analysis of the last analysed segment, carried onto static, silent segments after it."""

    frames: list[list[tuple[FaceInput, str | None]]]
    labels: dict[str, int]
    text_lines: list[str]
    similarity: dict[str, float]
    full: bool
    scores: dict[str, float] = field(default_factory=dict)


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
    interest = run.pipeline.rule_interest
    signals = SegmentSignals(
        first_of_event=first, motion=segment_motion([f.image_bgr for f in segment.frames]),
        audio_rms=segment.audio_level if segment.audio_level is not None else audio_rms(segment.audio),
        speech=segment.speech, detections=run.last_people,
        scene_cut=segment.cut_score >= run.settings.scene_threshold,
        rule_relevant=interest is not None and interest(run.camera_id, run.last_people, run.last_objects))
    return run.scheduler.decide(signals).action


def _carry_onto(run: SegmentAnalyzer, carry: _Carried, n_keyframes: int) -> tuple[
        SegmentIdentities, list[FaceInput], list[tuple[int, int]]]:
    """The carried faces laid onto ``n_keyframes`` new key frames; entities forgotten since are dropped.

    No resolver call: carrying forward is no new identity evidence, so it writes no gallery slot
    and no decision.
    """
    faces: list[FaceInput] = []
    assignments: list[str | None] = []
    per_frame: list[tuple[int, int]] = []
    for k in range(n_keyframes):
        start = len(faces)
        for face, entity_id in carry.frames[min(k, len(carry.frames) - 1)] if carry.frames else []:
            faces.append(face)
            assignments.append(entity_id if entity_id is not None and run.identity.entity(entity_id) is not None
                               else None)
        per_frame.append((start, len(faces)))
    kept = {e for e in assignments if e is not None}
    return (SegmentIdentities(assignments=assignments, similarity={k: v for k, v in carry.similarity.items() if k in kept}),
            faces, per_frame)


def _transcribe(run: SegmentAnalyzer, segment: Segment) -> Transcript:
    models = run.perceivers or Perceivers()
    if models.asr is None or not getattr(segment, "speech", True):
        return Transcript()
    if segment.transcript is not None:  # the driver transcribes whole speech turns (files)
        return segment.transcript()
    audio = getattr(segment, "audio", None)
    if audio is None or len(audio) == 0:
        return Transcript()
    return models.asr.transcribe(audio).shifted(segment.t_start)


def _analyse(run: SegmentAnalyzer, segment: Segment) -> SegmentWrite:
    """Run every perceiver, the resolver and the describer on one segment; build its write."""
    s, src, idx = run.settings, run.source, segment.index
    wall = run.wall_clock(segment.t_start)
    action = _gate(run, segment)
    carry = run._carry if action == "skip" else None
    # A carried segment's key frames are only for the record: choose among a few frames, not all.
    frames = segment.frames if carry is None else segment.frames[::max(1, len(segment.frames) // 4)]
    picks = select_keyframes(frames, s.keyframes_per_segment, s.keyframe_min_gap_s)
    kf_ids = [stable_id("kf_", src, idx, pos) for pos in range(len(picks))]
    images = [p.frame.image_bgr for p in picks]

    deep = action == "full"  # detectors, re-ID and speech; "light" still gets the (VLM) describer
    faces: list[FaceInput] = []
    per_frame: list[tuple[int, int]] = []  # (start, end) into faces for each key frame
    labels: dict[str, int] = {}  # object label → most seen on one key frame
    scores: dict[str, float] = {}  # object label → best detection score
    text_lines: list[str] = []
    transcript = Transcript()
    frame_objects: list[tuple[np.ndarray, float, str, list[ObjectDetection]]] = []
    extra: list[FaceInput] = []
    if carry is not None:  # static and silent: what the last analysis saw is still there
        ids, faces, per_frame = _carry_onto(run, carry, len(picks))
        labels, text_lines, scores = dict(carry.labels), list(carry.text_lines), dict(carry.scores)
    else:
        if deep:
            found = perceive_keyframes(run, images, picks, kf_ids)
            for image, p, kf_id, (fs, objects) in zip(images, picks, kf_ids, found):
                frame_objects.append((image, p.frame.t, kf_id, objects))
                start = len(faces)
                faces.extend(add_bodies(run, fs, image, objects))
                per_frame.append((start, len(faces)))
                for label in dict.fromkeys(o.label for o in objects):
                    labels[label] = max(labels.get(label, 0), sum(1 for o in objects if o.label == label))
                for o in objects:
                    scores[o.label] = max(scores.get(o.label, 0.0), round(float(o.score), 4))
            text_lines = read_text(run, images)
            transcript = _transcribe(run, segment)
        else:
            per_frame = [(0, 0)] * len(picks)
        extra = identity_faces(run, segment, images, faces) if deep else []
        ids = run.resolver.resolve(faces + extra, src, idx, now=wall, camera_id=run.camera_id)
    objs = resolve_objects(run, frame_objects, src, idx, wall)
    speech = None
    if deep and carry is None:
        on_screen = ids.entity_ids
        talking = mouth_motion([(f.t, f.image_bgr) for f in segment.frames], faces + extra, ids.assignments) \
            if len(on_screen) > 1 else None
        # a face seen only in profile does not show whether its mouth speaks: it cannot claim a voice alone
        facing = {e for f, e in zip(faces + extra, ids.assignments)
                  if e is not None and not is_profile(face_turn(f.detection))}
        speech = resolve_speech(run, segment, transcript, on_screen, src, idx, wall, talking=talking,
                                facing=facing)
    heard = [e for e in (speech.voices.entities if speech else {}) if e not in ids.entity_ids]
    run.last_t_end, run.last_people = segment.t_end, max(len(ids.entity_ids), labels.get("person", 0))
    run.last_objects = list(labels)

    # Entities: follow merges, then update last_seen once per segment (sightings: the store counts).
    canonical: dict[str, str] = {}
    entities: list[Entity] = []
    for entity_id in [*ids.entity_ids, *heard, *objs.entity_ids]:
        existing = None if entity_id in ids.new_entity_ids or entity_id in objs.new_entity_ids \
            else _entity(run, entity_id)
        if existing is None:
            what = objs.labels.get(entity_id, "person")
            entity = Entity(id=entity_id, kind="object" if entity_id in objs.labels else "person",
                            description=f"{what} first seen on {run.camera_id} at {format_ts(segment.t_start)}",
                            first_seen=wall, last_seen=wall, sightings=1, cameras=[run.camera_id])
        else:
            cameras = existing.cameras if run.camera_id in existing.cameras else [*existing.cameras, run.camera_id]
            entity = existing.model_copy(update={"last_seen": max(existing.last_seen, wall),
                                                 "first_seen": min(existing.first_seen or wall, wall),
                                                 "sightings": existing.sightings + 1, "cameras": cameras})
        canonical[entity_id] = entity.id
        if entity.id not in {e.id for e in entities}:
            entities.append(entity)
        run.identity.remember(entity)
        run.seen.add(entity.id)
    assigned = [canonical.get(e, e) if e is not None else None for e in ids.assignments]
    models = run.perceivers or Perceivers()
    full = carry.full if carry is not None else deep and (run.detector is not None or models.objects is not None)
    if carry is None:
        run._carry = _Carried(frames=[[(faces[i], assigned[i]) for i in range(b, e)] for b, e in per_frame],
                              labels=labels, text_lines=text_lines, similarity=dict(ids.similarity), full=full,
                              scores=scores)

    analysed = [
        FrameFaces(t=pick.frame.t, width=pick.frame.image_bgr.shape[1], height=pick.frame.image_bgr.shape[0],
                   faces=[f.detection for f in faces[b:e]], entity_ids=assigned[b:e])
        for pick, (b, e) in zip(picks, per_frame)
    ]
    names = {e.id: e.name for e in entities if e.name}
    if speech is not None and speech.utterances:
        spoken, quotes = speech_text(speech, {canonical.get(k, k): v for k, v in names.items()})
        # the whole sentences the segment's words were part of stay beside its speaker-labelled utterances
        quotes += [q for q in transcript.sentences if q not in transcript.text]
        transcript = type(transcript)(spoken, quotes, transcript.words)
    facts = SegmentFacts(t_start=segment.t_start, t_end=segment.t_end, images=[f.image_bgr for f in segment.frames],
                         analysed=analysed, names=names, first=idx == 0,
                         scene_cut=segment.cut_score >= s.scene_threshold,
                         faces_enabled=run.detector is not None, objects=labels, text_lines=text_lines,
                         transcript=transcript.text)
    use_vlm = run.vlm_stage is not None and action != "skip"
    vlm: VLMSegmentResult | None = None
    if use_vlm and not run.two_phase:
        vlm = _vlm_result(run, facts, [p.frame.image_bgr for p in picks], faces, per_frame, assigned,
                          [e.id for e in entities])
        text = vlm.description
    else:
        text = run.describer.describe(facts)
    if objs.entity_ids:  # remembered things by id, so a search for "the cat" reaches its entity
        text.summary += " Object entities: " + ", ".join(
            f"{canonical.get(e, e)} ({objs.labels[e]})" for e in objs.entity_ids) + "."
    if use_vlm and run.two_phase:  # live_latency: commit identities now, let the VLM enrich the text after
        images, entity_list = [p.frame.image_bgr for p in picks], [e.id for e in entities]
        run._enrichment = lambda first: enrich_write(first, _vlm_result(run, facts, images, faces, per_frame,
                                                                        assigned, entity_list))

    on_frame = {kf: [canonical.get(e, e) for s, e in zip(objs.sightings, objs.assignments)
                     if e is not None and s.keyframe_id == kf] for kf in kf_ids}
    keyframes = [
        Keyframe(id=kf_id, camera_id=run.camera_id, source=src, segment_index=idx, t=pick.frame.t,
                 wall_time=run.wall_clock(pick.frame.t), quality=pick.quality, width=pick.frame.image_bgr.shape[1],
                 height=pick.frame.image_bgr.shape[0],
                 entity_ids=list(dict.fromkeys([*(e for e in a.entity_ids if e is not None), *on_frame[kf_id]])),
                 jpeg=encode_jpeg(pick.frame.image_bgr, s.jpeg_max_side, s.jpeg_quality))
        for pick, kf_id, a in zip(picks, kf_ids, analysed)
    ]
    entity_ids = [e.id for e in entities]
    people = [e.id for e in entities if e.kind == "person"]
    texts = dict(text.observations)
    for e in entities:
        if e.id in texts:
            continue
        raw = next((k for k, v in canonical.items() if v == e.id and k in objs.labels), None)
        if raw is not None:
            texts[e.id] = object_observation(e.id, objs.labels[raw], e.name, segment.t_start, segment.t_end,
                                             run.camera_id, objs.sightings, objs.assignments, people)
        elif speech is not None and e.id in speech.voices.entities:
            texts[e.id] = (f"{e.name + ' (' + e.id + ')' if e.name else e.id} heard (voice, not on screen) "
                           f"{format_ts(segment.t_start)}–{format_ts(segment.t_end)} on {run.camera_id}.")
    if speech is not None:
        for eid in list(texts):
            words = said_by(speech, eid) or next((said_by(speech, k) for k, v in canonical.items()
                                                  if v == eid and k != eid), "")
            if words:
                texts[eid] += f' Said: "{words}"'
    similarity = {**ids.similarity, **objs.similarity, **(speech.voices.entities if speech else {})}
    observations = [
        Observation(id=stable_id("obs_", src, idx, eid), entity_id=eid, camera_id=run.camera_id, source=src,
                    segment_index=idx, t_start=segment.t_start, t_end=segment.t_end, wall_start=wall,
                    text=texts[eid], keyframe_ids=[k.id for k in keyframes if eid in k.entity_ids],
                    confidence=round(_confidence(similarity, canonical, eid), 4))
        for eid in entity_ids if eid in texts
    ]
    trace = Trace(id=stable_id("trc_", src, idx), camera_id=run.camera_id, source=src, segment_index=idx,
                  t_start=segment.t_start, t_end=segment.t_end, wall_start=wall, summary=text.summary,
                  entity_ids=entity_ids, objects=list(labels), ocr_text=" | ".join(text_lines),
                  transcript=transcript.text, quotes=transcript.sentences, keyframe_ids=kf_ids,
                  level="full" if full else "light",
                  speakers=[canonical.get(x, x) for x in speech.speakers] if speech is not None else [])
    gallery = [g.model_copy(update={"entity_id": canonical.get(g.entity_id, g.entity_id)}) for g in ids.gallery_faces]
    bodies = [g.model_copy(update={"entity_id": canonical.get(g.entity_id, g.entity_id)}) for g in ids.gallery_bodies]
    decisions = [d.model_copy(update={"entity_id": canonical.get(d.entity_id, d.entity_id)})
                 for d in [*ids.decisions, *objs.decisions, *(speech.voices.decisions if speech else [])]]
    voices = [g.model_copy(update={"entity_id": canonical.get(g.entity_id, g.entity_id)})
              for g in (speech.voices.gallery if speech else [])]
    logger.debug("segment %d %.2f–%.2fs: %d key frames, %d faces, entities %s, objects %s", idx, segment.t_start,
                 segment.t_end, len(keyframes), len(faces), entity_ids, list(labels))
    return SegmentWrite(source=src, camera_id=run.camera_id, segment_index=idx, trace=trace,
                        observations=observations, keyframes=keyframes, entities=entities, gallery_faces=gallery,
                        gallery_bodies=bodies, gallery_voices=voices, gallery_objects=objs.gallery,
                        decisions=decisions, source_size=run.size, source_mtime=run.mtime,
                        vlm_signals=vlm_signals(vlm), risk=vlm.risk if vlm is not None else "none",
                        object_scores=scores,
                        seen_at=_first_seen(faces + extra, assigned, frame_objects, canonical, segment.t_start),
                        people=max([len(people), labels.get("person", 0), *(e - b for b, e in per_frame)]))


def _first_seen(faces: list[FaceInput], assigned: list[str | None], frame_objects: list[tuple[Any, float, str, Any]],
                canonical: dict[str, str], t0: float) -> dict[str, float]:
    """Entity id or detector class → the first media second it was seen in the segment (reminders' times)."""
    seen: dict[str, float] = {}
    for face, eid in zip(faces, assigned):
        if eid is not None:
            seen[eid] = min(seen.get(eid, face.frame_t), face.frame_t)
    for _image, t, _kf, objects in frame_objects:
        for o in objects:
            seen[o.label] = min(seen.get(o.label, t), t)
    return {canonical.get(k, k): round(max(v, t0), 3) for k, v in seen.items()}


def _confidence(similarity: dict[str, float], canonical: dict[str, str], entity_id: str) -> float:
    values = [v for k, v in similarity.items() if canonical.get(k, k) == entity_id]
    return max(values, default=0.0)


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
