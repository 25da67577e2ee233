"""The scheduler gates real ingestion: live_latency skips static, silent segments; offline_quality never does."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

from memory import HashEmbedder, MemoryStore
from perception import IngestSettings, ingest_file
from perception.segmenting.scheduler import Scheduler

SETTINGS = IngestSettings(max_segment_s=4.0, ocr=False, asr=False, objects=False, body=False)


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


@pytest.mark.parametrize(("mode", "skipped"), [("live_latency", 2), ("offline_quality", 0)])
def test_static_silent_segments_are_skipped_only_in_live_latency(tmp_path: Path, mode: str, skipped: int) -> None:
    clip = static_clip(tmp_path / "still.mp4")
    scheduler = Scheduler(mode, "full")
    with MemoryStore(str(tmp_path / "db"), HashEmbedder(32)) as store:
        report = ingest_file(clip, store, SETTINGS, camera_id="hall", scheduler=scheduler)
        traces = store.timeline()
    counts = scheduler.counters()
    assert report.segments_written == len(traces) == 3  # skipped segments are still committed
    assert counts["skipped"] == skipped and counts["analysed"] == 3 - skipped
    assert traces[0].level == "full"  # the first segment of an event is always analysed
    assert [t.level for t in traces[1:]] == (["light"] * 2 if skipped else ["full"] * 2)
