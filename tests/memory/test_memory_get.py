"""get(): an item with its time-ordered neighbours and linked entities."""

from __future__ import annotations

import pytest

from memory import MemoryStore, NotFoundError


def test_trace_neighbours_are_k_before_and_after_in_time_order(filled: MemoryStore) -> None:
    traces = filled.timeline()
    result = filled.get(traces[3].id, neighbors=2)
    assert result.level == "traces"
    assert result.item["id"] == traces[3].id
    assert [r["segment_index"] for r in result.before] == [1, 2]
    assert [r["segment_index"] for r in result.after] == [4, 5]
    assert "vector" not in result.item and all("vector" not in r for r in result.before + result.after)


def test_neighbours_stop_at_the_ends_and_respect_k(filled: MemoryStore) -> None:
    traces = filled.timeline()
    first = filled.get(traces[0].id, neighbors=3)
    assert first.before == [] and [r["segment_index"] for r in first.after] == [1, 2, 3]
    last = filled.get(traces[-1].id, neighbors=1)
    assert [r["segment_index"] for r in last.before] == [4] and last.after == []
    assert filled.get(traces[2].id, neighbors=0).before == []


def test_trace_links_its_entities(filled: MemoryStore) -> None:
    trace = filled.timeline()[5]
    assert [e.name for e in filled.get(trace.id).entities] == ["Alice", "Bob"]


def test_observation_neighbours_are_that_entitys_observations(filled: MemoryStore) -> None:
    obs = filled.entity_observations("person_0001", limit=10)  # segments 5, 1, 0
    result = filled.get(obs[1].id, neighbors=2)
    assert result.level == "observations"
    assert [r["segment_index"] for r in result.before] == [0]
    assert [r["segment_index"] for r in result.after] == [5]
    assert {r["entity_id"] for r in result.before + result.after} == {"person_0001"}
    assert [e.id for e in result.entities] == ["person_0001"]


def test_entity_get_returns_its_latest_observations(filled: MemoryStore) -> None:
    result = filled.get("person_0002", neighbors=2)
    assert result.level == "entities" and result.item["name"] == "Bob"
    assert [r["segment_index"] for r in result.after] == [5, 4]
    assert [r["segment_index"] for r in filled.get("person_0002", neighbors=0).after] == [5]


def test_unknown_id_raises_not_found_naming_the_id_and_the_search_tool(filled: MemoryStore) -> None:
    for bad in ("trc_ffffffffffff", "nonsense"):
        with pytest.raises(NotFoundError) as err:
            filled.get(bad)
        assert bad in str(err.value) and "memory_search" in str(err.value)
