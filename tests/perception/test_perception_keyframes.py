"""Key-frame quality, selection and JPEG encoding."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from perception import Frame, encode_jpeg, quality, select_keyframes

IMAGES = Path(__file__).resolve().parents[1] / "data" / "images"


def test_quality_prefers_a_sharp_colourful_frame_over_a_blurred_grey_one() -> None:
    sharp = cv2.imread(str(IMAGES / "chelsea.png"))
    grey = cv2.GaussianBlur(cv2.cvtColor(cv2.cvtColor(sharp, cv2.COLOR_BGR2GRAY), cv2.COLOR_GRAY2BGR), (21, 21), 8)
    blurred = cv2.GaussianBlur(sharp, (21, 21), 8)
    assert quality(sharp) > quality(blurred) > quality(grey)
    assert quality(grey) < 0.05
    assert 0 <= quality(sharp) < 1


def test_select_keyframes_keeps_the_best_frames_a_minimum_gap_apart() -> None:
    base = cv2.resize(cv2.imread(str(IMAGES / "astronaut.png")), (160, 160))
    blurred = cv2.GaussianBlur(base, (15, 15), 6)
    frames = [Frame(i, i * 0.25, base if i in (2, 3, 9) else blurred) for i in range(12)]
    picks = select_keyframes(frames, k=2, min_gap_s=1.0)
    assert [p.frame.index for p in picks] == [2, 9]
    assert all(p.quality > 0 for p in picks)


def test_select_keyframes_returns_at_least_one_frame_for_a_short_segment() -> None:
    img = np.full((32, 32, 3), 128, np.uint8)
    picks = select_keyframes([Frame(0, 0.0, img)], k=2, min_gap_s=5.0)
    assert len(picks) == 1
    assert select_keyframes([], k=2, min_gap_s=1.0) == []


def test_encode_jpeg_downscales_and_decodes_back() -> None:
    img = np.random.default_rng(1).integers(0, 255, (720, 1280, 3), dtype=np.uint8)
    data = encode_jpeg(img, max_side=640, quality=80)
    assert data[:2] == b"\xff\xd8"
    back = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    assert back.shape == (360, 640, 3)
