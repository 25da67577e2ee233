"""Which key frames a still source decodes: the packet sizes say when a look is needed.

While a live source decodes key frames only (:data:`perception.media.gateway.KEYFRAMES_AFTER_S`),
each key frame it decodes is most of what a still camera costs (~9 ms for a 720p H.264 I-frame; a
camera with a 2 s GOP decodes 30 a minute). An encoder spends bytes on change, and the demuxer hands
over every packet's size for free, so :class:`KeyframeGate` skips a key frame when nothing in the
packets since the last decoded one suggests a change:

* no inter frame since then was larger than ``INTER_GROWTH`` × the largest inter frame of a recent
  stretch seen to be still (the lower median over the last few), plus ``INTER_FLOOR`` bytes
  (movement, a light switched on);
* the key frame's own size is within ``KEY_DRIFT`` of one of the last few key frames seen to be still
  (a change that happened at a GOP boundary, or an encoder whose inter frames do not show it);
* the last decoded key frame is less than :data:`KEYFRAME_GAP_S` seconds of stream time old.

So a change the packet sizes show is seen at the next key frame, as with every key frame decoded;
one they do not show (a constant-bitrate stream padded to fixed sizes, a slow fade) is seen within
``KEYFRAME_GAP_S`` plus one key-frame interval. Skipping starts once ``MIN_STILL_SPANS`` stretches
between decoded key frames have been seen still, and any change starts the learning again; a new
connection decodes its first key frame. A stream without inter frames (MJPEG) has no such
stretches, so every key frame is decoded.

The gateway judges each frame it samples (:meth:`KeyframeGate.judged`); the demuxer asks
:meth:`KeyframeGate.decode_key` before decoding a key frame and reports inter frames' sizes.
"""

from __future__ import annotations

from collections import deque

__all__ = ["INTER_FLOOR", "INTER_GROWTH", "KEY_DRIFT", "KEYFRAME_GAP_S", "KeyframeGate", "MIN_STILL_SPANS"]

#: longest stretch of stream time (seconds) between two decoded key frames while still
KEYFRAME_GAP_S = 30.0
#: an inter frame this many times the still stretches' largest (plus :data:`INTER_FLOOR`) means a change
INTER_GROWTH = 2.0
#: bytes added to the threshold, so a near-empty still stream's inter frames need a real jump
INTER_FLOOR = 256
#: relative size difference from each of the recent still key frames that gets a key frame decoded
KEY_DRIFT = 0.04
#: still stretches (between decoded key frames, with inter frames) seen before key frames are skipped
MIN_STILL_SPANS = 2
_SPANS_KEPT = 8


class KeyframeGate:
    """Packet-size bookkeeping of one source and the skip decision for its key frames (module docstring)."""

    def __init__(self) -> None:
        self.skipped = 0  #: key frames not decoded because nothing suggested a change
        self._still_spans: deque[int] = deque(maxlen=_SPANS_KEPT)  # largest inter frame of each still stretch
        self._still_keys: deque[int] = deque(maxlen=_SPANS_KEPT)  # sizes of the last key frames seen to be still
        self._span_max = 0  # largest inter frame since the last decoded key frame
        self._span_frames = 0
        self._span_moved = False  # a frame sampled since the last decoded key frame changed
        self._pending: tuple[int | None, int] | None = None  # (stretch's largest inter frame, key size) to judge
        self._decoded_t: float | None = None  # stream time of the last decoded key frame

    def restart(self) -> None:
        """A new connection: stream time starts afresh, so its first key frame is decoded."""
        self._decoded_t = None
        self._pending = None
        self._span_max = self._span_frames = 0

    def inter(self, size: int) -> None:
        """Note an inter frame's packet size (decoded or not)."""
        self._span_frames += 1
        if size > self._span_max:
            self._span_max = size

    def decode_key(self, t: float | None, size: int, keyframes_only: bool) -> bool:
        """Whether to decode the key frame at stream time ``t`` (seconds) of ``size`` bytes."""
        if keyframes_only and not self._needed(t, size):
            self.skipped += 1
            return False
        span = self._span_max if self._span_frames and not self._span_moved else None
        self._pending = (span, size)
        self._decoded_t = t
        self._span_max = self._span_frames = 0
        self._span_moved = False
        return True

    def judged(self, still: bool) -> None:
        """The gateway compared a sampled frame with the last one that changed: ``still`` or not."""
        if not still:
            self._still_spans.clear()
            self._still_keys.clear()
            self._pending = None
            self._span_moved = True
            return
        if self._pending is not None:
            span, key = self._pending
            self._pending = None
            if span is not None:
                self._still_spans.append(span)
            self._still_keys.append(key)

    def _needed(self, t: float | None, size: int) -> bool:
        if (len(self._still_spans) < MIN_STILL_SPANS or not self._still_keys or self._pending is not None
                or t is None or self._decoded_t is None or not 0 <= t - self._decoded_t < KEYFRAME_GAP_S):
            return True
        if self._span_max > INTER_GROWTH * self._still_inter() + INTER_FLOOR:
            return True
        return all(abs(size - key) > KEY_DRIFT * key for key in self._still_keys)

    def _still_inter(self) -> int:
        """The still stretches' typical largest inter frame (lower median: one passer-by does not raise it)."""
        spans = sorted(self._still_spans)
        return spans[(len(spans) - 1) // 2]
