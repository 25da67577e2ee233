"""Audio decode to 16 kHz mono, Silero VAD (vendored ONNX, real inference), speech-turn segmentation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from perception.media.audio import SAMPLE_RATE, AudioBuffer, SileroVAD, decode_audio, scan_audio, speech_intervals_of
from perception.errors import MediaError
from perception.segmenting.segment import Segmenter
from perception.media.video import Frame

JFK = Path(__file__).resolve().parents[1] / "data" / "jfk.flac"


@pytest.fixture(scope="module")
def vad() -> SileroVAD:
    return SileroVAD()


def test_decode_audio_gives_16k_mono_float32_between_two_times() -> None:
    whole = decode_audio(JFK)
    assert whole.dtype == np.float32 and whole.ndim == 1 and abs(len(whole) / SAMPLE_RATE - 11.0) < 0.05
    part = decode_audio(JFK, 2.0, 3.5)
    assert len(part) == int(1.5 * SAMPLE_RATE)
    ref = whole[2 * SAMPLE_RATE:2 * SAMPLE_RATE + len(part)]
    assert np.corrcoef(part, ref)[0, 1] > 0.99  # the same samples (resampler edges after a seek differ slightly)


def test_decode_audio_of_a_missing_file_says_check_the_path(tmp_path: Path) -> None:
    with pytest.raises(MediaError, match="check the path"):
        decode_audio(tmp_path / "nope.wav")


def test_vad_finds_the_speech_turns_of_a_real_recording(vad: SileroVAD) -> None:
    turns = speech_intervals_of(JFK, vad)
    assert 3 <= len(turns) <= 6
    assert turns[0][0] < 1.0 and turns[-1][1] > 10.0
    assert all(b[0] > a[1] for a, b in zip(turns, turns[1:]))  # separated by pauses


def test_one_audio_scan_gives_the_speech_turns_and_the_loudness_of_any_span(vad: SileroVAD) -> None:
    scan = scan_audio(JFK, vad)
    assert scan.intervals == speech_intervals_of(JFK, vad) and scan.bad_packets == 0
    whole = decode_audio(JFK)
    for a, b in [(0.0, 11.0), (2.0, 3.5), (7.3, 9.9)]:
        samples = whole[int(a * SAMPLE_RATE):int(b * SAMPLE_RATE)]
        exact = float(np.sqrt(np.mean(np.square(samples.astype(np.float64)))))
        assert scan.levels.rms(a, b) == pytest.approx(exact, rel=0.15)  # 0.1 s bins at the span's edges
    assert scan.levels.rms(20.0, 30.0) is None  # past the end: no audio there


def test_vad_hears_no_speech_in_a_tone_or_silence(vad: SileroVAD) -> None:
    t = np.arange(2 * SAMPLE_RATE) / SAMPLE_RATE
    assert not vad.is_speech((0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32))
    assert not vad.is_speech(np.zeros(SAMPLE_RATE, np.float32))
    assert vad.is_speech(decode_audio(JFK, 0.0, 2.5))


def test_a_speech_turn_is_a_segment_boundary_once_the_minimum_length_is_reached() -> None:
    image = np.full((60, 80, 3), 90, np.uint8)  # no visual change at all
    frames = [Frame(index=i, t=i * 0.25, image_bgr=image) for i in range(24)]
    talking = {t for t in np.arange(1.0, 3.0, 0.25)}
    seg = Segmenter(min_s=0.5, max_s=10.0)
    cuts = [s.t_start for s in seg.segments(frames, speech=lambda t: t in talking)]
    assert cuts == [0.0, 1.0, 3.0]
    assert [s.t_start for s in Segmenter(min_s=0.5, max_s=10.0).segments(frames)] == [0.0]


def test_the_audio_buffer_slices_by_media_time_and_stays_bounded() -> None:
    buf = AudioBuffer(max_s=2.0)
    for k in range(10):
        buf.add(k * 0.5, np.full(SAMPLE_RATE // 2, k, np.float32))
    assert abs(buf.end_t - 5.0) < 1e-9
    piece = buf.slice(3.75, 4.25)
    assert len(piece) == SAMPLE_RATE // 2 and set(piece.tolist()) == {7.0, 8.0}
    assert len(buf.slice(0.0, 1.0)) == 0  # trimmed: only the last ~2 s are kept
