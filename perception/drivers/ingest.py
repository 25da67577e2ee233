"""File ingestion: decode → segment → key frames → faces → identity → describe → store.

:func:`ingest_file` is resumable and idempotent:

* The source key is the file's resolved absolute path. The store's ingest log records the
  file's size and mtime; a changed file is reset (its traces, observations and key frames are
  deleted) and ingested from the start.
* Resuming seeks to the ``t_end`` of the last committed segment. That is safe because sampling
  is on an absolute time grid (:mod:`perception.media.video`) and the segmenter's state resets at
  every cut (:mod:`perception.segmenting.segment`): the resumed run sees exactly the frames and cuts an
  uninterrupted run would, so segment indices, ids and rows are identical.
* Every id is deterministic (``stable_id`` over source, segment index and position/entity), and
  each segment is one ``store.write_segment`` call, so a re-run upserts the same rows.
* ``stop`` is checked between segments only, so an interrupt never leaves a partial segment.
* Frames come from a :class:`~perception.media.gateway.Gateway` in ``offline_quality`` mode (decode runs
  on its own thread, nothing is dropped). Voice activity over the whole audio track is computed
  once up front (Silero VAD) in the same decode pass that measures loudness, so speech-turn cuts are
  the same however a run was resumed; each segment carries ``Segment.speech``, its loudness
  (``Segment.audio_level``) and its share of the speech turns' transcripts and diarization.

:func:`ingest_live` is the driver for live sources: it consumes a running gateway, detects voice
activity on the stream's audio as it arrives, and commits each closed segment with the same
:class:`~perception.drivers.analyzer.SegmentAnalyzer`. Its segment indices and media time continue from the
source's ``ingest_log`` entry, so a restarted capture never overwrites earlier segments.

Wall-clock time of a file segment (``wall_start``) is the file's mtime plus the segment's
media ``t_start``: files carry no reliable recording time, and mtime is stable across re-runs
(a changed mtime means a changed file, which is re-ingested anyway).

The code is blocking; async callers run it with ``anyio.to_thread.run_sync``.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from functools import lru_cache, partial
from pathlib import Path

import numpy as np
from pydantic import BaseModel, Field

from memory.models import SegmentWrite
from perception.drivers import heap
from perception.drivers.analyzer import AnalysisStore, Pipeline
from perception.media.audio import AudioBuffer, SileroVAD, SpeechTrack, scan_audio
from perception.media.damage import read_damage, readable_end
from perception.detectors.asr import SAMPLE_RATE, TurnTranscripts, WhisperTranscriber, speech_turns
from perception.detectors.speakers import Diarizer, TurnDiarization
from perception.errors import MediaError
from perception.media.audio import decode_audio
from perception.media.gateway import AudioChunk, Gateway
from perception.media.sources import AVSource, Source, SourceError
from perception.media.video import Frame, probe
from perception.segmenting.segment import Segment, Segmenter
from perception.settings import PerceptionConfig

__all__ = ["IngestReport", "ProgressCallback", "ingest_file", "ingest_live", "live_start_point", "segmenter_for"]

#: longest stretch of media (seconds) a live speech turn's segments wait to be transcribed together (one
#: Whisper window holds 29 s)
TURN_HOLD_S = 28.0
#: a pause shorter than this (seconds) does not end a live speech turn: a held turn cut at every short
#: pause lost the words at its edges (WER 0.53 on the bench clip's GRID + JFK speech, 0.28 held across
#: pauses < 3 s, the file path 0.23) and paid a Whisper window per piece (9 calls, 5 held)
TURN_GAP_S = 3.0

logger = logging.getLogger(__name__)

#: ``progress(done_s, total_s, segments_done)``, called after each segment.
ProgressCallback = Callable[[float, float, int], None]


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
    bad_packets: int = Field(0, description="undecodable audio/video packets skipped")
    partial: bool = Field(False, description="the file ends (or breaks off) before its stated duration")
    readable_s: float | None = Field(None, description="media time up to which a partial file was readable")



def segmenter_for(settings: PerceptionConfig, first_index: int = 0) -> Segmenter:
    """The segmenter the settings describe (scene, motion and speech-turn cuts)."""
    return Segmenter(settings.min_segment_s, settings.max_segment_s, settings.scene_threshold,
                     first_index=first_index, motion_threshold=settings.motion_threshold,
                     motion_hold_s=settings.motion_hold_s,
                     max_still_s=max(settings.max_segment_s, settings.max_still_segment_s))


def _vad() -> SileroVAD | None:
    try:
        return SileroVAD()
    except (MediaError, OSError) as exc:
        logger.warning("voice activity detection disabled: %s", exc)
        return None


def _overlaps(intervals: list[tuple[float, float]], start: float, end: float) -> bool:
    return any(a < end and b > start for a, b in intervals)


class _TurnSpeech:
    """Speech-to-text and diarization of whole speech turns, shared out to the segments they span.

    Both drivers use it: a file over its whole voice activity, a live capture over each batch of
    segments it held while someone talked. ``asr`` / ``diarizer`` may be None (that model is off).
    """

    def __init__(self, asr: WhisperTranscriber | None, diarizer: Diarizer | None,
                 intervals: list[tuple[float, float]], audio: Callable[[float, float], np.ndarray],
                 pad_s: float | None = None) -> None:
        pad = {} if pad_s is None else {"pad_s": pad_s}
        self.turns = TurnTranscripts(asr, intervals, audio, **pad) if asr is not None else None
        self.voices = TurnDiarization(diarizer, speech_turns(intervals), audio, **pad) if diarizer is not None \
            else None

    def attach(self, segment: Segment) -> None:
        """Give ``segment`` its share of the turns' words and, when it holds speech, of their voices."""
        if self.turns is not None:
            segment.transcript = partial(self.turns.span, segment.t_start, segment.t_end)
        if self.voices is not None and segment.speech:
            segment.diarization = partial(self.voices.span, segment.t_start, segment.t_end)


def ingest_file(
    path: str | Path,
    pipeline: Pipeline,
    camera_id: str | None = None,
    progress: ProgressCallback | None = None,
    stop: threading.Event | None = None,
    on_segment: Callable[[SegmentWrite], None] | None = None,
) -> IngestReport:
    """Ingest a video file through ``pipeline``, resuming where an earlier run stopped.

    Args:
        path: the video file; its resolved absolute path is the source key.
        pipeline: the engine's pipeline (store, settings, identity service, models, hooks).
        camera_id: camera label of every row; defaults to the file stem.
        progress: called as ``progress(done_s, total_s, segments_done)`` after each segment.
        stop: when set, ingestion stops cleanly before the next segment.
        on_segment: called with each committed write (the caller's own accounting).

    Each committed segment goes through ``pipeline.on_commit``; when the file is ingested to its
    end, ``pipeline.on_source_done`` is called once.

    Raises:
        MediaError: the file is missing, unreadable or corrupt (a ``SourceError`` when decoding
            fails part-way).
    """
    started = time.monotonic()
    store, settings = pipeline.store, pipeline.settings
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

    mtime = stat.st_mtime
    run = pipeline.analyzer(source, camera, wall_clock=lambda t: mtime + t, size=stat.st_size, mtime=mtime)
    vad = _vad() if info.has_audio else None
    scan = scan_audio(p, vad) if info.has_audio else None
    intervals = scan.intervals if scan is not None else []

    start_s = state.last_t_end if (state is not None and resume is not None) else 0.0
    # Decode from two grid slots earlier: the frame before the resume point primes the segmenter.
    # Any grid time is a safe decode start (see perception.media.video), so frames and indices match.
    step = 1.0 / settings.sample_fps
    decode_from = max(0, math.floor(start_s * settings.sample_fps + 1e-6) - 2) * step if start_s > 0 else 0.0
    if skipped:
        logger.info("resuming %s after segment %d (t=%.2fs)", source, resume, start_s)
    segmenter = segmenter_for(settings, first_index=skipped)
    end_t = info.start_s + info.duration_s
    written = 0
    interrupted = False
    gateway = Gateway(AVSource(uri=source, kind="file", live=False, options={"audio": False}),
                      settings.sample_fps, mode="offline_quality", start_s=decode_from).start()
    frames = (item for item in gateway.items() if isinstance(item, Frame))

    def speaking(t: float) -> bool:
        return _overlaps(intervals, t - 1e-6, t + 1e-6)

    asr = pipeline.models.perceivers().asr if intervals else None
    diarizer = pipeline.models.perceivers().speakers if intervals else None
    # A turn is decoded on its own (a seek and a few seconds of audio), so it is the same samples
    # however the run was resumed; speech-to-text and diarization share the decode (the cache holds a
    # Whisper window's turns: at most ~17 fit in one).
    turn_audio = lru_cache(maxsize=32)(partial(decode_audio, p))
    speech = _TurnSpeech(asr, diarizer, intervals, turn_audio)

    try:
        for segment in segmenter.segments(frames, end_t=lambda: readable_end(gateway, end_t),
                                          start_t=start_s if start_s > 0 else None,
                                          speech=speaking if vad is not None else None):
            if stop is not None and stop.is_set():
                interrupted = True
                break
            if scan is not None:
                segment.audio_level = scan.levels.rms(segment.t_start, segment.t_end)
                segment.speech = _overlaps(intervals, segment.t_start, segment.t_end)
                speech.attach(segment)
            write = run.commit(segment)
            if on_segment is not None:
                on_segment(write)
            written += 1
            heap.trim_due()
            if progress is not None:
                progress(max(0.0, segment.t_end - info.start_s), info.duration_s, segment.index + 1)
    except MediaError as exc:  # the file breaks off for good: say what was kept (a rerun resumes after it)
        kept = skipped + written
        raise SourceError(f"{exc.message}; {kept} segment(s) before it were kept ({written} in this run), and "
                          "a rerun resumes after them", source) from exc
    finally:
        gateway.stop()
        frames.close()
    damage = read_damage(gateway, scan, end_t)
    if not interrupted:
        store.mark_source_done(source, camera)
        pipeline.source_done(source, camera)
    seconds = time.monotonic() - started
    logger.info("ingested %s: %d segments written, %d skipped, %.1fs%s", source, written, skipped, seconds,
                " (interrupted)" if interrupted else "")
    return IngestReport(source=source, camera_id=camera, segments_total=skipped + written, segments_written=written,
                        segments_skipped=skipped, entities=sorted(run.seen), seconds=seconds,
                        done=not interrupted, interrupted=interrupted, **damage)


def live_start_point(store: AnalysisStore, source_key: str) -> tuple[int, float]:
    """``(first segment index, media time base)`` for a (re)started live capture of ``source_key``."""
    state = store.ingest_state(source_key)
    if state is None or state.last_segment_index < 0:
        return 0, 0.0
    return state.last_segment_index + 1, state.last_t_end + 1.0


def ingest_live(
    gateway: Gateway,
    pipeline: Pipeline,
    camera_id: str,
    first_index: int = 0,
    stop: threading.Event | None = None,
    audio_wait_s: float = 2.0,
    final: bool = False,
    on_segment: Callable[[SegmentWrite], None] | None = None,
) -> int:
    """Segment and commit a running gateway until ``stop`` is set or the gateway ends.

    On stop, the in-flight segment is committed when it is at least ``min_segment_s`` long and
    discarded otherwise (a shorter tail would only be noise). With ``final`` (a finite source such
    as an image folder) the last segment of a source that ended is always committed. Returns the
    number of segments written.
    """
    source: Source = gateway.source
    settings = pipeline.settings
    run = pipeline.analyzer(source.key, camera_id, wall_clock=gateway.wall_clock)
    segmenter = segmenter_for(settings, first_index=first_index)
    vad = _vad()
    buffer = AudioBuffer(max_s=max(60.0, 4 * settings.max_segment_s))
    voice = SpeechTrack(vad, max_s=buffer.max_s) if vad is not None else None
    speaking = False
    quiet = 0
    heard = False
    pending: list[Segment] = []
    written = 0
    last_voice_t = -math.inf  # media time of the latest audio chunk with speech in it
    # offline_quality: the segments of a speech turn wait for it to end (at most TURN_HOLD_S of
    # media) and the turn is transcribed and diarized once, as a file's turns are; Whisper pays a
    # whole 30 s window per call, and live segments during talk are often a second or two long.
    scheduler = pipeline.scheduler
    whole_turns = scheduler is None or scheduler.mode == "offline_quality"
    models = pipeline.models.perceivers() if whole_turns else None
    asr, diarizer = (models.asr, models.speakers) if models is not None else (None, None)
    hold = asr is not None or diarizer is not None

    def hear(seg: Segment) -> None:
        if heard:
            seg.audio = buffer.slice(seg.t_start, seg.t_end)
            seg.speech = voice is not None and len(seg.audio) > 0 and voice.is_speech(seg.t_start, seg.t_end)

    def commit(seg: Segment) -> None:
        nonlocal written
        write = run.commit(seg)
        if on_segment is not None:
            on_segment(write)
        buffer.trim_before(seg.t_end - 1.0)
        if voice is not None:
            voice.trim_before(seg.t_end - 1.0)
        written += 1
        heap.trim_due()

    def ready(seg: Segment) -> bool:
        return not heard or buffer.end_t >= seg.t_end or gateway.now_t() - seg.t_end > audio_wait_s

    def drain(force: bool) -> None:
        if (hold and not force and pending and last_voice_t > pending[0].t_start
                and buffer.end_t - last_voice_t < TURN_GAP_S and pending[-1].t_end - pending[0].t_start < TURN_HOLD_S):
            return  # someone is still talking: keep the turn's segments together
        batch: list[Segment] = []
        while pending and (force or ready(pending[0])):
            batch.append(pending.pop(0))
        for seg in batch:
            hear(seg)
        spoken = [(seg.t_start, seg.t_end) for seg in batch if seg.speech]
        if hold and spoken:
            speech = _TurnSpeech(asr, diarizer, spoken, buffer.slice, pad_s=0.0)
            for seg in batch:
                speech.attach(seg)
        for seg in batch:
            commit(seg)

    for item in gateway.items():
        if stop is not None and stop.is_set():
            break
        if isinstance(item, AudioChunk):
            heard = True
            buffer.add(item.t, item.pcm)
            if voice is not None:
                for prob in voice.add(item.t, item.pcm):
                    if prob >= vad.threshold:
                        speaking, quiet = True, 0
                        last_voice_t = item.t + len(item.pcm) / SAMPLE_RATE
                    elif prob < vad.threshold - 0.15:
                        quiet += 1
                        if quiet >= 10:
                            speaking = False
        else:
            closed = segmenter.feed(item, speaking if (heard and vad is not None) else None)
            if closed is not None:
                pending.append(closed)
        drain(False)
    stopped = stop is not None and stop.is_set()
    tail = segmenter.flush(end_t=None)
    if tail is not None and (tail.duration >= settings.min_segment_s or (final and not stopped)):
        pending.append(tail)
    elif tail is not None:
        logger.info("%s: discarded the in-flight segment (%.2fs < min %.2fs)", source.key, tail.duration,
                    settings.min_segment_s)
    drain(True)
    return written
