"""The deterministic local describer."""

from __future__ import annotations

import numpy as np

from perception import LocalDescriber
from perception.describe.local import FrameFaces, SegmentFacts, format_ts
from perception.detectors.faces import FaceDetection


def _det(x: int, y: int, w: int, h: int) -> FaceDetection:
    return FaceDetection(box=(x, y, w, h), score=0.9, landmarks=((0.0, 0.0),) * 5, row=np.zeros(15))


def _bright_warm() -> np.ndarray:
    return np.full((360, 640, 3), (60, 160, 230), np.uint8)  # BGR orange


def test_format_ts() -> None:
    assert format_ts(3.94) == "0:03.9"
    assert format_ts(65.25) == "1:05.2" or format_ts(65.25) == "1:05.3"
    assert format_ts(3725.0) == "1:02:05.0"


def test_close_up_of_one_identified_person() -> None:
    img = _bright_warm()
    facts = SegmentFacts(
        t_start=3.9, t_end=6.5, images=[img, img],
        analysed=[FrameFaces(t=4.0, width=640, height=360, faces=[_det(280, 60, 100, 130)], entity_ids=["person_0002"])],
        names={"person_0002": "Lin"}, scene_cut=True,
    )
    d = LocalDescriber().describe(facts)
    assert d.summary == ("0:03.9–0:06.5 close-up of one person (Lin (person_0002)) centre frame; "
                         "bright, warm lighting; little motion; opens on a scene cut.")
    assert set(d.observations) == {"person_0002"}
    assert d.observations["person_0002"].startswith("Lin (person_0002) seen 0:03.9–0:06.5, close-up, centre frame")


def test_no_faces_and_the_same_input_gives_the_same_text() -> None:
    dark = np.full((90, 160, 3), 10, np.uint8)
    facts = SegmentFacts(t_start=0.0, t_end=2.0, images=[dark, dark], first=True)
    a = LocalDescriber().describe(facts)
    assert a.summary == "0:00.0–0:02.0 no faces visible; dark, muted lighting; little motion; start of recording."
    assert a == LocalDescriber().describe(facts)
