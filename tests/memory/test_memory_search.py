"""Search: every level by vector, full text and hybrid, with filters, paging and fusion across levels."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import lancedb
import numpy as np
import pytest
from memory_fixtures import CAMERA, SOURCE, make_segment, populate

from memory import Chapter, Fact, HashEmbedder, MemoryStore, stable_id
from memory.search.modes import build_where, sql_literal

MODES = ["vector", "fts", "hybrid"]


@pytest.fixture(scope="module")
def all_levels(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MemoryStore]:
    """Read-only store with rows in every searchable level (shared by the tests of this module)."""
    with MemoryStore(str(tmp_path_factory.mktemp("levels") / "mem"), HashEmbedder(64)) as filled:
        _fill_all_levels(filled)
        yield filled


def _fill_all_levels(filled: MemoryStore) -> None:
    populate(filled)
    filled.upsert_chapters([
        Chapter(id=stable_id("sch_", "default", SOURCE, 0), camera_id=CAMERA, source=SOURCE, t_start=0, t_end=20,
                text="morning tea ritual with the kettle and a red mug", trace_ids=[], entity_ids=["person_0001"]),
        Chapter(id=stable_id("sch_", "default", SOURCE, 1), camera_id=CAMERA, source=SOURCE, t_start=20, t_end=50,
                text="a bicycle is brought in and parked at the door", entity_ids=["person_0002"]),
    ])
    filled.upsert_facts([
        Fact(id="fct_000000000001", entity_ids=["person_0001"], text="Alice drinks green tea every morning",
             kind="habit", importance=0.8),
        Fact(id="fct_000000000002", entity_ids=["person_0002"], text="Bob commutes by bicycle", kind="habit"),
    ])


CASES = [
    ("traces", "bicycle hallway", "a man carries a bicycle through the hallway"),
    ("observations", "Alice kettle scarf", "Alice in a red scarf switches on the kettle"),
    ("entities", "Bob helmet", "person_0002 person Bob man with a bicycle helmet"),
    ("schemas", "tea ritual kettle", "morning tea ritual with the kettle and a red mug"),
    ("facts", "bicycle commutes", "Bob commutes by bicycle"),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("level", "query", "expected"), CASES)
def test_each_level_finds_its_best_match_first_in_every_mode(all_levels: MemoryStore, level: str, query: str,
                                                              expected: str, mode: str) -> None:
    hits = all_levels.search(query, level=level, mode=mode, limit=3)
    assert hits, f"no hit for {query!r} in {level} ({mode})"
    assert hits[0].level == level
    assert hits[0].text == expected
    assert hits[0].score > 0
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_a_query_that_says_exactly_what_a_row_says_scores_one(all_levels: MemoryStore) -> None:
    text = "a man carries a bicycle through the hallway"
    hit = all_levels.search(text, mode="hybrid", limit=1)[0]
    assert hit.text == text and hit.score == pytest.approx(1.0, abs=1e-3)
    assert {m.field for m in hit.why} >= {"description", "meaning"}


def test_rows_written_after_the_fts_index_are_found_and_stay_found_after_optimize(store: MemoryStore) -> None:
    store.write_segment(make_segment(0, summary="zebra crossing outside"))
    assert [h.text for h in store.search("zebra", mode="fts")] == ["zebra crossing outside"]
    store.optimize()
    store.write_segment(make_segment(1, summary="another zebra appears"))
    assert {h.text for h in store.search("zebra", mode="fts")} == {"zebra crossing outside", "another zebra appears"}


def test_camera_filter_keeps_only_that_camera(filled: MemoryStore) -> None:
    filled.write_segment(make_segment(0, source="/videos/garage.mp4", camera="garage",
                                      summary="a man carries a bicycle into the garage"))
    for mode in MODES:
        hits = filled.search("bicycle", camera="garage", mode=mode)
        assert [h.camera_id for h in hits] == ["garage"], mode


def test_entity_filter_applies_to_traces_lists_and_observation_ids(all_levels: MemoryStore) -> None:
    traces = all_levels.search("kitchen", entity="person_0002", mode="vector", limit=10)
    assert traces and all("person_0002" in h.entity_ids for h in traces)
    assert {h.t_start for h in traces} == {20.0, 40.0, 50.0}
    obs = all_levels.search("tea", level="observations", entity=["person_0001"], mode="hybrid", limit=10)
    assert obs and {h.entity_ids[0] for h in obs} == {"person_0001"}


def test_time_range_keeps_rows_overlapping_it(all_levels: MemoryStore) -> None:
    hits = all_levels.search("the", start=15, end=30, mode="vector", limit=10)
    assert sorted(h.t_start for h in hits) == [10.0, 20.0, 30.0]
    hits = all_levels.search("kitchen", start=45, mode="fts", limit=10)
    assert all(h.t_end >= 45 for h in hits) and hits


def test_offset_pages_through_the_same_ranking(all_levels: MemoryStore) -> None:
    full = [h.id for h in all_levels.search("the man woman kitchen", mode="vector", limit=6)]
    page = [h.id for h in all_levels.search("the man woman kitchen", mode="vector", limit=2, offset=2)]
    assert page == full[2:4]


def test_all_levels_are_ranked_together_by_their_comparable_scores(all_levels: MemoryStore) -> None:
    hits = all_levels.search("Bob bicycle", level="all", mode="hybrid", limit=10)
    assert {"traces", "observations", "entities", "schemas", "facts"} <= {h.level for h in hits}
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert all(0.0 <= h.score <= 1.0 for h in hits)


def test_quotes_in_filters_and_queries_are_safe(filled: MemoryStore) -> None:
    filled.write_segment(make_segment(0, source="/videos/o'brien.mp4", camera="o'brien's porch",
                                      summary="the postman's parcel on o'brien's porch"))
    hits = filled.search("postman's parcel", camera="o'brien's porch", mode="hybrid")
    assert [h.source for h in hits] == ["/videos/o'brien.mp4"]
    assert filled.search("what's \"that\"?", mode="fts") is not None


def test_unknown_level_is_rejected_with_the_valid_names(all_levels: MemoryStore) -> None:
    with pytest.raises(ValueError, match="traces"):
        all_levels.search("x", level="frames")  # type: ignore[arg-type]


def test_build_where_quotes_and_skips_filters_a_level_has_no_column_for() -> None:
    assert sql_literal("it's") == "'it''s'"
    where = build_where("traces", "u", camera="c", entity=["a", "b"], start=1, end=2)
    assert where == ("user_id = 'u' AND camera_id = 'c' AND array_has_any(entity_ids, ['a', 'b']) "
                     "AND t_end >= 1.0 AND t_start <= 2.0")
    assert build_where("facts", "u", camera="c", start=1) == "user_id = 'u'"


class _CompactingEmbedder(HashEmbedder):
    """A hash embedder that, once armed, embeds the question as "football" (so the vector query does
    not find what the words find) after letting the search's full-text query finish and having
    another connection compact the traces table: the row ids that query returned no longer exist."""

    def __init__(self, uri: str) -> None:
        super().__init__(64)
        self.uri = uri
        self.armed = self.compacted = False

    def embed(self, texts: list[str]) -> np.ndarray:
        if not self.armed:
            return super().embed(texts)
        if not self.compacted:
            self.compacted = True
            time.sleep(0.5)
            traces = lancedb.connect(self.uri).open_table("traces")
            before = traces.stats()["fragment_stats"]["num_fragments"]
            traces.optimize(cleanup_older_than=timedelta(days=1))
            assert traces.stats()["fragment_stats"]["num_fragments"] < before
        return super().embed(["football"] * len(texts))


def test_a_search_keeps_what_its_full_text_query_found_when_a_compaction_moves_those_rows(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # the full-text query returns its rows' cards, so rows moved after it are not read again by row id
    uri = str(tmp_path / "mem")
    embedder = _CompactingEmbedder(uri)
    with MemoryStore(uri, embedder, auto_index=False) as store:
        for i in range(30):  # more rows than a search's shortlist; the bicycle ones in the last fragments
            store.write_segment(make_segment(i, summary=f"a man carries a bicycle (number {i})" if i >= 27
                                             else f"children play football, round {i} of {i % 7} goals"))
        embedder.armed = True
        with caplog.at_level(logging.INFO, logger="memory.search.retrieval"):
            hits = store.search("bicycle", mode="hybrid", limit=3)
    assert embedder.compacted
    assert "moved while being read" not in caplog.text
    assert [h.text.startswith("a man carries a bicycle") for h in hits] == [True, True, True]


def test_a_hybrid_search_asks_lancedb_for_no_table_schema(
        all_levels: MemoryStore, monkeypatch: pytest.MonkeyPatch) -> None:
    # lancedb's to_arrow looks the schema up before every query: a round trip to its runtime each
    calls = {"schema": 0}
    real_schema = lancedb.table.AsyncTable.schema

    async def counted_schema(self: lancedb.table.AsyncTable) -> object:
        calls["schema"] += 1
        return await real_schema(self)

    monkeypatch.setattr(lancedb.table.AsyncTable, "schema", counted_schema)
    all_levels.search("tea", mode="hybrid", limit=3)  # vocabulary and caches in place
    calls["schema"] = 0
    hits = all_levels.search("red mug with tea", level="traces", mode="hybrid", limit=3)
    assert hits and "mug" in hits[0].text
    assert calls["schema"] == 0
