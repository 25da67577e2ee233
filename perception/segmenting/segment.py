"""Cut a stream of sampled frames into segments at scene changes, motion changes and speech turns.

Change is measured on content normalised for what cameras do on their own (global brightness flicker,
daylight drift, sensor noise, key-frame pulsing; see :mod:`perception.segmenting.change`). A cut happens
before a frame whose scene change from the previous frame (the HSV hue/saturation histogram distance,
0 = identical, 1 = disjoint, confirmed by a change of gain/offset-normalised structure) is at least
``threshold``, provided the current segment is already ``min_s`` long; a segment that reaches ``max_s`` is cut
regardless (a segment in which nothing has moved and nobody has spoken runs up to ``max_still_s``:
a still, quiet camera writes a few long segments instead of many identical short ones, each keeping
at most :data:`QUIET_FRAMES` frames spread over it). Motion is a boundary too: each segment starts in a motion
state (moving or still, from the grey-level change of its first frame against the one before). A still
segment is cut at the first frame whose change clears the motion threshold by the frame's noise floor
("someone walks into an empty room" starts a segment of its own); a moving one is cut once the change has
stayed below the threshold for ``motion_hold_s`` ("everything stopped"). A speech turn starting or
ending is a boundary as well. The segmenter's state resets at every cut, so segmentation that restarts at a
segment's first frame (a resumed ingest) reproduces the same later segments. Only the last
segment of a stream may be shorter than ``min_s``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from perception.media.video import Frame, grey_thumbnail
from perception.segmenting.change import (
    Signature,
    colour_histogram,
    frame_distance,
    motion_between,
    motion_measure,
    scene_change,
    signature,
)
from perception.settings import DEFAULT_MOTION_THRESHOLD, DEFAULT_SCENE_THRESHOLD

__all__ = ["DEFAULT_MOTION_THRESHOLD", "DEFAULT_SCENE_THRESHOLD", "Segment", "Segmenter", "colour_histogram",
           "frame_distance", "grey_thumbnail", "motion_between"]

logger = logging.getLogger(__name__)

_EPS = 1e-6
#: frames a still, quiet segment longer than ``max_s`` keeps (``max_s`` of frames at the default 4 fps):
#: whenever it holds that many, it keeps every second one and takes half as many from then on, so a
#: segment of ``max_still_s`` holds frames evenly spread over it (5 minutes of 640-px frames at 4 fps
#: would be 830 MB)
QUIET_FRAMES = 40


@dataclass
class Segment:
    """A run of sampled frames between two cuts; ``t_end`` is the next segment's start."""

    index: int
    t_start: float
    t_end: float
    frames: list[Frame] = field(default_factory=list)
    #: scene change between this segment's first frame and the frame before it (the histogram distance,
    #: scaled down when the structure did not change; 0.0 at the start of a stream); at least the
    #: threshold for a scene cut
    cut_score: float = 0.0
    #: the segment's audio, 16 kHz mono float32 (``None`` when the source has no audio or the
    #: driver only measured it)
    audio: np.ndarray | None = None
    #: root mean square of the segment's audio when the driver measured it instead of passing the
    #: samples (files); ``None``: measure ``audio``
    audio_level: float | None = None
    #: voice activity detection found speech in the segment
    speech: bool = False
    #: the segment's share of its speech turns' transcripts, when the driver transcribes whole turns
    #: (files); ``None``: the analyzer transcribes ``audio`` itself
    transcript: Callable[[], Any] | None = None
    #: the segment's share of its speech turns' diarization, when the driver diarizes whole turns
    #: (files); ``None``: the analyzer diarizes ``audio`` itself
    diarization: Callable[[], Any] | None = None

    @property
    def duration(self) -> float:
        """Length in media seconds."""
        return self.t_end - self.t_start


class Segmenter:
    """Stateful scene-cut segmenter: :meth:`feed` frames, then :meth:`flush` once.

    Args:
        min_s: shortest segment (media seconds) that a scene change may end.
        max_s: longest segment; a segment is cut when a frame would make it longer.
        threshold: histogram distance counted as a scene change.
        first_index: index given to the first segment (resume passes last index + 1).
        motion_threshold: grey-level difference that counts as motion (``None``: no motion cuts).
        motion_hold_s: how long a moving segment must have been still before it cuts.
        max_still_s: the longest segment whose frames have all been still and silent of speech
            (default ``max_s``; needs ``motion_threshold``).
    """

    def __init__(
        self,
        min_s: float = 0.5,
        max_s: float = 10.0,
        threshold: float = DEFAULT_SCENE_THRESHOLD,
        first_index: int = 0,
        motion_threshold: float | None = None,
        motion_hold_s: float = 1.0,
        max_still_s: float | None = None,
    ) -> None:
        if min_s < 0 or max_s <= 0 or min_s > max_s:
            raise ValueError(f"need 0 <= min_s <= max_s and max_s > 0, got min_s={min_s}, max_s={max_s}")
        self.min_s = min_s
        self.max_s = max_s
        self.threshold = threshold
        self._next_index = first_index
        self._current: Segment | None = None
        self._prev: Signature | None = None
        self._prev_speech: bool | None = None
        self.motion_threshold = motion_threshold
        self.motion_hold_s = motion_hold_s
        self._moving: bool | None = None  # the current segment's motion state
        self._changed_at: float | None = None  # when the frames left that state
        self.max_still_s = max(max_s, max_still_s) if max_still_s is not None and motion_threshold is not None else max_s
        self._quiet = False  # every frame of the current segment so far was still, without speech
        self._fed = 0  # frames fed to the current segment after its first
        self._every = 1  # the current segment keeps every this many frames (a long still one: more than 1)
        self._last: tuple[float, float] | None = None  # (time, step) of the last frame fed to a thinned segment

    def _motion(self, prev: Signature | None, sig: Signature) -> tuple[float, float] | None:
        """``(change, noise floor)`` of this frame against the one before (``None``: unknown or no motion cuts)."""
        if self.motion_threshold is None or prev is None:
            return None
        return motion_measure(prev.grey, sig.grey)

    def _motion_turn(self, frame: Frame, motion: tuple[float, float] | None) -> bool:
        """Track the segment's motion state; True when it should turn (see the module docstring).

        The first frame sets the state (moving when its change reaches the threshold). A still segment
        turns at once when a change clears the threshold by the frame's noise floor (something moved in a
        part of the picture); a moving one turns when the change has stayed below the threshold for
        ``motion_hold_s``.
        """
        if motion is None:
            return False
        change, floor = motion
        threshold = self.motion_threshold
        assert threshold is not None
        if self._moving is None:
            self._moving = change >= threshold
            return False
        if not self._moving:  # something started to move: a boundary at once (someone walks in)
            self._changed_at = None
            return change >= threshold + floor
        if change >= threshold:
            self._changed_at = None
            return False
        if self._changed_at is None:
            self._changed_at = frame.t
        return frame.t - self._changed_at >= self.motion_hold_s - _EPS

    def feed(self, frame: Frame, speech: bool | None = None) -> Segment | None:
        """Add one frame; return the segment it closed, if it started a new one.

        ``speech`` is the voice-activity state at the frame (``None``: unknown). A speech turn
        starting or ending is a natural boundary too, once the segment is ``min_s`` long.
        """
        sig = signature(frame.image_bgr)
        prev, self._prev = self._prev, sig
        prev_speech, self._prev_speech = self._prev_speech, speech
        motion = self._motion(prev, sig)
        current = self._current
        if current is None:
            self._start(frame, 0.0 if prev is None else scene_change(prev, sig))
            self._motion_turn(frame, motion)
            self._quiet = not speech and self._still(motion)
            return None
        assert prev is not None
        length = frame.t - current.t_start
        score = scene_change(prev, sig)
        turn = speech is not None and prev_speech is not None and speech != prev_speech
        long_enough = length >= self.min_s - _EPS
        self._quiet = self._quiet and not speech and self._still(motion)
        cut = length >= self._limit() - _EPS or (long_enough and (score >= self.threshold or turn))
        if not cut and self._motion_turn(frame, motion) and long_enough:
            cut = True
        if cut:
            closed = self._cut(frame, score)
            self._motion_turn(frame, motion)  # the new segment's motion state, from its first frame
            self._quiet = not speech and self._still(motion)
            return closed
        self._fed += 1
        prev_t = current.frames[-1].t if self._last is None else self._last[0]
        if self._quiet and len(current.frames) >= QUIET_FRAMES and length >= self.max_s - _EPS:
            # frames 0, e, 2e, … of the segment are kept; every second of them leaves
            self._every *= 2
            del current.frames[1::2]
        if self._every > 1:
            self._last = (frame.t, frame.t - prev_t)
        if self._fed % self._every == 0:
            current.frames.append(frame)
        return None

    def prime(self, frame: Frame, speech: bool | None = None) -> None:
        """Remember ``frame`` as the one before the next segment (resume), without adding it.

        The first segment then gets a real ``cut_score``, as it had in an uninterrupted run.
        """
        if self._current is not None:
            raise RuntimeError("prime() must come before the first feed()")
        self._prev = signature(frame.image_bgr)
        self._prev_speech = speech

    def flush(self, end_t: float | None = None) -> Segment | None:
        """Close and return the open segment (``None`` if no frame was fed).

        ``end_t`` is the media end; without it the segment ends one sampling step after its
        last frame (or at it, for a single frame).
        """
        current = self._current
        if current is None:
            return None
        last = current.frames[-1].t if self._last is None else self._last[0]
        if end_t is None:
            if self._last is not None:
                end_t = last + self._last[1]
            elif len(current.frames) > 1:
                end_t = last + (last - current.t_start) / (len(current.frames) - 1)
            else:
                end_t = last
        current.t_end = max(end_t, last)
        limit = self._limit()
        if current.t_end - current.t_start > limit:
            current.t_end = current.t_start + limit
        self._current = None
        self._prev = None
        self._prev_speech = None
        self._moving = self._changed_at = None
        self._quiet = False
        return current

    def _still(self, motion: tuple[float, float] | None) -> bool:
        """Whether this frame is still against the one before, in a segment that is not moving (unknown counts
        as moving): its change does not clear the motion threshold by its noise floor."""
        if motion is None or self.motion_threshold is None or self._moving:
            return False
        return motion[0] < self.motion_threshold + motion[1]

    def _limit(self) -> float:
        """The longest the current segment may run: ``max_still_s`` while it is still and quiet."""
        return self.max_still_s if self._quiet else self.max_s

    def segments(
        self, frames: Iterable[Frame], end_t: float | Callable[[], float | None] | None = None,
        start_t: float | None = None, speech: Callable[[float], bool] | None = None,
    ) -> Iterator[Segment]:
        """Segment a frame stream, yielding each segment as soon as it is closed.

        ``end_t`` (the media end) may be a callable, asked once the frames are exhausted: a file
        that broke off early then ends its last segment at its last frame, not at its stated end.

        Frames before ``start_t`` only :meth:`prime` the segmenter (a resumed run decodes a
        little before its resume point so the first segment's ``cut_score`` is known).
        """
        for frame in frames:
            flag = speech(frame.t) if speech is not None else None
            if start_t is not None and frame.t < start_t - _EPS:
                self.prime(frame, flag)
                continue
            closed = self.feed(frame, flag)
            if closed is not None:
                yield closed
        last = self.flush(end_t() if callable(end_t) else end_t)
        if last is not None:
            yield last

    def _start(self, frame: Frame, score: float) -> None:
        self._moving = self._changed_at = None
        self._fed, self._every, self._last = 0, 1, None
        self._current = Segment(
            index=self._next_index, t_start=frame.t, t_end=frame.t, frames=[frame], cut_score=score
        )
        self._next_index += 1

    def _cut(self, frame: Frame, score: float) -> Segment:
        closed = self._current
        assert closed is not None
        closed.t_end = frame.t
        logger.debug("cut before t=%.3f (score %.3f), segment %d", frame.t, score, closed.index)
        self._start(frame, score)
        return closed
