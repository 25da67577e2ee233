"""The vendored COCO-80 detectors on the repository's real images (real ONNX inference)."""

from __future__ import annotations

import shutil
from pathlib import Path

import cv2
import numpy as np
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


def test_one_object_named_twice_keeps_its_best_name_and_overlapping_objects_stay() -> None:
    from perception.detectors.coco import one_name_per_object
    from perception.detectors.objects import ObjectDetection

    cat = ObjectDetection("cat", 0.44, (0, 2, 413, 298))
    dog = ObjectDetection("dog", 0.34, (0, 3, 408, 296))  # the same box, a second name
    couch = ObjectDetection("couch", 0.3, (0, 150, 450, 150))  # under the cat: another object
    second_cat = ObjectDetection("cat", 0.3, (10, 10, 400, 290))  # same class: left to per-class NMS
    assert one_name_per_object([dog, couch, cat, second_cat]) == [cat, couch, second_cat]


@pytest.mark.parametrize("frame", [None, (1280, 720), (640, 640)], ids=["photo", "wide-frame", "square-frame"])
def test_the_cat_is_a_cat_with_its_box_on_the_photograph_however_it_is_framed(frame: tuple[int, int] | None) -> None:
    photo = _image("chelsea.png")
    image, left, top, scale = photo, 0, 0, 1.0
    if frame is not None:  # the photograph held up to a camera: centred on black, aspect kept
        w, h = frame
        scale = min(w / photo.shape[1], h / photo.shape[0])
        pw, ph = round(photo.shape[1] * scale), round(photo.shape[0] * scale)
        left, top = (w - pw) // 2, (h - ph) // 2
        image = np.zeros((h, w, 3), np.uint8)
        image[top:top + ph, left:left + pw] = cv2.resize(photo, (pw, ph), interpolation=cv2.INTER_AREA)
    found = CenterNetDetector().detect(image)
    assert "dog" not in {o.label for o in found}
    cats = [o for o in found if o.label == "cat"]
    assert cats and cats[0].score >= 0.35  # the threshold is 0.25
    x, y, w, h = ((v - off) / scale for v, off in zip(cats[0].box, (left, top, 0, 0)))
    assert x <= 40 and x + w >= 350 and y <= 40 and y + h >= 260  # the cat fills the 451×300 photograph


def test_a_frame_the_coco_model_is_unsure_of_takes_the_household_ssds_people_cats_and_dogs_only() -> None:
    unsure = CenterNetDetector(score_threshold=0.9)  # CenterNet's own cat (about 0.5) and cup (0.6) are dropped
    found = unsure.detect(_image("chelsea.png"))
    assert [o.label for o in found] == ["cat"] and found[0].score >= 0.5  # the SSD's cat (about 0.85)
    x, y, w, h = found[0].box
    assert w * h >= 0.5 * 451 * 300  # it fills the photograph
    assert unsure.detect(_image("coffee.png")) == []  # the SSD's "coffee cup" is not one it is asked for


def test_an_empty_room_names_nothing_and_does_not_ask_the_household_ssd() -> None:
    detector = CenterNetDetector()
    room = np.full((480, 640, 3), 110, np.uint8)
    room[300:] = 90  # a floor
    assert detector.detect(room) == []
    assert detector._arbiter is None  # no faint person, cat or dog: the SSD is not run (nor loaded)
