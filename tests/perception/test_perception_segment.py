"""Scene-cut segmentation on synthetic frames and on the test clip."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from perception import Frame, Segmenter, iter_frames
from perception.segmenting.segment import colour_histogram, frame_distance


def _frames(colours: list[tuple[int, int, int]], fps: float = 4.0) -> list[Frame]:
    rng = np.random.default_rng(0)
    out = []
    for i, c in enumerate(colours):
        img = np.full((90, 160, 3), c, np.uint8)
        img = np.clip(img.astype(int) + rng.integers(-8, 9, img.shape), 0, 255).astype(np.uint8)
        out.append(Frame(index=i, t=i / fps, image_bgr=img))
    return out


RED, BLUE = (30, 30, 200), (200, 60, 30)


def test_a_cut_between_two_colours_gives_exactly_one_boundary() -> None:
    segs = list(Segmenter(min_s=0.5, max_s=10).segments(_frames([RED] * 8 + [BLUE] * 8)))
    assert [(s.index, s.t_start, s.t_end, len(s.frames)) for s in segs] == [(0, 0.0, 2.0, 8), (1, 2.0, 4.0, 8)]
    assert segs[1].cut_score > 0.5


def test_max_length_is_respected() -> None:
    segs = list(Segmenter(min_s=0.5, max_s=1.5).segments(_frames([RED] * 12)))
    assert len(segs) == 2
    assert all(s.duration <= 1.5 + 1e-9 for s in segs)
    assert segs[0].t_end == segs[1].t_start


def test_a_still_segment_without_speech_runs_to_max_still_s() -> None:
    frames = _frames([RED] * 40)  # 10 s of one noisy colour: still
    still = list(Segmenter(min_s=0.5, max_s=2.0, motion_threshold=0.05, max_still_s=6.0).segments(frames))
    # the first frame has no frame before it to be still against, so the first segment stops at max_s
    assert [s.duration for s in still] == [2.0, 6.0, 2.0]
    speaking = list(Segmenter(min_s=0.5, max_s=2.0, motion_threshold=0.05, max_still_s=6.0).segments(
        frames, speech=lambda t: True))
    assert all(s.duration <= 2.0 + 1e-9 for s in speaking) and len(speaking) == 5


def test_a_long_still_segment_keeps_a_bounded_number_of_frames_spread_over_it() -> None:
    from perception.segmenting.segment import QUIET_FRAMES

    frames = _frames([RED] * 400)  # 100 s still
    segs = list(Segmenter(min_s=0.5, max_s=2.0, motion_threshold=0.05, max_still_s=120.0).segments(frames))
    still = segs[1]
    assert (still.t_start, still.t_end) == (2.0, 100.0)  # the stream's end: one sampling step after its last frame
    kept = [f.t for f in still.frames]
    assert QUIET_FRAMES // 2 <= len(kept) <= QUIET_FRAMES and kept[0] == 2.0 and kept[-1] > 95.0
    assert len({round(b - a, 6) for a, b in zip(kept, kept[1:])}) == 1  # evenly spread over the whole segment


def test_min_length_is_respected() -> None:
    # colour flips every frame: only cuts that leave segments of >= 1 s may happen
    segs = list(Segmenter(min_s=1.0, max_s=10).segments(_frames([RED, BLUE] * 8)))
    assert len(segs) > 1
    assert all(s.duration >= 1.0 - 1e-9 for s in segs[:-1])


def test_segmentation_is_deterministic_and_restartable_at_a_cut() -> None:
    frames = _frames([RED] * 5 + [BLUE] * 7 + [RED] * 6)
    full = list(Segmenter(0.5, 1.25).segments(frames))
    cut = full[2]
    start = next(i for i, f in enumerate(frames) if f.t == cut.t_start)
    resumed = list(Segmenter(0.5, 1.25, first_index=cut.index).segments(frames[start:]))
    key = [(s.index, s.t_start, s.t_end) for s in full[2:]]
    assert key == [(s.index, s.t_start, s.t_end) for s in resumed]


def test_identical_frames_have_zero_distance() -> None:
    img = _frames([RED])[0].image_bgr
    assert frame_distance(colour_histogram(img), colour_histogram(img)) == pytest.approx(0.0, abs=1e-6)


def test_rejects_impossible_lengths() -> None:
    with pytest.raises(ValueError, match="min_s"):
        Segmenter(min_s=5, max_s=1)


def test_default_settings_cut_the_test_clip_at_its_shot_changes(hamilton: Path) -> None:
    segs = list(Segmenter().segments(iter_frames(hamilton, 4.0)))
    starts = [round(s.t_start, 2) for s in segs]
    # wide shot (from 0.85 s), pianist profile ~1.5 s, performer ~3.75 s, audience ~8.0 s
    assert 4 <= len(segs) <= 7
    for shot in (1.52, 3.75, 8.03):
        assert any(abs(t - shot) < 0.3 for t in starts), (shot, starts)


def test_motion_is_what_a_gain_and_offset_do_not_explain_and_noise_raises_the_floor() -> None:
    from perception.segmenting.change import motion_measure

    rng = np.random.default_rng(1)
    a = rng.uniform(0.2, 0.8, (36, 64)).astype(np.float32)
    brighter = np.clip(a * 1.15 + 0.03, 0, 1)  # exposure: every pixel changes, nothing moves
    change, floor = motion_measure(a, brighter)
    assert change < 0.002 and np.abs(brighter - a).mean() > 0.08
    walked_in = a.copy()
    walked_in[5:30, 10:30] = 0.1  # a dark figure over a quarter of the frame
    change, floor = motion_measure(a, walked_in)
    assert change > 0.05 and floor < 0.1 * change  # the rest of the frame stays nearly explained
    noisy = np.clip(a + rng.normal(0, 0.02, a.shape), 0, 1).astype(np.float32)  # sensor noise everywhere
    change, floor = motion_measure(a, noisy)
    assert 0.3 * change < floor < change  # spread evenly: its floor rises with it
