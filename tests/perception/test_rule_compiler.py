"""The local rule compiler: plain words → structured conditions, and what is left for a VLM."""

from __future__ import annotations

import pytest

from perception.detectors.objects import detector_labels
from perception.rules.compiler import compile_rule, rephrase_help

LABELS = detector_labels(kind="ssd")  # the bundled SSD's classes
NAMES = ["Lin-Manuel Miranda", "Alex", "Grandma"]
CAMERAS = ["porch", "front_door", "stage"]


def compiled(text: str) -> dict[str, object]:
    rule = compile_rule(text, names=NAMES, cameras=CAMERAS, labels=LABELS)
    out = rule.conditions.model_dump(exclude_defaults=True, exclude={"understood", "needs_vlm"})
    if rule.cameras:
        out["cameras"] = rule.cameras
    if rule.needs_vlm:
        out["needs_vlm"] = rule.needs_vlm
    return out


@pytest.mark.parametrize(("text", "expected"), [
    ("tell me when someone comes into view", {"entities": ["*"]}),
    ("Let me know if anybody shows up", {"entities": ["*"]}),
    ("notify me when Lin-Manuel Miranda appears", {"entities": ["Lin-Manuel Miranda"]}),
    ("alert me about a stranger at night",
     {"entities": ["*"], "unknown_people": True, "time_window": {"start": "22:00", "end": "06:00"}}),
    ("tell me when a dog or a cat is seen", {"objects": ["dog", "cat"], "objects_mode": "all"}),
    ("tell me when a package arrives on the porch camera", {"objects": ["box"], "cameras": ["porch"]}),
    ("when someone says 'dinner is ready'", {"said": ["dinner is ready"]}),
    ('when the screen shows "ERROR 42"', {"text_read": ["error 42"]}),
    ("if nobody is seen for 10 minutes", {"entities": ["*"], "absent_minutes": 10.0}),
    ("if Grandma has not been seen for 2 hours", {"entities": ["Grandma"], "absent_minutes": 120.0}),
    ("someone on the front door camera between 10 pm and 6:30 am",
     {"entities": ["*"], "cameras": ["front_door"], "time_window": {"start": "22:00", "end": "06:30"}}),
    ("a car after 22:00", {"objects": ["car"], "time_window": {"start": "22:00", "end": "06:00"}}),
])
def test_phrases_become_conditions(text: str, expected: dict[str, object]) -> None:
    assert compiled(text) == expected


def test_what_only_a_vlm_can_judge_is_reported_not_dropped() -> None:
    dog_on_sofa = compile_rule("let me know if the dog gets on the sofa", labels=LABELS)
    assert dog_on_sofa.conditions.objects == ["dog"] and not dog_on_sofa.complete
    assert any("sofa" in part and "no 'couch' class" in part for part in dog_on_sofa.needs_vlm)
    with_couch = compile_rule("let me know if the dog gets on the sofa", labels=[*LABELS, "couch"])
    assert with_couch.conditions.objects == ["dog", "couch"] and with_couch.complete
    bows = compile_rule("tell me when the performer bows", labels=LABELS)
    assert bows.conditions.is_empty() and bows.needs_vlm == ["'performer bows'"]


def test_every_recognised_part_is_explained() -> None:
    rule = compile_rule("tell me when a stranger is on the porch camera at night", cameras=CAMERAS, labels=LABELS)
    assert rule.understood == ["'porch' → camera porch", "'at night' → between 22:00 and 06:00 local time",
                               "'a stranger' → a person without a name (not a known entity)"]
    assert rule.conditions.understood == rule.understood


def test_the_rephrase_hint_names_the_detector_classes() -> None:
    hint = rephrase_help(LABELS)
    assert "'someone'" in hint and "dog" in hint and "vlm" in hint and "???" not in hint
