"""The scheduler gates real ingestion: static, silent segments carry the previous analysis forward in both modes."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

from tests.conftest import engine_for

PERCEPTION = {"max_segment_s": 4.0, "max_still_segment_s": 4.0, "ocr": {"type": "none"}, "asr": {"type": "none"},
              "objects": {"type": "none"}, "body": {"type": "none"}}


def static_clip(path: Path, seconds: int = 12, fps: int = 5) -> Path:
    """A still scene (no motion, no audio): the max segment length cuts it into 3 segments."""
    image = np.zeros((240, 320, 3), np.uint8)
    image[:, :160] = (40, 120, 200)
    image[60:180, 200:300] = (220, 220, 220)
    with av.open(str(path), mode="w") as out:
        stream = out.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = 320, 240, "yuv420p"
        for n in range(seconds * fps):
            frame = av.VideoFrame.from_ndarray(image, format="bgr24")
            frame.pts, frame.time_base = n, Fraction(1, fps)
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path


@pytest.mark.parametrize(("mode", "skipped"), [("live_latency", 2), ("offline_quality", 2)])
def test_static_silent_segments_carry_the_previous_analysis_in_both_modes(tmp_path: Path, mode: str, skipped: int) -> None:
    clip = static_clip(tmp_path / "still.mp4")
    with engine_for(tmp_path, perception={**PERCEPTION, "mode": mode}) as engine:
        report = engine.ingest_file(clip, "hall")
        traces = engine.store.timeline()
        counts = engine.perception.scheduler.counters()
    assert report.segments_written == len(traces) == 3  # skipped segments are still committed
    assert counts["skipped"] == skipped and counts["analysed"] == 3 - skipped
    assert traces[0].level == "full"  # the first segment of an event is always analysed
    assert [t.level for t in traces[1:]] == ["full"] * 2  # the first segment's analysis, carried forward
    assert [t.summary for t in traces[1:]] != ["", ""] and all(len(t.keyframe_ids) >= 1 for t in traces)


def test_a_segment_an_active_rule_could_match_is_never_skipped(tmp_path: Path) -> None:
    """A still scene with something a rule watches for: live_latency analyses it instead of skipping."""
    clip = static_clip(tmp_path / "still.mp4")
    with engine_for(tmp_path, perception={**PERCEPTION, "mode": "live_latency"}) as engine:
        engine.notifications.add_rule("tell me when someone comes into view")
        assert not engine.notifications.could_match("hall", 0, [])
        assert engine.notifications.could_match("hall", 1, [])
        engine.ingest_file(clip, "hall")
        counts = engine.perception.scheduler.counters()
    # nobody is in the still scene, so the rule cannot match it: static segments are still skipped
    assert counts["skipped"] == 2 and "may match an active rule" not in counts["reasons"]


def test_a_still_quiet_scene_writes_long_segments(tmp_path: Path) -> None:
    """Nothing moves and nobody speaks: after the first segment, one segment per max_still_segment_s."""
    clip = static_clip(tmp_path / "still.mp4", seconds=24)
    perception = {**PERCEPTION, "max_still_segment_s": 10.0}
    with engine_for(tmp_path, perception=perception) as engine:
        report = engine.ingest_file(clip, "hall")
        traces = engine.store.timeline()
    # the stream's first frame has nothing to be still against: that segment ends at max_segment_s
    assert [round(t.t_end - t.t_start) for t in traces] == [4, 10, 10]
    assert report.segments_written == 3
