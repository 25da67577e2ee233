"""The background ingest worker: one supervised runner per source, several at once.

:class:`Worker` is started by the lifespan of ``reflectworld serve`` and by the headless
``reflectworld run``. Each capture is a :class:`_Runner` thread:

* **files** go through :func:`perception.ingest_file` (resumable from ``ingest_log``: after a crash
  or ``kill -9`` a restart continues after the last committed segment, none lost, none duplicated);
* **image folders and live sources** go through a :class:`perception.media.gateway.Gateway` (bounded
  queue, drops counted on live sources, reconnect with backoff, stall watchdog) and
  :func:`perception.drivers.ingest.ingest_live`, continuing the source's segment indices.

Every runner drives the engine's one :class:`~perception.drivers.analyzer.Pipeline`: analysis +
write of a segment hold the per-user identity lock, so identity decisions of concurrent sources are
serialised (and share one set of galleries) while decoding runs in parallel. The pipeline's
post-commit hooks run after every committed segment, and its ``on_source_done`` when a file or
folder ends; ``on_source_event(camera_id, "offline" | "online", detail)`` when a live source drops
out or comes back. ``before_start`` runs before any capture starts (the engine claims the store's
capture lease there). :meth:`Worker.stop` is graceful: each runner finishes (or,
if shorter than the minimum segment length, discards) its in-flight segment.

A bad source fails fast in :meth:`Worker.start_capture`: the URI is parsed, files are probed and
live sources must deliver a first frame within their open/read timeouts, else ``SourceError``.
Every start, from a tool call, the dashboard, the phone page or the manifest, counts against one cap
(``access.max_captures``): a slot is reserved before the check, so concurrent starts cannot
overshoot it. Async callers use :meth:`Worker.start_capture_async`, whose checks run on the worker's
own bounded thread pools, so a crowd of slow sources never holds the threads searches run on.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from perception.drivers.analyzer import Pipeline
from perception.drivers.ingest import ingest_file, ingest_live, live_start_point
from perception.media.fetch import NetGuard
from perception.media.gateway import KEYFRAMES_AFTER_S, Gateway, Mode
from perception.media.redact import redact_text
from perception.media.sources import (
    PhoneSource,
    Source,
    SourceError,
    VideoIn,
    make_source,
    redact_uri,
)
from perception.media.video import iter_frames, probe

__all__ = ["CaptureInfo", "SourceEventCallback", "Worker"]

logger = logging.getLogger(__name__)

SourceEventCallback = Callable[[str, str, str], None]
DEFAULT_MAX_CAPTURES = 16
#: threads checking sources that are starting (connects, first frames), apart from the threads requests use
PROBE_THREADS = 8
#: threads resolving the names of sources a tool call names
CHECK_THREADS = 4


@dataclass
class CaptureInfo:
    """What ``capture_status`` reports about one capture."""

    camera_id: str
    source: str
    kind: str
    live: bool
    state: str
    started_at: float
    segments_written: int = 0
    error: str | None = None
    stats: dict[str, Any] = field(default_factory=dict)


class _Runner:
    """One source's supervised ingest thread."""

    def __init__(self, worker: Worker, source: Source, camera_id: str, mode: Mode) -> None:
        self.worker = worker
        self.source = source
        self.camera_id = camera_id
        self.mode = mode
        self.stop = threading.Event()
        self.gateway: Gateway | None = None
        self.state = "starting"
        self.error: str | None = None
        self.written = 0
        self.progress_s = 0.0
        self.started_at = time.time()
        self.thread = threading.Thread(target=self._run, name=f"capture:{camera_id}", daemon=True)

    def _count(self, _write: object) -> None:
        self.written += 1

    def _event(self, event: str, detail: str) -> None:
        logger.warning("source %s (%s) is %s: %s", self.camera_id, self.source.key, event, detail)
        if self.worker.on_source_event is not None:
            try:
                self.worker.on_source_event(self.camera_id, event, detail)
            except Exception:
                logger.exception("on_source_event hook failed for %s", self.camera_id)

    def _run(self) -> None:
        w = self.worker
        try:
            self.state = "running"
            if self.source.kind == "file":
                def progress(done_s: float, _total: float, _segments: int) -> None:
                    self.progress_s = done_s

                report = ingest_file(self.source.uri, w.pipeline, camera_id=self.camera_id, progress=progress,
                                     stop=self.stop, on_segment=self._count)
                self.written = report.segments_written
                self.state = "done" if report.done else "stopped"
                self.damage = {"bad_packets": report.bad_packets, "partial": report.partial,
                               "readable_s": report.readable_s}
                return
            store = w.pipeline.store
            first_index, t_base = live_start_point(store, self.source.key)
            start_s = 0.0
            if not self.source.live:
                state = store.ingest_state(self.source.key)
                if state is not None and state.done:
                    self.state = "done"
                    return
                start_s = state.last_t_end if state is not None and state.last_segment_index >= 0 else 0.0
            self.gateway = Gateway(self.source, w.pipeline.settings.sample_fps, mode=self.mode, start_s=start_s,
                                   t_base=t_base if self.source.live else 0.0, on_event=self._event,
                                   stall_s=float(self.source.options.get("stall_s", 15.0)),
                                   backoff_s=float(self.source.options.get("backoff_s", 0.5)),
                                   backoff_max_s=float(self.source.options.get("backoff_max_s", 30.0)),
                                   keyframes_after_s=KEYFRAMES_AFTER_S if self.source.live else None)
            self.gateway.start()
            try:
                ingest_live(self.gateway, w.pipeline, self.camera_id, first_index=first_index, stop=self.stop,
                            final=not self.source.live, on_segment=self._count)
            finally:
                self.gateway.stop()
            if not self.source.live and not self.stop.is_set():
                store.mark_source_done(self.source.key, self.camera_id)
                w.pipeline.source_done(self.source.key, self.camera_id)
                self.state = "done"
            else:
                self.state = "stopped"
        except SourceError as exc:
            self.state, self.error = "failed", redact_text(str(exc))
            logger.error("capture %s failed: %s", self.camera_id, self.error)
        except Exception as exc:  # the worker's top loop: keep the traceback, report the failure
            self.state, self.error = "failed", redact_text(f"{type(exc).__name__}: {exc}")
            logger.exception("capture %s failed", self.camera_id)

    def info(self) -> CaptureInfo:
        stats: dict[str, Any] = self.gateway.stats.as_dict() if self.gateway is not None else {}
        stats.update(getattr(self, "damage", {}))  # a file's skipped packets and whether it was partial
        if self.source.kind == "file":
            stats["progress_s"] = round(self.progress_s, 2)
        error = self.error or (stats.get("last_error") if stats.get("state") == "reconnecting" else None)
        state = "stopping" if self.stop.is_set() and self.thread.is_alive() else self.state
        return CaptureInfo(camera_id=self.camera_id, source=self.source.key, kind=self.source.kind,
                           live=self.source.live, state=state, started_at=self.started_at,
                           segments_written=self.written, error=error, stats=stats)


class Worker:
    """Runs captures in the background; thread-safe; see the module docstring."""

    def __init__(self, pipeline: Pipeline, *, mode: Mode = "offline_quality",
                 on_source_event: SourceEventCallback | None = None, probe_timeout_s: float = 10.0,
                 before_start: Callable[[], None] | None = None, max_captures: int = DEFAULT_MAX_CAPTURES) -> None:
        self.pipeline = pipeline
        self.mode = mode
        self.on_source_event = on_source_event
        self.probe_timeout_s = probe_timeout_s
        self.before_start = before_start
        self.max_captures = max_captures
        self._runners: dict[str, _Runner] = {}
        self._starting: set[str] = set()  # cameras reserved by a start still being checked
        self._lock = threading.Lock()
        self._limiters: dict[str, anyio.CapacityLimiter] = {}

    # ------------------------------------------------------------------ captures

    def start_capture(self, uri: str, camera_id: str | None = None, options: dict[str, Any] | None = None, *,
                      guard: NetGuard | None = None, confine: Callable[[str], Path] | None = None) -> CaptureInfo:
        """Check the source and start ingesting it (blocking: the check may wait for a slow source).

        ``guard`` and ``confine`` restrict a tool call's source (see :func:`make_source`); the cap of
        :attr:`max_captures` applies to every capture, however it starts.

        Raises:
            SourceError: the source is missing, unsupported, unreachable or unreadable.
            ValueError: ``camera_id`` is already capturing, or the cap is reached.
        """
        return self._launch(*self._reserve(uri, camera_id, options, guard, confine))

    async def start_capture_async(self, uri: str, camera_id: str | None = None,
                                  options: dict[str, Any] | None = None, *, guard: NetGuard | None = None,
                                  confine: Callable[[str], Path] | None = None) -> CaptureInfo:
        """:meth:`start_capture` from async code: the slot is taken at once, the source's check (a
        connect, a probe) runs on the worker's own bounded pool, never on the threads other requests use."""
        reserved = self._reserve(uri, camera_id, options, guard, confine)
        return await anyio.to_thread.run_sync(lambda: self._launch(*reserved), limiter=self.limiter("probe"))

    async def run_check(self, check: Callable[..., Any], *args: Any) -> Any:
        """``check(*args)`` (an access check that may resolve a name) on the worker's own bounded pool."""
        return await anyio.to_thread.run_sync(lambda: check(*args), limiter=self.limiter("check"))

    def limiter(self, name: str) -> anyio.CapacityLimiter:
        """The bounded thread pool ``name`` ("probe" or "check") of this worker."""
        with self._lock:
            if name not in self._limiters:
                self._limiters[name] = anyio.CapacityLimiter(PROBE_THREADS if name == "probe" else CHECK_THREADS)
            return self._limiters[name]

    def _reserve(self, uri: str, camera_id: str | None, options: dict[str, Any] | None, guard: NetGuard | None,
                 confine: Callable[[str], Path] | None) -> tuple[Source, str, Mode]:
        if self.before_start is not None:
            self.before_start()
        opts = dict(options or {})
        mode: Mode = opts.pop("mode", self.mode)
        source = make_source(uri, opts, guard=guard, confine=confine)
        camera = camera_id or source.default_camera
        with self._lock:
            current = self._runners.get(camera)
            if camera in self._starting or (current is not None and current.thread.is_alive()):
                what = current.source.key if current is not None and current.thread.is_alive() else "a source"
                raise ValueError(f"camera {camera!r} is already capturing {what}; "
                                 "call capture_stop first or pass another camera_id")
            live = sum(1 for r in self._runners.values() if r.thread.is_alive()) + len(self._starting)
            if live >= self.max_captures:
                raise ValueError(f"{live} captures are running or starting, the most this server allows "
                                 "(access.max_captures); stop one with capture_stop first")
            self._starting.add(camera)
        return source, camera, mode

    def _launch(self, source: Source, camera: str, mode: Mode) -> CaptureInfo:
        try:
            self._check(source)
            runner = _Runner(self, source, camera, mode)
            with self._lock:
                self._runners[camera] = runner
                self._starting.discard(camera)
        finally:
            with self._lock:
                self._starting.discard(camera)
        runner.thread.start()
        logger.info("capture %s started: %s (%s)", camera, source.key, source.kind)
        return runner.info()

    def _check(self, source: Source) -> None:
        """Fail fast on a bad source (bounded by the source's open/read timeouts)."""
        if source.kind == "file":
            probe(source.uri)
            return
        if isinstance(source, PhoneSource):
            return
        stop = threading.Event()
        stream = source.open_stream(stop)
        deadline = time.monotonic() + float(source.options.get("open_timeout_s", self.probe_timeout_s)) + 5.0
        try:
            for item in stream:
                if isinstance(item, VideoIn):
                    return
                if time.monotonic() > deadline:
                    break
        finally:
            stream.close()
        raise SourceError(f"{source.key!r} delivered no video frame; check that it is a video source", source.key)

    def stop_capture(self, camera_id: str, timeout: float = 10.0) -> CaptureInfo:
        """Stop a capture gracefully, waiting up to ``timeout`` seconds for it.

        The segment in progress is finished first; when that takes longer than ``timeout`` (a
        cold model load, a long speech turn) the returned state is ``stopping`` and the capture
        stops in the background.

        Raises:
            KeyError: no capture with that camera id.
        """
        with self._lock:
            runner = self._runners.get(camera_id)
        if runner is None:
            raise KeyError(f"no capture for camera {camera_id!r}; call capture_status to list captures")
        runner.stop.set()
        if runner.gateway is not None:
            runner.gateway.stop_event.set()
        runner.thread.join(timeout)
        return runner.info()

    def status(self, camera_id: str | None = None) -> list[CaptureInfo]:
        """Captures (running and finished), or one.

        Raises:
            KeyError: ``camera_id`` is unknown.
        """
        with self._lock:
            runners = list(self._runners.values())
        if camera_id is not None:
            runners = [r for r in runners if r.camera_id == camera_id]
            if not runners:
                raise KeyError(f"no capture for camera {camera_id!r}; call capture_status to list captures")
        return [r.info() for r in runners]

    def snapshot(self, camera_id: str) -> tuple[Any, float]:
        """The latest frame of a capture as ``(BGR image, media time)``.

        Raises:
            KeyError: unknown camera. ValueError: no frame yet.
        """
        with self._lock:
            runner = self._runners.get(camera_id)
        if runner is None:
            raise KeyError(f"no capture for camera {camera_id!r}; call capture_status to list captures")
        if runner.gateway is not None and runner.gateway.latest is not None:
            return runner.gateway.latest.image_bgr, runner.gateway.latest.t
        if runner.source.kind == "file":
            start = runner.progress_s + probe(runner.source.uri).start_s
            frames = iter_frames(runner.source.uri, 1.0, start_s=start)
            try:
                frame = next(frames, None)
            finally:
                frames.close()
            if frame is not None:
                return frame.image_bgr, frame.t
        raise ValueError(f"camera {camera_id!r} has no frame yet; try again in a few seconds")

    def phone_source(self, camera_id: str) -> PhoneSource:
        """The phone source of ``camera_id``, starting a capture ``phone:<camera_id>`` if none runs."""
        with self._lock:
            runner = self._runners.get(camera_id)
        if runner is not None and runner.thread.is_alive():
            if not isinstance(runner.source, PhoneSource):
                raise ValueError(f"camera {camera_id!r} is capturing {runner.source.key}, not a phone")
            return runner.source
        self.start_capture(f"phone:{camera_id}", camera_id, {"mode": "live_latency"})
        with self._lock:
            source = self._runners[camera_id].source
        assert isinstance(source, PhoneSource)
        return source

    # ------------------------------------------------------------------ lifecycle

    def start_sources(self, sources: list[Any]) -> list[str]:
        """Start the manifest's enabled sources; a bad one is logged (and returned), the others still start."""
        errors: list[str] = []
        for cfg in sources:
            if not getattr(cfg, "enabled", True):
                continue
            try:
                self.start_capture(cfg.uri, cfg.camera_id, dict(getattr(cfg, "options", None) or {}))
            except (SourceError, ValueError) as exc:
                logger.error("source %s not started: %s", redact_uri(cfg.uri), redact_text(str(exc)))
                errors.append(f"{redact_uri(cfg.uri)}: {redact_text(str(exc))}")
        return errors

    def idle(self) -> bool:
        """No capture is running any more (every file and folder finished, no live source left)."""
        with self._lock:
            return not any(r.thread.is_alive() for r in self._runners.values())

    def stop(self, timeout: float = 30.0) -> None:
        """Stop every capture gracefully (in parallel) and wait for them."""
        with self._lock:
            runners = list(self._runners.values())
        for runner in runners:
            runner.stop.set()
            if runner.gateway is not None:
                runner.gateway.stop_event.set()
            if isinstance(runner.source, PhoneSource):
                runner.source.feed.close()
        deadline = time.monotonic() + timeout
        for runner in runners:
            runner.thread.join(max(0.1, deadline - time.monotonic()))
        logger.info("worker stopped (%d capture(s))", len(runners))
