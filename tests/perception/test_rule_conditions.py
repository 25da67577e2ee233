"""The local rule matcher on hand-built committed segments (no models involved)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import cv2
import numpy as np
import pytest

from memory.models import Entity, Keyframe, SegmentWrite, Trace
from memory.procedural import Rule, RuleConditions, TimeWindow
from perception.rules.matcher import Box, KeyframeBoxes, RuleMatcher, in_time_window, point_in_polygon

#: 2023-11-14 22:13:20 UTC
T0 = 1_700_000_000.0


def segment(index: int, entities: list[Entity] | None = None, objects: list[str] | None = None,
            camera: str = "door", t0: float = 0.0, length: float = 2.0, jpeg: bytes = b"") -> SegmentWrite:
    ents = entities or []
    kf = Keyframe(id=f"kf_{index:012d}", camera_id=camera, source="src", segment_index=index, t=t0, wall_time=T0 + t0,
                  quality=1.0, width=64, height=48, entity_ids=[e.id for e in ents], jpeg=jpeg)
    trace = Trace(id=f"trc_{index:012d}", camera_id=camera, source="src", segment_index=index, t_start=t0,
                  t_end=t0 + length, wall_start=T0 + t0, summary="", entity_ids=[e.id for e in ents],
                  objects=objects or [], keyframe_ids=[kf.id])
    return SegmentWrite(source="src", camera_id=camera, segment_index=index, trace=trace, keyframes=[kf],
                        entities=ents)


def rule(**conditions: object) -> Rule:
    return Rule(id="rule_test", text="test", conditions=RuleConditions.model_validate(conditions))


LIN = Entity(id="person_0001", kind="person", name="Lin")
ALEX = Entity(id="person_0002", kind="person")


def test_entity_conditions_match_by_id_name_or_anyone_and_emit_one_signal_naming_everyone() -> None:
    matcher = RuleMatcher()
    seg = segment(0, [LIN, ALEX])
    by_name = matcher.evaluate(seg, [rule(entities=["lin"])])
    assert [(s.entity_id, s.entities) for s in by_name] == [("*", ["person_0001"])]
    assert "present: person_0001 (Lin)" in by_name[0].evidence
    assert by_name[0].keyframe_id == "kf_000000000000" and by_name[0].trace_id == seg.trace.id
    assert [s.entities for s in matcher.evaluate(seg, [rule(entities=["person_0002"])])] == [["person_0002"]]
    anyone = matcher.evaluate(seg, [rule(entities=["*"])])
    assert len(anyone) == 1 and anyone[0].entities == ["person_0001", "person_0002"]
    assert matcher.evaluate(segment(1, [ALEX]), [rule(entities=["Lin"])]) == []
    assert matcher.evaluate(segment(2, []), [rule(entities=["*"])]) == []


def test_anyone_includes_unidentified_people_and_strangers_exclude_named_ones() -> None:
    matcher = RuleMatcher()
    nobody_known = segment(0, []).model_copy(update={"people": 2})
    [signal] = matcher.evaluate(nobody_known, [rule(entities=["*"])])
    assert signal.entities == [] and "present: 2 unidentified people" in signal.evidence
    assert matcher.evaluate(segment(1, [LIN]), [rule(entities=["*"], unknown_people=True)]) == []
    [stranger] = matcher.evaluate(segment(2, [LIN, ALEX]), [rule(entities=["*"], unknown_people=True)])
    assert stranger.entities == ["person_0002"]


def test_spoken_words_and_text_on_screen() -> None:
    matcher = RuleMatcher()
    seg = segment(0, [])
    seg = seg.model_copy(update={"trace": seg.trace.model_copy(update={"transcript": "Well, dinner is READY now!",
                                                                        "ocr_text": "ERROR 42 | retry"})})
    [said] = matcher.evaluate(seg, [rule(said=["dinner is ready"])])
    assert 'said: "dinner is ready"' in said.evidence
    assert matcher.evaluate(seg, [rule(said=["lunch"])]) == []
    assert len(matcher.evaluate(seg, [rule(text_read=["error 42"])])) == 1
    assert matcher.evaluate(seg, [rule(text_read=["error 43"])]) == []


def test_rules_out_of_scope_disabled_or_without_conditions_give_no_signal() -> None:
    matcher = RuleMatcher()
    seg = segment(0, [LIN])
    other_camera = rule(entities=["*"]).model_copy(update={"camera_ids": ["garden"]})
    disabled = rule(entities=["*"]).model_copy(update={"enabled": False})
    text_only = Rule(id="rule_text", text="a delivery van stops outside")
    assert matcher.evaluate(seg, [other_camera, disabled, text_only]) == []


def test_object_conditions_any_or_all_case_insensitive() -> None:
    matcher = RuleMatcher()
    seg = segment(0, objects=["Dog", "couch"])
    any_hit = matcher.evaluate(seg, [rule(objects=["cat", "dog"])])
    assert len(any_hit) == 1 and any_hit[0].entity_id == "*" and "objects: dog" in any_hit[0].evidence
    assert matcher.evaluate(seg, [rule(objects=["dog", "cat"], objects_mode="all")]) == []
    assert len(matcher.evaluate(seg, [rule(objects=["dog", "couch"], objects_mode="all")])) == 1


def test_overlap_and_zone_use_the_boxes_of_the_provider() -> None:
    boxes = [Box("dog", 0.10, 0.50, 0.20, 0.20), Box("couch", 0.25, 0.55, 0.50, 0.30),
             Box("person", 0.70, 0.10, 0.10, 0.15, entity_id="person_0001")]
    matcher = RuleMatcher(box_provider=lambda _write: boxes)
    seg = segment(0, [LIN], objects=["dog", "couch"])
    assert len(matcher.evaluate(seg, [rule(overlap=[("dog", "couch")])])) == 1
    assert matcher.evaluate(seg, [rule(overlap=[("person", "couch")])]) == []
    right_half = [(0.5, 0.0), (1.0, 0.0), (1.0, 1.0), (0.5, 1.0)]
    left_half = [(0.0, 0.0), (0.5, 0.0), (0.5, 1.0), (0.0, 1.0)]
    inside = matcher.evaluate(seg, [rule(entities=["Lin"], zone=right_half)])
    assert [s.entities for s in inside] == [["person_0001"]] and "person inside the zone" in inside[0].evidence
    assert matcher.evaluate(seg, [rule(entities=["Lin"], zone=left_half)]) == []
    assert len(matcher.evaluate(seg, [rule(objects=["dog"], zone=left_half)])) == 1


def test_zone_rules_without_boxes_do_not_match() -> None:
    seg = segment(0, [LIN])
    assert RuleMatcher().evaluate(seg, [rule(entities=["*"], zone=[(0, 0), (1, 0), (1, 1), (0, 1)])]) == []


def test_keyframe_boxes_find_a_real_face_as_a_person_box(face_jpeg: bytes) -> None:
    seg = segment(0, [LIN], jpeg=face_jpeg)
    boxes = KeyframeBoxes()(seg)
    assert len(boxes) == 1 and boxes[0].label == "person" and boxes[0].entity_id == "person_0001"
    cx, cy = boxes[0].centre
    assert 0.3 < cx < 0.7 and 0.2 < cy < 0.8
    whole = [(0.0, 0.0), (1.0, 0.0), (1.0, 1.0), (0.0, 1.0)]
    assert len(RuleMatcher(box_provider=KeyframeBoxes()).evaluate(seg, [rule(entities=["Lin"], zone=whole)])) == 1


def test_time_window_in_a_given_zone_including_windows_past_midnight() -> None:
    assert datetime.fromtimestamp(T0, UTC).strftime("%H:%M") == "22:13"
    assert in_time_window(T0, TimeWindow(start="22:00", end="06:00"), "UTC")
    assert not in_time_window(T0, TimeWindow(start="06:00", end="22:00"), "UTC")
    assert in_time_window(T0, TimeWindow(start="23:00", end="23:30"), "Europe/Paris")  # 23:13 in Paris
    matcher = RuleMatcher()
    seg = segment(0, [LIN])
    assert len(matcher.evaluate(seg, [rule(entities=["*"], time_window={"start": "22:00", "end": "23:00"},
                                           timezone="UTC")])) == 1
    assert matcher.evaluate(seg, [rule(entities=["*"], time_window={"start": "08:00", "end": "20:00"},
                                       timezone="UTC")]) == []


def test_absence_fires_once_the_entity_is_unseen_for_the_given_minutes() -> None:
    matcher = RuleMatcher()
    absent = rule(entities=["Lin"], absent_minutes=2)
    assert matcher.evaluate(segment(0, [LIN], t0=0.0, length=10.0), [absent]) == []  # seen until T0 + 10
    assert matcher.evaluate(segment(1, [], t0=60.0, length=10.0), [absent]) == []  # 60 s unseen
    fired = matcher.evaluate(segment(2, [], t0=125.0, length=10.0), [absent])
    assert len(fired) == 1 and fired[0].entity_id == "absent:lin"
    assert "not seen for 2.1 min" in fired[0].evidence[0]
    assert matcher.evaluate(segment(3, [LIN], t0=140.0, length=10.0), [absent]) == []  # back again


def test_point_in_polygon_on_a_concave_shape() -> None:
    l_shape = [(0, 0), (1, 0), (1, 0.4), (0.4, 0.4), (0.4, 1), (0, 1)]
    assert point_in_polygon((0.2, 0.8), l_shape)
    assert point_in_polygon((0.8, 0.2), l_shape)
    assert not point_in_polygon((0.8, 0.8), l_shape)


@pytest.fixture(scope="module")
def face_jpeg() -> bytes:
    image = cv2.imread(str(Path(__file__).resolve().parents[1] / "data" / "images" / "astronaut.png"), cv2.IMREAD_COLOR)
    canvas = np.full((360, 480, 3), 90, np.uint8)
    canvas[60:300, 120:360] = cv2.resize(image, (240, 240), interpolation=cv2.INTER_AREA)
    ok, buf = cv2.imencode(".jpg", canvas)
    assert ok
    return buf.tobytes()
