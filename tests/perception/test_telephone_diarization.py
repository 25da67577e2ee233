"""Diarization of a quick two-speaker exchange on a telephone line (real ONNX models, real GRID voices).

The conversation is built here from two GRID recordings: turns of 0.4-1 s with pauses of 0.1-0.4 s,
band-passed to 300-3400 Hz, written as an 8 kHz WAV with line noise and scored through
``reflectworld eval diarization``.
"""

from __future__ import annotations

import json
import wave
from pathlib import Path

import numpy as np
import pytest

from perception.detectors.asr import load_audio
from perception.detectors.speaker_frames import CAM_STEP_S, viterbi
from perception.detectors.speakers import SpeakerEmbedder, narrowband
from perception.media.audio import SileroVAD
from plugin.cli import main
from tests.conftest import DATA

pytestmark = pytest.mark.slow


def test_voice_following_ignores_a_blip_and_follows_a_lasting_change() -> None:
    scores = np.array([[1, 0]] * 4 + [[0, 1]] + [[1, 0]] * 4 + [[0, 1]] * 6, float)
    path = viterbi(scores, switch=1.5)
    assert path.tolist() == [0] * 9 + [1] * 6


def test_pooled_frame_features_are_the_models_own_embedding() -> None:
    embedder = SpeakerEmbedder()
    audio = load_audio(DATA / "grid_bbaf2n.mpg")
    frames = embedder.frames(audio)
    assert len(frames) == pytest.approx(len(audio) / 16000 / CAM_STEP_S, abs=3)
    pooled = np.maximum(embedder.pool(frames), 0)  # CAM++ ends in a ReLU
    assert float(pooled @ embedder.embed(audio)) / float(np.linalg.norm(pooled)) > 0.999
    part = embedder.pool(frames[20:60])  # any part of the pass embeds on its own
    assert part is not None and float(np.linalg.norm(part)) > 0


def _telephone(rng: np.random.Generator) -> tuple[np.ndarray, list[tuple[float, float, str]]]:
    voices = {name: load_audio(DATA / f"{name}.mpg") for name in ("grid_bbaf2n", "grid_brbk7n")}
    vad = SileroVAD()
    spans = {}
    for name, audio in voices.items():
        vad.reset()
        spans[name] = max(vad.speech_intervals(vad.probabilities(audio)), key=lambda ab: ab[1] - ab[0])
    out = np.zeros(16000 * 25, np.float32)
    turns: list[tuple[float, float, str]] = []
    t, names = 0.3, list(voices)
    for k in range(20):
        who = names[k % 2]
        audio = voices[who]
        a, b = spans[who]
        length = min(float(rng.uniform(0.4, 1.0)), b - a)
        start = float(rng.uniform(a, b - length))  # inside the sentence
        piece = audio[int(start * 16000):int((start + length) * 16000)]
        out[int(t * 16000):int(t * 16000) + len(piece)] += piece / np.abs(piece).max() * 0.4
        turns.append((round(t, 3), round(t + length, 3), who))
        t += length + float(rng.uniform(0.1, 0.4))
    out = out[:int((t + 0.3) * 16000)]
    spec = np.fft.rfft(out)
    freqs = np.fft.rfftfreq(len(out), 1 / 16000)
    spec[(freqs < 300) | (freqs > 3400)] = 0
    line = np.fft.irfft(spec, len(out))[::2] + rng.normal(0, 0.002, len(out[::2]))
    return line.astype(np.float32), turns


def test_a_quick_telephone_exchange_is_two_voices_with_low_der(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    line, turns = _telephone(np.random.default_rng(3))
    with wave.open(str(tmp_path / "call.wav"), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(8000)
        out.writeframes(np.clip(line * 32767, -32768, 32767).astype(np.int16).tobytes())
    (tmp_path / "call.rttm").write_text("".join(
        f"SPEAKER call 1 {s:.3f} {e - s:.3f} <NA> <NA> {w} <NA> <NA>\n" for s, e, w in turns), encoding="utf-8")
    assert narrowband(load_audio(tmp_path / "call.wav"), -35.0)
    assert not narrowband(load_audio(DATA / "grid_bbaf2n.mpg"), -35.0)
    assert main(["eval", "diarization", str(tmp_path), "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["speaker_count_accuracy"] == 1.0 and result["der"] < 0.25, result


def _monologue(rng: np.random.Generator) -> tuple[np.ndarray, list[tuple[float, float, str]]]:
    """The LibriVox reader alone, in pieces of 0.3-2.5 s with pauses of 0.05-0.4 s (16 kHz, about 25 s)."""
    vad = SileroVAD()
    spans = []
    for name in ("sense_and_sensibility_01_austen_64kb-0870", "sense_and_sensibility_01_austen_64kb-0920"):
        audio = load_audio(DATA / f"{name}.wav")
        vad.reset()
        spans += [(audio, a, b) for a, b in vad.speech_intervals(vad.probabilities(audio)) if b - a >= 0.5]
    out = np.zeros(16000 * 30, np.float32)
    turns: list[tuple[float, float, str]] = []
    t = 0.3
    while t < 25:
        audio, a, b = spans[int(rng.integers(len(spans)))]
        length = min(float(rng.uniform(1.0, 2.5) if rng.random() < 0.25 else rng.uniform(0.3, 1.0)), b - a)
        start = float(rng.uniform(a, b - length))
        piece = audio[int(start * 16000):int((start + length) * 16000)]
        out[int(t * 16000):int(t * 16000) + len(piece)] += piece / np.abs(piece).max() * 0.4
        turns.append((round(t, 3), round(t + length, 3), "reader"))
        t += length + float(rng.uniform(0.05, 0.4))
    return out[:int((t + 0.3) * 16000)], turns


def _write_wav(path: Path, audio: np.ndarray, rate: int) -> None:
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(np.clip(audio * 32767, -32768, 32767).astype(np.int16).tobytes())


def test_one_reader_alone_is_one_voice_on_a_line_and_wide_band(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(3)
    audio, turns = _monologue(rng)
    spec = np.fft.rfft(audio)
    freqs = np.fft.rfftfreq(len(audio), 1 / 16000)
    spec[(freqs < 300) | (freqs > 3400)] = 0
    line = np.fft.irfft(spec, len(audio))[::2] + rng.normal(0, 0.002, len(audio[::2]))
    _write_wav(tmp_path / "wide.wav", audio, 16000)
    _write_wav(tmp_path / "line.wav", line.astype(np.float32), 8000)
    for name in ("wide", "line"):
        (tmp_path / f"{name}.rttm").write_text("".join(
            f"SPEAKER {name} 1 {s:.3f} {e - s:.3f} <NA> <NA> {w} <NA> <NA>\n" for s, e, w in turns), encoding="utf-8")
    assert main(["eval", "diarization", str(tmp_path), "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["speaker_count_accuracy"] == 1.0 and result["der"] < 0.2, result
