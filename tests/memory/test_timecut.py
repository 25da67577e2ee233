"""The time cut: a store seen at a media second shows nothing dated after it, at any level."""

from __future__ import annotations

import pytest
from memory_fixtures import SOURCE, UNTIL, populate_timeline

from memory import MemoryStore, NotFoundError, stable_id
from memory.search.timecut import TimeCut

@pytest.fixture
def cut(store: MemoryStore) -> tuple[TimeCut, dict[str, set[str]]]:
    ids = populate_timeline(store)
    return TimeCut(store, until=UNTIL), ids


@pytest.mark.parametrize("level", ["traces", "observations", "entities", "schemas", "facts"])
def test_search_at_every_level_returns_only_what_existed_by_the_cut(cut: tuple[TimeCut, dict[str, set[str]]],
                                                                      level: str) -> None:
    view, ids = cut
    hits = view.search("Alice Bob kitchen red car brother", level=level, limit=10)
    assert hits, f"nothing admissible found in {level}"
    assert {h.id for h in hits} <= ids["past"]
    assert all(h.t_end is None or h.t_end <= UNTIL for h in hits)


def test_the_uncut_store_does_hold_the_future_rows(store: MemoryStore) -> None:
    ids = populate_timeline(store)
    query = "Alice Bob kitchen red car brother"
    found = {h.id for level in ("traces", "schemas", "facts", "entities")
             for h in store.search(query, level=level, limit=10)}  # type: ignore[arg-type]
    assert found & ids["future"]


def test_future_ids_cannot_be_opened_and_are_reported_as_unknown(cut: tuple[TimeCut, dict[str, set[str]]]) -> None:
    view, ids = cut
    for item_id in sorted(i for i in ids["future"] if not i.startswith("kf_")):
        with pytest.raises(NotFoundError):
            view.get(item_id)
    assert view.keyframes(sorted(i for i in ids["future"] if i.startswith("kf_"))) == []


def test_get_drops_later_neighbours_children_and_entities(cut: tuple[TimeCut, dict[str, set[str]]]) -> None:
    view, ids = cut
    first = stable_id("trc_", "default", SOURCE, 1)
    result = view.get(first, neighbors=3)
    seen = {str(r["id"]) for r in [*result.before, *result.after]} | {e.id for e in result.entities}
    assert stable_id("trc_", "default", SOURCE, 0) in seen
    assert not seen & ids["future"]
    chapter = view.get("sch_000000000001")
    assert {c["id"] for c in chapter.children} <= ids["past"] and chapter.children


def test_an_entity_is_shown_as_it_was_known_at_the_cut(cut: tuple[TimeCut, dict[str, set[str]]]) -> None:
    view, ids = cut
    alice = view.get("person_0001", neighbors=5)
    assert alice.item["sightings"] == 2 and alice.item["description"] == ""  # later description withheld
    assert {o["id"] for o in alice.after} <= ids["past"] and len(alice.after) == 2


def test_switched_off_levels_say_so(store: MemoryStore) -> None:
    populate_timeline(store)
    view = TimeCut(store, until=UNTIL, levels=["traces", "observations", "entities"])
    with pytest.raises(ValueError, match="facts level is switched off"):
        view.search("Alice", level="facts")
    with pytest.raises(NotFoundError):
        view.get("sch_000000000001")
