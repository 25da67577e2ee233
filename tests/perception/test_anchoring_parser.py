"""The anchoring parser keeps only grounded, consistent identity claims."""

from __future__ import annotations

import logging

import pytest

from perception.describe.anchoring import Anchor, AnchorClaim, parse_anchored

ANCHORS = [
    Anchor("A1", "face", 0, (10, 10, 40, 40), candidates=("person_0001", "person_0002")),
    Anchor("A2", "face", 0, (200, 10, 40, 40), candidates=("person_0002",)),
    Anchor("A3", "object", 1, (50, 80, 90, 60), label="piano"),
    Anchor("A4", "face", 1, (100, 10, 40, 40), entity_id="person_0003"),
]


def claim(anchor: str, entity: str | None, text: str = "stands and sings") -> AnchorClaim:
    return AnchorClaim(anchor_id=anchor, entity_id=entity, description=text)


def test_identity_on_a_candidate_anchor_is_accepted() -> None:
    result = parse_anchored([claim("A1", "person_0001"), claim("A3", None, "a grand piano")], ANCHORS)
    assert [(t.anchor_id, t.entity_id, t.keyframe) for t in result.targets] == [("A1", "person_0001", 0)]
    assert [(o.anchor_id, o.entity_id) for o in result.observations] == [("A1", "person_0001"), ("A3", None)]
    assert result.dropped == []


def test_identity_on_a_non_existent_anchor_is_dropped_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="perception.describe.anchoring"):
        result = parse_anchored([claim("A9", "person_0001"), claim("A1", "person_0001")], ANCHORS,
                                known_entities=["person_0001"])
    assert [t.anchor_id for t in result.targets] == ["A1"]
    assert all(o.anchor_id != "A9" for o in result.observations)  # its description is ungrounded too
    assert [(d.anchor_id, d.reason) for d in result.dropped] == [("A9", "no such detection anchor")]
    assert "A9" in caplog.text and "no such detection anchor" in caplog.text


@pytest.mark.parametrize(("claims", "reason"), [
    ([claim("A2", "person_0077")], "neither a re-ID candidate"),
    ([claim("A3", "person_0001")], "does not fit a object anchor"),
    ([claim("A4", "person_0001")], "contradicts the resolver"),
    ([claim("A1", "person_0002"), claim("A2", "person_0002")], "claimed on several anchors of key frame 1"),
])
def test_inconsistent_identity_is_dropped_but_grounded_text_kept(claims: list[AnchorClaim], reason: str) -> None:
    result = parse_anchored(claims, ANCHORS, known_entities=["person_0001"])
    assert result.targets == []
    assert result.dropped and all(reason in d.reason for d in result.dropped)
    assert len(result.observations) == len(claims)
    for obs in result.observations:
        committed = next(a.entity_id for a in ANCHORS if a.anchor_id == obs.anchor_id)
        assert obs.entity_id == committed  # only the resolver's own commitment survives


def test_duplicate_claims_keep_the_first_and_confirmation_adds_no_target() -> None:
    result = parse_anchored([claim("A4", "person_0003", "first"), claim("A4", None, "second")], ANCHORS)
    assert [o.description for o in result.observations] == ["first"]
    assert result.observations[0].entity_id == "person_0003"
    assert result.targets == []  # already committed by the resolver: nothing new for it
    assert [d.reason for d in result.dropped] == ["duplicate claim for the same anchor"]


def test_active_entity_may_be_named_on_an_anchor_without_candidates() -> None:
    anchors = [Anchor("A1", "person", 0, (0, 0, 10, 30))]
    assert parse_anchored([claim("A1", "person_0005")], anchors).targets == []
    accepted = parse_anchored([claim("A1", "person_0005")], anchors, known_entities={"person_0005"})
    assert [t.entity_id for t in accepted.targets] == ["person_0005"]
