"""The stream gateway: one supervised decode thread per source, feeding a bounded queue.

:class:`Gateway` runs ``source.open_stream`` on its own thread (``while not stop``), samples video
on an absolute time grid (``sample_fps``), resamples audio to 16 kHz mono (done by the source) and
hands :class:`~perception.media.video.Frame` and :class:`AudioChunk` items to one consumer through a
bounded queue:

* **Live sources** (and any source in ``live_latency`` mode) never block the decoder: when the
  queue is full a frame is dropped and counted. **Files in ``offline_quality`` mode never drop**:
  the decoder waits for the consumer.
* **Live sources reconnect** after any failure or end of stream, with exponential backoff
  (``backoff_s`` doubling up to ``backoff_max_s``); ``on_event("offline" | "online", detail)``
  reports the transitions once each. A failure of a non-live source is final and re-raised in the
  consumer (a corrupt file gives its :class:`~perception.media.sources.SourceError`).
* **Watchdog:** network reads carry FFmpeg/PyAV timeouts (a silent server raises instead of
  hanging), and a stream that delivers packets but no video frame for ``stall_s`` is restarted.
* **Counters** (:class:`SourceStats`): fps in/out, lag, dropped, reconnects, last error, key frames
  a still source skipped (:mod:`perception.media.keygate`).
* **Idle decoding:** with ``keyframes_after_s``, once the sampled frames have not changed and the
  audio has been silent for that long, the source decodes key frames only (a static camera costs
  a fraction of full decoding), and of those only the ones whose packet sizes suggest a change
  (:mod:`perception.media.keygate`); the first key frame that differs, or any sound, restores full
  decoding from the next key frame on. Live captures use it; files do not (a resumed file must
  see exactly the frames of an uninterrupted run).

Live media time is seconds since ``t_base`` on this gateway's clock: the first item of each
connection is placed at its arrival time and later items follow the stream's own timestamps, so
time keeps increasing across reconnects and ``wall_clock(t)`` maps it back to epoch seconds.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from perception.media.redact import redact_text
from perception.media.sources import AudioIn, Source, SourceError
from perception.media.video import ANALYSIS_MAX_SIDE, Frame, grey_thumbnail

__all__ = ["KEYFRAMES_AFTER_S", "AudioChunk", "Gateway", "Mode", "SourceStats"]

logger = logging.getLogger(__name__)

Mode = Literal["offline_quality", "live_latency"]
EventCallback = Callable[[str, str], None]
_EPS = 1e-6
#: mean grey difference (0–1, on a 64×36 thumbnail) above which a frame counts as changed
STILL_DIFF = 0.02
#: audio RMS at or above which a stream is not silent (the scheduler's threshold)
SILENCE_RMS = 0.01
#: live captures decode key frames only after this long still and silent
KEYFRAMES_AFTER_S = 10.0


@dataclass(frozen=True)
class AudioChunk:
    """16 kHz mono float32 audio starting at media time ``t``."""

    t: float
    pcm: np.ndarray


@dataclass
class SourceStats:
    """Counters of one source, as shown by ``capture_status``."""

    state: str = "starting"
    frames_in: int = 0
    frames_out: int = 0
    dropped: int = 0
    audio_dropped: int = 0
    reconnects: int = 0
    last_error: str | None = None
    bad_packets: int = 0
    truncated: bool = False
    #: key frames a still source did not decode (their packet sizes showed no change)
    keyframes_skipped: int = 0
    lag_s: float = 0.0
    fps_in: float = 0.0
    fps_out: float = 0.0
    last_frame_t: float | None = None
    _in_times: deque[float] = field(default_factory=lambda: deque(maxlen=256), repr=False)
    _out_times: deque[float] = field(default_factory=lambda: deque(maxlen=256), repr=False)

    def as_dict(self) -> dict[str, object]:
        """A JSON-friendly copy (rates over the last few seconds)."""
        now = time.monotonic()
        return {
            "state": self.state, "frames_in": self.frames_in, "frames_out": self.frames_out, "dropped": self.dropped,
            "audio_dropped": self.audio_dropped, "reconnects": self.reconnects, "last_error": self.last_error,
            "bad_packets": self.bad_packets, "truncated": self.truncated, "keyframes_skipped": self.keyframes_skipped,
            "lag_s": round(self.lag_s, 3), "fps_in": round(_rate(self._in_times, now), 2),
            "fps_out": round(_rate(self._out_times, now), 2), "last_frame_t": self.last_frame_t,
        }


def _rate(times: deque[float], now: float, window: float = 5.0) -> float:
    recent = [t for t in list(times) if now - t <= window]
    if len(recent) < 2:
        return 0.0
    return (len(recent) - 1) / max(recent[-1] - recent[0], 1e-3)


class _End:
    pass


@dataclass(frozen=True)
class _Failure:
    error: BaseException


_END = _End()


class Gateway:
    """Supervised decode of one source into a bounded queue (see the module docstring)."""

    def __init__(self, source: Source, sample_fps: float = 4.0, *, mode: Mode = "offline_quality",
                 queue_size: int = 64, start_s: float = 0.0, t_base: float = 0.0, stall_s: float = 15.0,
                 backoff_s: float = 0.5, backoff_max_s: float = 30.0, max_side: int = ANALYSIS_MAX_SIDE,
                 on_event: EventCallback | None = None, keyframes_after_s: float | None = None) -> None:
        if sample_fps <= 0:
            raise ValueError(f"sample_fps must be > 0, got {sample_fps}")
        self.source = source
        self.sample_fps = sample_fps
        source.sample_fps = sample_fps
        self.mode = mode
        self.start_s = start_s
        self.t_base = t_base
        self.stall_s = stall_s
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self.max_side = max_side
        self.on_event = on_event
        self.stats = SourceStats()
        self.latest: Frame | None = None
        self.stop_event = threading.Event()
        self._queue: queue.Queue[Frame | AudioChunk | _End | _Failure] = queue.Queue(queue_size)
        self._drops = source.live or mode == "live_latency"
        self._thread: threading.Thread | None = None
        self._wall0 = time.time()
        self._mono0 = time.monotonic()
        self._offline = False
        self._last_t = -math.inf
        self.keyframes_after_s = keyframes_after_s
        self._still_ref: np.ndarray | None = None  # thumbnail of the last frame that changed
        self._still_since: float | None = None  # media time of the last change or sound

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> Gateway:
        """Start the decode thread (once)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"gateway:{self.source.key}", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Ask the decode thread to stop and wait for it (bounded by the source's read timeout)."""
        self.stop_event.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                logger.warning("decoder of %s did not stop within %.0fs", self.source.key, timeout)

    @property
    def alive(self) -> bool:
        """Whether the decode thread is running."""
        return self._thread is not None and self._thread.is_alive()

    def wall_clock(self, t: float) -> float:
        """Epoch seconds of a live media time (files map time themselves)."""
        return self._wall0 + (t - self.t_base)

    def now_t(self) -> float:
        """The current live media time."""
        return self.t_base + (time.monotonic() - self._mono0)

    # ------------------------------------------------------------------ consumer side

    def get(self, timeout: float | None = None) -> Frame | AudioChunk | None:
        """The next item, or ``None`` at the end of the source (or after ``timeout`` with nothing).

        Raises:
            SourceError: a non-live source failed (corrupt file, missing file, …).
        """
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            return None
        if isinstance(item, _End):
            self._queue.put(item)  # stay at the end for further calls
            return None
        if isinstance(item, _Failure):
            self._queue.put(item)
            raise item.error
        if isinstance(item, Frame):
            self.stats.frames_out += 1
            self.stats._out_times.append(time.monotonic())
            self.stats.lag_s = max(0.0, self.now_t() - item.t) if self.source.live else self._queue.qsize() / max(
                self.sample_fps, 1e-6)
        return item

    def items(self, poll_s: float = 0.5) -> Iterator[Frame | AudioChunk]:
        """Iterate items until the source ends or :meth:`stop` is called."""
        while True:
            item = self.get(timeout=poll_s)
            if item is None:
                if self.finished or self.stop_event.is_set():
                    return
                continue
            yield item

    @property
    def finished(self) -> bool:
        """The decode thread has ended and every item was consumed."""
        return not self.alive and (self._queue.empty() or isinstance(self._queue.queue[0], _End))

    # ------------------------------------------------------------------ decode thread

    def _run(self) -> None:
        attempt = 0
        try:
            while not self.stop_event.is_set():
                try:
                    self._session()
                    if not self.source.live:
                        self.stats.state = "done"
                        self._put_final(_END)
                        return
                    if self.stop_event.is_set():
                        break
                    raise SourceError(f"stream {self.source.key!r} ended", self.source.key)
                except Exception as exc:  # the worker's top loop: classify, log, reconnect or fail
                    if not isinstance(exc, SourceError):
                        logger.exception("decoder of %s failed", self.source.key)
                    message = redact_text(str(exc))
                    self.stats.last_error = message
                    if not self.source.live:
                        self.stats.state = "failed"
                        self._put_final(_Failure(exc))
                        return
                    if got_frames(exc):
                        attempt = 0
                    self._go_offline(message)
                    delay = min(self.backoff_max_s, self.backoff_s * (2 ** attempt))
                    attempt += 1
                    logger.warning("%s: %s; reconnecting in %.1fs", self.source.key, message, delay)
                    if self.stop_event.wait(delay):
                        break
                    self.stats.reconnects += 1
        finally:
            if self.stats.state not in ("done", "failed"):
                self.stats.state = "stopped"
            self._put_final(_END)

    def _go_offline(self, detail: str) -> None:
        self.stats.state = "reconnecting"
        if not self._offline:
            self._offline = True
            if self.on_event is not None:
                self.on_event("offline", detail)

    def _session(self) -> int:
        """One connection: decode until the source ends; returns the number of video frames."""
        step = 1.0 / self.sample_fps
        live = self.source.live
        self.stats.state = "connecting"
        anchor: tuple[float, float] | None = None  # (stream t, media t) of the connection's first item
        next_slot = max(0, math.floor(self.start_s * self.sample_fps + _EPS)) if not live else 0
        video = 0
        last_video = time.monotonic()
        stream = self.source.open_stream(self.stop_event, 0.0 if live else self.start_s)
        try:
            for item in stream:
                if self.stop_event.is_set():
                    break
                now = time.monotonic()
                if live:
                    arrival = self.t_base + (now - self._mono0)
                    if item.t is None or anchor is None:
                        t = arrival
                        if item.t is not None:
                            anchor = (item.t, arrival)
                    else:
                        t = anchor[1] + (item.t - anchor[0])
                        if abs(t - arrival) > 5.0:  # the stream's clock jumped: re-anchor on arrival
                            anchor, t = (item.t, arrival), arrival
                else:
                    t = item.t if item.t is not None else (self._last_t + step if self._last_t > -math.inf else 0.0)
                if isinstance(item, AudioIn):
                    if now - last_video > self.stall_s:
                        raise SourceError(f"stream {self.source.key!r} stalled: audio but no video for "
                                          f"{self.stall_s:.0f}s", self.source.key)
                    self._idle_audio(t, item.pcm)
                    self._put(AudioChunk(t, item.pcm), audio=True)
                    continue
                video += 1
                last_video = now
                self.stats.bad_packets = self.source.bad_packets
                self.stats.keyframes_skipped = self.source.key_gate.skipped
                if self._offline or self.stats.state != "running":
                    self._online()
                self.stats.frames_in += 1
                self.stats._in_times.append(now)
                if live:
                    t = max(t, self._last_t + 1e-3)
                self._last_t = t
                if t < self.start_s - _EPS or t < next_slot * step - _EPS:
                    continue
                slot = math.floor(t * self.sample_fps + _EPS)
                next_slot = slot + 1
                frame = Frame(index=slot, t=float(t), image_bgr=item.to_bgr(self.max_side))
                self._idle_video(frame)
                self.latest = frame
                self.stats.last_frame_t = frame.t
                self._put(frame, audio=False)
        finally:
            stream.close()
            self.stats.bad_packets, self.stats.truncated = self.source.bad_packets, self.source.truncated
            self.stats.keyframes_skipped = self.source.key_gate.skipped
        if live and video:
            raise _Ended(f"stream {self.source.key!r} ended after {video} frames", self.source.key)
        return video

    def _idle_video(self, frame: Frame) -> None:
        """Track how long the picture has been still; switch key-frame-only decoding on or off."""
        if self.keyframes_after_s is None:
            return
        thumb = grey_thumbnail(frame.image_bgr)
        changed = self._still_ref is None or float(np.abs(thumb - self._still_ref).mean()) > STILL_DIFF
        self.source.key_gate.judged(not changed)
        if changed:
            self._still_ref, self._still_since = thumb, frame.t
            if self.source.keyframes_only:
                logger.info("%s: the picture changed; decoding every frame again", self.source.key)
            self.source.keyframes_only = False
        elif self._still_since is not None and frame.t - self._still_since >= self.keyframes_after_s:
            if not self.source.keyframes_only:
                logger.info("%s: still and silent for %.0f s; decoding key frames only", self.source.key,
                            frame.t - self._still_since)
            self.source.keyframes_only = True

    def _idle_audio(self, t: float, pcm: np.ndarray) -> None:
        if self.keyframes_after_s is None or pcm.size == 0:
            return
        if float(np.dot(pcm, pcm)) >= SILENCE_RMS ** 2 * pcm.size:  # RMS at or above the threshold
            self._still_since = t
            self.source.keyframes_only = False

    def _online(self) -> None:
        was_offline = self._offline
        self._offline = False
        self.stats.state = "running"
        if was_offline and self.on_event is not None:
            self.on_event("online", f"{self.source.key} is delivering frames again")

    def _put(self, item: Frame | AudioChunk, audio: bool) -> None:
        if self._drops:
            try:
                self._queue.put_nowait(item)
            except queue.Full:
                if audio:
                    self.stats.audio_dropped += 1
                else:
                    self.stats.dropped += 1
            return
        while not self.stop_event.is_set():
            try:
                self._queue.put(item, timeout=0.2)
                return
            except queue.Full:
                continue

    def _put_final(self, item: _End | _Failure) -> None:
        """Put an end marker, making room by dropping the oldest item if a stopped consumer left it full."""
        if self._queue.queue and isinstance(self._queue.queue[-1], _End | _Failure):
            return
        while True:
            try:
                self._queue.put_nowait(item)
                return
            except queue.Full:
                if not self.stop_event.is_set():
                    try:
                        self._queue.put(item, timeout=0.5)
                        return
                    except queue.Full:
                        continue
                try:
                    self._queue.get_nowait()
                except queue.Empty:
                    pass


class _Ended(SourceError):
    """A live stream ended after delivering frames (reconnect at once, backoff reset)."""


def got_frames(exc: BaseException) -> bool:
    """Whether a session failure came after frames were delivered (resets the backoff)."""
    return isinstance(exc, _Ended)
