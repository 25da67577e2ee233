"""What to analyse, how deeply, and in which order (DESIGN §5 "Levels" and "Modes").

* **Frame level** (:func:`frame_changed`): a live driver drops frames that barely differ from
  the last kept one while the audio is silent (:func:`audio_rms`) — the static/silent gate.
* **Segment level** (:meth:`Scheduler.decide`): ``skip``, ``light`` (vision only) or ``full``
  (detection + re-ID + VLM). Hard guards always analyse the first segment of an event, any segment
  with speech and any segment whose audio could not be transcribed. Both modes skip static, silent
  segments: the analyzer commits them with the previous segment's findings carried forward (the
  scene has not changed), so ``offline_quality`` stays complete without re-running the models.
  ``offline_quality`` analyses every other segment at the level; ``live_latency`` uses ``light``
  when nothing was detected. Counters of skipped and analysed segments feed ``capture_status``.
* **Rules**: a segment that could match an active rule (``SegmentSignals.rule_relevant``) is
  never skipped, so a static scene with someone a rule watches for is still looked at.
* **Modes**: in ``live_latency`` the identity-critical write is committed first under the
  per-user identity lock and the VLM enrichment afterwards
  (:meth:`perception.drivers.analyzer.SegmentAnalyzer.commit`); ``offline_quality`` commits once, in order.
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from perception.media.video import grey_thumbnail

__all__ = ["Decision", "Scheduler", "SegmentSignals", "audio_rms", "frame_changed", "segment_motion"]

logger = logging.getLogger(__name__)

Mode = Literal["offline_quality", "live_latency"]
Action = Literal["skip", "light", "full"]


def frame_changed(previous: np.ndarray | None, current: np.ndarray, threshold: float = 0.02) -> bool:
    """Whether ``current`` differs from ``previous`` (mean absolute grey difference > ``threshold``)."""
    if previous is None:
        return True
    return float(np.abs(grey_thumbnail(previous) - grey_thumbnail(current)).mean()) > threshold


def segment_motion(images: Sequence[np.ndarray]) -> float:
    """Mean absolute difference of consecutive downscaled grey frames, in [0, 1]."""
    if len(images) < 2:
        return 0.0
    greys = [grey_thumbnail(im) for im in images]
    return float(np.mean([np.abs(a - b).mean() for a, b in itertools.pairwise(greys)]))


def audio_rms(samples: np.ndarray | None) -> float | None:
    """Root mean square of float samples in [-1, 1] (``None`` when there is no audio)."""
    if samples is None or samples.size == 0:
        return None
    x = samples.astype(np.float32, copy=False).ravel()
    return math.sqrt(float(np.dot(x, x)) / x.size)


@dataclass(frozen=True)
class SegmentSignals:
    """What the scheduler knows about a segment before analysing it."""

    first_of_event: bool = False
    motion: float = 0.0
    audio_rms: float | None = None
    speech: bool = False
    transcription_failed: bool = False
    detections: int = 0
    scene_cut: bool = False
    #: an active rule could match this segment (its camera has a rule on what the last segment showed)
    rule_relevant: bool = False


@dataclass(frozen=True)
class Decision:
    """The scheduler's verdict for one segment."""

    action: Action
    reason: str
    guard: bool = False

    @property
    def analysed(self) -> bool:
        return self.action != "skip"


class Scheduler:
    """Segment-level policy with hard guards and thread-safe counters."""

    def __init__(self, mode: Mode = "offline_quality", level: Literal["light", "full"] = "full",
                 static_motion: float = 0.01, silence_rms: float = 0.01) -> None:
        self.mode = mode
        self.level = level
        self.static_motion = static_motion
        self.silence_rms = silence_rms
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {"analysed": 0, "skipped": 0, "light": 0, "full": 0, "guarded": 0}
        self._reasons: dict[str, int] = {}

    def _deep(self, s: SegmentSignals) -> Action:
        return "full" if self.level == "full" else "light"

    def decide(self, s: SegmentSignals) -> Decision:
        """Choose ``skip`` / ``light`` / ``full`` for one segment and count it."""
        decision = self._decide(s)
        with self._lock:
            self._counts["analysed" if decision.analysed else "skipped"] += 1
            if decision.analysed:
                self._counts[decision.action] += 1
            self._counts["guarded"] += int(decision.guard)
            self._reasons[decision.reason] = self._reasons.get(decision.reason, 0) + 1
        logger.debug("scheduler: %s (%s)", decision.action, decision.reason)
        return decision

    def _decide(self, s: SegmentSignals) -> Decision:
        if s.first_of_event:
            return Decision(self._deep(s), "first segment of an event", guard=True)
        if s.speech:
            return Decision(self._deep(s), "speech", guard=True)
        if s.transcription_failed:
            return Decision(self._deep(s), "audio could not be transcribed", guard=True)
        silent = s.audio_rms is None or s.audio_rms < self.silence_rms
        if s.motion < self.static_motion and silent and not s.scene_cut:
            if s.rule_relevant:
                return Decision(self._deep(s), "may match an active rule", guard=True)
            return Decision("skip", "static and silent")
        if self.mode == "offline_quality":
            return Decision(self._deep(s), "offline_quality analyses every segment that changes")
        if self.level == "light":
            return Decision("light", "perception level is light")
        if s.detections == 0 and not s.scene_cut:
            return Decision("light", "nothing detected")
        return Decision("full", "detections or scene cut")

    def counters(self) -> dict[str, object]:
        """Counts for ``capture_status``: analysed, skipped, light, full, guarded, by reason."""
        with self._lock:
            return {**self._counts, "mode": self.mode, "reasons": dict(self._reasons)}
