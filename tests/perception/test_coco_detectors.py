"""The vendored COCO-80 detectors on the repository's real images (real ONNX inference)."""

from __future__ import annotations

import shutil
from pathlib import Path

import cv2
import pytest

from perception.detectors import coco
from perception.detectors.backends import load_perceivers
from perception.detectors.coco import COCO_LABELS, CenterNetDetector, NanoDetDetector
from perception.detectors.objects import SSDObjectDetector, detector_labels
from perception.settings import PerceptionConfig
from tests.conftest import DATA


def _image(name: str):  # type: ignore[no-untyped-def]
    return cv2.imread(str(DATA / "images" / name))


def test_default_detector_is_coco_centernet_and_labels_are_the_80_coco_classes() -> None:
    settings = PerceptionConfig()
    assert settings.objects.type == "coco" and settings.object_model == "centernet"
    assert detector_labels() == list(COCO_LABELS) and len(COCO_LABELS) == 80
    assert "couch" in detector_labels() and "box" in detector_labels(kind="ssd")
    assert isinstance(load_perceivers(settings).objects, CenterNetDetector)
    ssd = PerceptionConfig.model_validate({"objects": {"type": "ssd"}})
    assert isinstance(load_perceivers(ssd).objects, SSDObjectDetector)


@pytest.mark.parametrize("detector", [CenterNetDetector(), NanoDetDetector()], ids=["centernet", "nanodet"])
def test_both_coco_models_find_the_astronaut_as_a_person_with_a_tight_box(detector: object) -> None:
    image = _image("astronaut.png")
    people = [o for o in detector.detect(image) if o.label == "person"]  # type: ignore[attr-defined]
    assert people
    x, y, w, h = people[0].box
    assert w * h >= 0.6 * image.shape[0] * image.shape[1]  # the portrait fills most of the picture


def test_centernet_finds_the_cup_on_the_saucer() -> None:
    cups = [o for o in CenterNetDetector().detect(_image("coffee.png")) if o.label == "cup"]
    assert cups and 0.3 <= cups[0].score <= 1.0
    x, y, w, h = cups[0].box
    assert 120 <= x + w / 2 <= 300  # the cup stands left of centre in the 600 px photo


def test_an_altered_model_file_disables_detection_with_a_log_line(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    bad = tmp_path / "nanodet.onnx"
    shutil.copy(coco.NANODET_FILE, bad)
    with bad.open("r+b") as fh:
        fh.seek(1000)
        fh.write(b"\x00\x01\x02")
    monkeypatch.setattr(coco, "NANODET_FILE", bad)
    detector = NanoDetDetector()
    assert not detector.available and detector.detect(_image("astronaut.png")) == []
    assert "object detection disabled" in caplog.text and "sha256" in caplog.text
