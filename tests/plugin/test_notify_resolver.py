"""The notification resolver over a generated clip with scripted event windows (real decode, real faces)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from memory import HashEmbedder, MemoryStore
from memory.models import SegmentWrite
from memory.procedural import RuleConditions
from plugin.engine import Overrides
from plugin.manifest import parse_manifest
from plugin.acting.notify import NotificationService
from tests.conftest import engine_for
from tests.plugin.rules_clip import make_event_clip

#: 2023-11-14 22:13:20 UTC: the wall clock of the clip's first frame (file mtime)
T0 = 1_700_000_000.0
#: a person (a real face) is on screen during these media-second windows
EVENTS = [(3.0, 8.0), (11.0, 14.0), (20.0, 24.0)]
PERCEPTION = {"sample_fps": 4, "min_segment_s": 0.5, "max_segment_s": 2.0, "objects": {"type": "none"},
              "ocr": {"type": "none"}, "asr": {"type": "none"}, "body": {"type": "none"}}


def service_for(store: MemoryStore, **policy: object) -> NotificationService:
    manifest = parse_manifest({"notifications": {"policy": {"event_gap_s": 1.0, **policy}}})
    service = NotificationService(store, manifest)
    service.procedural.add_rule("someone is at the door", ["door"], RuleConditions(entities=["*"]), "warning",
                                cooldown_s=12.0)
    return service


@pytest.fixture(scope="module")
def writes(tmp_path_factory: pytest.TempPathFactory) -> list[SegmentWrite]:
    """The committed segments of the clip, ingested once with faces on."""
    directory = tmp_path_factory.mktemp("door")
    clip = make_event_clip(directory / "door.mp4", EVENTS, seconds=26.0, mtime=T0)
    committed: list[SegmentWrite] = []
    with engine_for(directory, Overrides(on_commit=committed.append), perception=PERCEPTION) as engine:
        report = engine.ingest_file(clip, "door")
    assert report.done and report.entities == ["person_0001"]
    return committed


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MemoryStore]:
    with MemoryStore(str(tmp_path / "lancedb"), HashEmbedder(64)) as s:
        yield s


def in_event(t: float) -> int | None:
    return next((i for i, (a, b) in enumerate(EVENTS) if a - 0.5 <= t < b), None)


def test_one_delivery_per_event_and_a_second_one_only_after_the_cooldown(writes: list[SegmentWrite],
                                                                         store: MemoryStore) -> None:
    service = service_for(store)
    decisions = [d for w in writes for d in service.on_commit(w)]
    by_event: dict[int, list[tuple[str, str]]] = {}
    for d in decisions:
        event = in_event(d.payload["t_start"])
        assert event is not None, f"a match outside every event window: {d}"
        by_event.setdefault(event, []).append((d.decision, d.reason))
    assert sorted(by_event) == [0, 1, 2]
    # event 0: the first match is delivered, repeated matches inside the window are duplicates
    assert by_event[0][0] == ("sent", "sent") and len(by_event[0]) >= 2
    assert set(by_event[0][1:]) == {("suppressed", "duplicate")}
    # event 1 starts 8 s after the delivery at 3 s: inside the 12 s cooldown
    assert set(by_event[1]) == {("suppressed", "cooldown")}
    # event 2 comes after the cooldown: delivered once more, then duplicates
    assert by_event[2][0] == ("sent", "sent") and set(by_event[2][1:]) <= {("suppressed", "duplicate")}
    sent = service.procedural.decisions(0, "sent")
    assert [round(d.payload["t_start"]) for d in sent] == [3, 20]
    # one notification per event, naming everyone involved
    assert all(d.entity_id == "*" and d.payload["entities"] == ["person_0001"] and d.keyframe_id.startswith("kf_")
               for d in sent)
    assert all(d.channels == {"poll": "delivered"} and "someone is at the door" in d.message for d in sent)
    stored = service.procedural.decisions(0)
    assert [d.reason for d in stored] == [d.reason for d in decisions]  # every decision is kept with its reason


def test_replaying_committed_segments_returns_the_stored_decisions_without_new_deliveries(
        writes: list[SegmentWrite], store: MemoryStore) -> None:
    service = service_for(store)
    first = [d for w in writes for d in service.on_commit(w)]
    published = service.hub.version
    again = [d for w in writes for d in service_for(store).on_commit(w)]  # e.g. after a restart
    assert [(d.id, d.reason, d.seq) for d in again] == [(d.id, d.reason, d.seq) for d in first]
    assert service.hub.version == published == 2
    assert len(service.procedural.decisions(0)) == len(first)


def test_quiet_hours_suppress_and_the_reason_is_stored(writes: list[SegmentWrite], store: MemoryStore) -> None:
    service = service_for(store, quiet_hours={"start": "22:00", "end": "23:00"}, timezone="UTC")
    decisions = [d for w in writes for d in service.on_commit(w)]
    assert decisions and all(d.decision == "suppressed" for d in decisions)
    stored = service.procedural.decisions(0)
    assert {d.reason for d in stored} == {"quiet_hours"}  # nothing was sent, so nothing is a duplicate either
    assert service.hub.version == 0 and service.procedural.decisions(0, "sent") == []


def test_severity_threshold_and_critical_rules_in_quiet_hours(writes: list[SegmentWrite], store: MemoryStore) -> None:
    service = service_for(store, min_severity="critical", quiet_hours={"start": "22:00", "end": "23:00"},
                          timezone="UTC")
    alarm = service.procedural.add_rule("intruder", ["door"], RuleConditions(entities=["person_0001"]), "critical",
                                        cooldown_s=600.0)
    decisions = [d for w in writes for d in service.on_commit(w)]
    warning = [d for d in decisions if d.rule_id != alarm.id]
    critical = [d for d in decisions if d.rule_id == alarm.id]
    assert {d.reason for d in warning} == {"threshold"}
    assert [d.reason for d in critical if d.decision == "sent"] == ["sent"]  # quiet hours never hold back critical
    assert {d.reason for d in critical[1:]} <= {"duplicate", "cooldown"}


def test_a_live_source_going_offline_and_back_is_notified_once_each(store: MemoryStore) -> None:
    service = service_for(store)
    assert service.on_source_event("door", "online") is None  # first connection: nothing to tell
    offline = service.on_source_event("door", "offline", "connection refused")
    assert offline is not None and offline.decision == "sent" and "connection refused" in offline.message
    assert service.on_source_event("door", "offline", "still refused") is None
    back = service.on_source_event("door", "online")
    assert back is not None and back.decision == "sent" and back.rule_id == "rule_source_online"
    assert [d.rule_id for d in service.procedural.decisions(0, "sent")] == ["rule_source_offline",
                                                                            "rule_source_online"]
