"""Segmentation on what real cameras record: still scenes under flicker, key-frame pulsing, daylight drift and
sensor noise are one segment per ``max_still_segment_s``; real changes (shot changes, a photograph appearing,
someone walking in) still cut where they happen."""

from __future__ import annotations

from pathlib import Path

import pytest

from perception.drivers.ingest import segmenter_for
from perception.media.gateway import Gateway
from perception.media.sources import AVSource
from perception.media.video import Frame, probe
from perception.segmenting.segment import Segment
from perception.settings import PerceptionConfig
from tests.perception.camera_clips import camera_clip
from tests.perception.conftest import HAMILTON

#: the boundaries (segment starts after the first) the default settings gave the Hamilton clip before the
#: segmenter measured change on content normalised for brightness: three shot changes, then the close-up's
#: motion settling (the segment that opens on the last shot change starts "moving" and is still for 1 s)
HAMILTON_SHOT_CHANGES = (1.519, 3.755, 8.026)
HAMILTON_BOUNDARIES = (*HAMILTON_SHOT_CHANGES, 9.26)
#: half a sampling step at 4 fps
TOLERANCE_S = 0.13


def segments(path: Path, **settings: object) -> list[Segment]:
    """The segments ``reflectworld ingest`` cuts ``path`` into (default settings unless given): frames
    decoded by the ingest path's gateway, the segmenter its settings make."""
    config = PerceptionConfig(**settings)  # type: ignore[arg-type]
    info = probe(path)
    gateway = Gateway(AVSource(uri=str(path), kind="file", live=False, options={"audio": False}), config.sample_fps,
                      mode="offline_quality").start()
    try:
        frames = (item for item in gateway.items() if isinstance(item, Frame))
        return list(segmenter_for(config).segments(frames, end_t=info.start_s + info.duration_s))
    finally:
        gateway.stop()


def boundaries(segs: list[Segment]) -> list[float]:
    return [s.t_start for s in segs[1:]]


def test_the_hamilton_clip_is_cut_at_the_same_times_as_before() -> None:
    segs = segments(HAMILTON)
    assert boundaries(segs) == pytest.approx(list(HAMILTON_BOUNDARIES), abs=TOLERANCE_S)
    threshold = PerceptionConfig().scene_threshold
    assert [s.cut_score >= threshold for s in segs[1:]] == [True, True, True, False]


def test_someone_walking_into_an_empty_room_cuts_when_they_enter_and_when_they_stop(tmp_path: Path) -> None:
    clip = camera_clip(tmp_path / "enter.mp4", "enter", seconds=12.0, event_s=4.0)
    cuts = boundaries(segments(clip, max_segment_s=10.0))
    # they enter at 4.0 s and stop at ~5.4 s; the segment ends after motion_hold_s of stillness
    assert cuts[0] == pytest.approx(4.0, abs=0.3)
    assert cuts[1] == pytest.approx(6.8, abs=0.6)
    assert len(cuts) == 2


@pytest.mark.parametrize(("condition", "amount"), [
    ("flicker", 1), ("flicker", 3), ("dark_flicker", 2), ("framed_flicker", 1), ("gop", 3), ("drift", 0),
    ("noise", 4)])
def test_a_still_scene_is_cut_only_at_the_still_maximum(tmp_path: Path, condition: str, amount: float) -> None:
    clip = camera_clip(tmp_path / f"{condition}.mp4", condition, seconds=16.0, amount=amount)
    segs = segments(clip, max_segment_s=3.0, max_still_segment_s=6.0)
    # the stream's first frame has nothing to be still against, so the first segment ends at max_segment_s;
    # from then on a still, quiet scene runs to max_still_segment_s (the last one to the clip's end)
    assert [(s.t_start, s.t_end) for s in segs] == [(0.0, 3.0), (3.0, 9.0), (9.0, 15.0), (15.0, 16.0)]
    assert all(s.cut_score < PerceptionConfig().scene_threshold for s in segs)


def test_a_photograph_appearing_in_an_empty_room_is_a_scene_cut(tmp_path: Path) -> None:
    clip = camera_clip(tmp_path / "appear.mp4", "appear", seconds=12.0)
    segs = segments(clip, max_segment_s=3.0, max_still_segment_s=60.0)
    opens = [s for s in segs if s.t_start == pytest.approx(6.0, abs=0.13)]
    assert len(opens) == 1 and opens[0].cut_score >= PerceptionConfig().scene_threshold
    assert all(s.t_start <= 6.0 + 1.5 for s in segs[1:])  # then one long still segment, not one per second
    assert segs[-1].t_end - segs[-1].t_start > 4.0


def test_people_walking_in_and_out_of_a_room_cut_where_they_did_before(tmp_path: Path) -> None:
    from tests.plugin.rules_clip import make_people_clip

    clip = make_people_clip(tmp_path / "room.mp4", [(2.0, 6.0, "lin-manuel-miranda.png"),
                                                    (10.0, 14.0, "alex-lacamoire.png")], seconds=16.0)
    # recorded on the segmenter before change was normalised for brightness: each entrance at the first frame
    # that shows them, each exit as they leave, and motion settling 1.2 s after each
    assert boundaries(segments(clip)) == pytest.approx([2.4, 3.8, 5.6, 7.4, 10.4, 11.8, 13.6, 15.0],
                                                       abs=TOLERANCE_S)
