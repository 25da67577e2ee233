"""Objects, OCR and speech-to-text on real media with the real local models."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from perception.detectors.asr import WhisperTranscriber, load_audio, word_error_rate
from perception.detectors.body import ColourTextureDescriptor
from perception.detectors.faces import FaceDetector
from perception.detectors.objects import SSDObjectDetector
from perception.detectors.ocr import RapidTextReader

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


def test_ocr_reads_a_sign_on_a_frame() -> None:
    image = np.full((360, 640, 3), 40, np.uint8)
    cv2.putText(image, "EXIT 12", (120, 200), cv2.FONT_HERSHEY_SIMPLEX, 2.5, (255, 255, 255), 6)
    text = " ".join(line.text for line in RapidTextReader().read(image))
    assert "EXIT 12" in text
