"""Decoding and probing with PyAV."""

from __future__ import annotations

from pathlib import Path

import pytest

from perception import MediaError, iter_frames, probe


def test_probe_reports_duration_rate_size_and_audio(synthetic_clip: Path) -> None:
    info = probe(synthetic_clip)
    assert info.duration_s == pytest.approx(2.0, abs=0.05)
    assert info.fps == pytest.approx(25.0)
    assert (info.width, info.height) == (320, 240)
    assert info.has_audio


def test_probe_of_the_test_clip(hamilton: Path) -> None:
    info = probe(hamilton)
    assert info.duration_s == pytest.approx(9.18, abs=0.05)
    assert info.fps == pytest.approx(29.97, abs=0.01)
    assert (info.width, info.height) == (640, 360)
    assert info.has_audio
    assert info.start_s == pytest.approx(0.852, abs=0.01)


def test_iter_frames_samples_on_a_time_grid(synthetic_clip: Path) -> None:
    frames = list(iter_frames(synthetic_clip, sample_fps=4.0))
    assert [f.index for f in frames] == list(range(8))
    # each sample is the first 25-fps frame at or after k / 4 s
    assert all(k * 0.25 - 1e-6 <= f.t < k * 0.25 + 0.04 for k, f in enumerate(frames))
    assert frames[0].image_bgr.shape == (240, 320, 3)


def test_iter_frames_after_a_seek_equals_the_tail_of_a_full_decode(hamilton: Path) -> None:
    full = list(iter_frames(hamilton, sample_fps=4.0))
    start = full[15].t
    tail = list(iter_frames(hamilton, sample_fps=4.0, start_s=start))
    assert [(f.index, f.t) for f in tail] == [(f.index, f.t) for f in full[15:]]
    assert (tail[0].image_bgr == full[15].image_bgr).mean() > 0.99


def test_iter_frames_limits_the_long_side(hamilton: Path) -> None:
    frame = next(iter(iter_frames(hamilton, sample_fps=1.0, max_side=320)))
    assert frame.image_bgr.shape == (180, 320, 3)


def test_missing_file_raises_media_error_saying_check_the_path(tmp_path: Path) -> None:
    with pytest.raises(MediaError, match="check the path") as err:
        probe(tmp_path / "nope.mp4")
    assert isinstance(err.value, FileNotFoundError)
    with pytest.raises(MediaError, match="check the path"):
        next(iter(iter_frames(tmp_path / "nope.mp4")))


def test_corrupt_file_raises_media_error_saying_what_is_wrong(tmp_path: Path) -> None:
    bad = tmp_path / "x.mp4"
    bad.write_bytes(bytes(range(256)) * 64)
    with pytest.raises(MediaError, match="corrupt") as err:
        probe(bad)
    assert "x.mp4" in str(err.value)
    with pytest.raises(MediaError, match="corrupt"):
        list(iter_frames(bad))


def test_a_file_without_video_is_refused(tmp_path: Path) -> None:
    import shutil

    flac = tmp_path / "speech.flac"
    shutil.copy(Path(__file__).resolve().parents[1] / "data" / "jfk.flac", flac)
    with pytest.raises(MediaError, match="no video stream"):
        probe(flac)
