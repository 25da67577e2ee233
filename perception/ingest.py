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
from pathlib import Path

from pydantic import BaseModel, Field

from memory.models import SegmentWrite
from perception.faces import FaceDetector, FaceEmbedder
from perception.identity import IdentityResolver
from perception.pipeline import AnalysisStore, IngestSettings, SegmentAnalyzer
from perception.segment import Segmenter
from perception.video import iter_frames, probe

__all__ = ["IngestReport", "IngestSettings", "IngestStore", "ProgressCallback", "ingest_file"]

logger = logging.getLogger(__name__)

#: ``progress(done_s, total_s, segments_done)``, called after each segment.
ProgressCallback = Callable[[float, float, int], None]


#: kept for callers that imported the old name
IngestStore = AnalysisStore


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


def ingest_file(
    path: str | Path,
    store: AnalysisStore,
    settings: IngestSettings | None = None,
    camera_id: str | None = None,
    progress: ProgressCallback | None = None,
    on_commit: Callable[[SegmentWrite], None] | None = None,
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
        on_commit: called with each segment's write once it is committed (rules, consolidation…);
            it runs on the ingest thread, so it must be quick or hand work off.
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
    mtime = stat.st_mtime
    run = SegmentAnalyzer(
        source=source, camera_id=camera, settings=settings, store=store, wall_clock=lambda t: mtime + t,
        size=stat.st_size, mtime=mtime, detector=detector, embedder=embedder,
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
            write = run.analyse(segment)
            store.write_segment(write)
            if on_commit is not None:
                on_commit(write)
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
