"""Objects, OCR and speech-to-text on real media with the real local models."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from perception.detectors.asr import TurnTranscripts, WhisperTranscriber, load_audio, word_error_rate
from perception.detectors.body import ColourTextureDescriptor
from perception.detectors.faces import FaceDetector
from perception.detectors.objects import SSDObjectDetector
from perception.detectors.ocr import RapidTextReader
from perception.media.audio import SileroVAD

DATA = Path(__file__).resolve().parents[1] / "data"
JFK = "And so my fellow Americans, ask not what your country can do for you, ask what you can do for your country."


@pytest.fixture(scope="module")
def objects() -> SSDObjectDetector:
    return SSDObjectDetector()


def test_the_coffee_image_yields_a_cup(objects: SSDObjectDetector) -> None:
    labels = [d.label for d in objects.detect(cv2.imread(str(DATA / "images" / "coffee.png")))]
    assert {"coffee cup", "mug"} & set(labels), labels


def test_the_astronaut_image_yields_one_face_and_one_person(objects: SSDObjectDetector,
                                                            face_detector: FaceDetector) -> None:
    image = cv2.imread(str(DATA / "images" / "astronaut.png"))
    people = [d for d in objects.detect(image) if d.label == "person"]
    assert len(face_detector.detect(image)) == 1
    assert len(people) == 1
    vec = ColourTextureDescriptor().describe(image, people[0].box)
    assert vec is not None and abs(float(np.linalg.norm(vec)) - 1.0) < 1e-5


@pytest.mark.slow
def test_jfk_transcribes_with_word_error_rate_at_most_0_15() -> None:
    transcript = WhisperTranscriber().transcribe(load_audio(DATA / "jfk.flac"))
    edits, words = word_error_rate(JFK, transcript.text)
    assert edits / words <= 0.15, transcript.text
    assert transcript.words and transcript.words[0].start < transcript.words[-1].end <= 11.5


def _stream(names: list[str], pause_s: float = 3.0) -> tuple[np.ndarray, list[tuple[float, float]]]:
    """The files' audio one after another with pauses between; returns it and each file's span."""
    parts, spans, t = [], [], 0.0
    for name in names:
        audio = load_audio(DATA / name)
        parts += [np.zeros(int(pause_s * 16000), np.float32), audio]
        spans.append((t + pause_s, t + pause_s + len(audio) / 16000))
        t = spans[-1][1]
    return np.concatenate(parts), spans


@pytest.mark.slow
@pytest.mark.parametrize("names", [
    ["grid_bbaf2n.mpg", "jfk.flac", "grid_brbk7n.mpg"],
    # Whisper ends this first window after the short turns: the unheard ones are transcribed again
    ["grid_bbaf2n.mpg", "grid_lbax4n.mpg", "jfk.flac", "jfk.flac"],
])
def test_speech_turns_share_whisper_windows_and_each_keeps_its_own_words(names: list[str]) -> None:
    # words tiny.en hears with a margin on any CPU (not "k7", "x4" or "bimblue": their spelling
    # follows the int8 kernels); the word times below show that each turn keeps its own words
    heard = {"grid_bbaf2n.mpg": ("now",), "grid_brbk7n.mpg": ("by", "now"), "grid_lbax4n.mpg": ("now",),
             "jfk.flac": ("fellow", "your", "country")}
    audio, spans = _stream(names)
    vad = SileroVAD()
    intervals = vad.speech_intervals(vad.probabilities(audio))
    reads: list[tuple[float, float]] = []

    def read(lo: float, hi: float) -> np.ndarray:
        reads.append((lo, hi))
        return audio[int(lo * 16000):int(hi * 16000)]

    turns = TurnTranscripts(WhisperTranscriber(), intervals, read)
    assert len(turns.packs) < len(turns.turns)  # turns share Whisper windows
    for name, (a, b) in zip(names, spans):
        transcript = turns.span(a - 1.0, b + 1.0)
        said = [w.text.strip(" .,!?").lower() for w in transcript.words]
        assert set(heard[name]) <= set(said) and len(said) >= 3, (name, transcript.text)
        # Whisper may stretch a turn's last word into the 3 s pause after it, never into the next turn
        assert all(a - 0.3 <= w.start <= w.end <= b + 1.0 for w in transcript.words), transcript.words
    assert len(set(reads)) == len(turns.turns)  # each turn's own audio, nothing between turns


def test_ocr_reads_a_sign_on_a_frame() -> None:
    image = np.full((360, 640, 3), 40, np.uint8)
    cv2.putText(image, "EXIT 12", (120, 200), cv2.FONT_HERSHEY_SIMPLEX, 2.5, (255, 255, 255), 6)
    text = " ".join(line.text for line in RapidTextReader().read(image))
    assert "EXIT 12" in text
