"""Scheduler: frame gate, segment policy with hard guards, counters, and the two-phase commit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from perception.segmenting.scheduler import (
    Scheduler,
    SegmentSignals,
    audio_rms,
    frame_changed,
    segment_motion,
)
from perception.media.video import iter_frames

STATIC_SILENT = SegmentSignals(motion=0.001, audio_rms=0.0)


def test_frame_gate_on_real_frames(synthetic_clip: Path) -> None:
    frames = [f.image_bgr for f in iter_frames(synthetic_clip, sample_fps=10)]
    assert len(frames) >= 15
    assert not frame_changed(frames[0], frames[0].copy())
    assert frame_changed(None, frames[0])
    # the colour cut at 1.0 s is a change; the static background before it barely moves
    cut = next(i for i in range(1, len(frames)) if frame_changed(frames[i - 1], frames[i], threshold=0.05))
    assert 9 <= cut <= 11
    assert segment_motion(frames[:5]) < segment_motion(frames[8:12])
    assert segment_motion(frames[:1]) == 0.0


def test_audio_rms() -> None:
    assert audio_rms(None) is None
    assert audio_rms(np.zeros(16000, np.float32)) == 0.0
    tone = 0.5 * np.sin(np.linspace(0, 200 * np.pi, 16000)).astype(np.float32)
    assert audio_rms(tone) == pytest.approx(0.5 / np.sqrt(2), rel=1e-2)


def test_offline_quality_analyses_every_changing_segment_and_carries_static_silent_ones() -> None:
    sched = Scheduler("offline_quality", "full")
    decisions = [sched.decide(SegmentSignals(motion=0.001, audio_rms=0.2)) for _ in range(3)]
    decisions += [sched.decide(SegmentSignals(motion=0.2)) for _ in range(2)]
    assert {d.action for d in decisions} == {"full"}
    assert sched.decide(STATIC_SILENT).action == "skip"
    assert sched.decide(SegmentSignals(first_of_event=True, motion=0.0, audio_rms=0.0)).action == "full"
    assert sched.counters()["analysed"] == 6 and sched.counters()["skipped"] == 1


@pytest.mark.parametrize(("signals", "reason"), [
    (SegmentSignals(first_of_event=True, motion=0.0, audio_rms=0.0), "first segment of an event"),
    (SegmentSignals(speech=True, motion=0.0, audio_rms=0.0), "speech"),
    (SegmentSignals(transcription_failed=True, motion=0.0, audio_rms=0.0), "audio could not be transcribed"),
])
def test_hard_guards_override_the_static_silent_gate(signals: SegmentSignals, reason: str) -> None:
    sched = Scheduler("live_latency", "full")
    decision = sched.decide(signals)
    assert (decision.action, decision.reason, decision.guard) == ("full", reason, True)


def test_live_latency_skips_static_silent_and_picks_light_or_full() -> None:
    sched = Scheduler("live_latency", "full")
    assert sched.decide(STATIC_SILENT).action == "skip"
    assert sched.decide(SegmentSignals(motion=0.001, audio_rms=0.2)).action == "light"  # sound, nothing detected
    assert sched.decide(SegmentSignals(motion=0.2, detections=2)).action == "full"
    assert sched.decide(SegmentSignals(motion=0.0, scene_cut=True)).action == "full"
    assert Scheduler("live_latency", "light").decide(SegmentSignals(motion=0.2, detections=3)).action == "light"
    counts = sched.counters()
    assert (counts["skipped"], counts["analysed"], counts["light"], counts["full"]) == (1, 3, 1, 2)
    assert counts["reasons"]["static and silent"] == 1 and counts["mode"] == "live_latency"


def test_a_static_silent_segment_an_active_rule_could_match_is_analysed() -> None:
    sched = Scheduler("live_latency", "full")
    relevant = SegmentSignals(motion=0.0, audio_rms=None, detections=1, rule_relevant=True)
    decision = sched.decide(relevant)
    assert decision.action == "full" and decision.guard and decision.reason == "may match an active rule"
    assert sched.decide(STATIC_SILENT).action == "skip"
