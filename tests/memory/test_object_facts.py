"""Facts about object entities come from the same deterministic consolidator as facts about people."""

from __future__ import annotations

from datetime import datetime, timezone

from memory.semantic.consolidate import ConsolidationRequest
from memory.semantic.local_consolidator import LocalConsolidator
from memory.models import Entity, Observation, Trace


def test_a_dog_seen_on_the_couch_on_several_evenings_gets_place_habit_and_couch_facts() -> None:
    dog = Entity(id="object_0001", kind="object", description="dog first seen on living_room at 0:01.0")
    observations, traces = [], {}
    for day in (1, 2, 3):
        wall = datetime(2026, 11, day, 20, 30, tzinfo=timezone.utc).timestamp()
        obs = Observation(id=f"obs_{day}", entity_id=dog.id, camera_id="living_room", source=f"cam{day}",
                          segment_index=0, t_start=0, t_end=5, wall_start=wall,
                          text="object_0001 (dog) seen 0:00.0–0:05.0 on living_room, large, middle centre of frame.")
        observations.insert(0, obs)
        traces[(obs.source, 0)] = Trace(id=f"trc_{day}", camera_id="living_room", source=obs.source, segment_index=0,
                                        t_start=0, t_end=5, wall_start=wall, summary="a dog on the couch",
                                        entity_ids=[dog.id], objects=["dog", "couch"])
    request = ConsolidationRequest(entity=dog, observations=observations, traces=traces, facts=[],
                                   places={"living_room": "living room"})
    edits = {e.key: e.text for e in LocalConsolidator(timezone=timezone.utc).propose(request) if e.op == "ADD"}
    assert edits["object/couch"] == "object_0001 is often seen with a couch"
    assert edits["habit/evening"] == "object_0001 is usually at the living room in the evening"
    assert "object/dog" not in edits  # not "often seen with a dog": that is itself
