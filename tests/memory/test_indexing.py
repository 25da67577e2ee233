"""Index management: indexes are built past a size and kept fresh by a background thread, not by writers."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from memory_fixtures import make_segment

from memory import HashEmbedder, MemoryStore
from memory.search.indexing import IndexPolicy, compaction_target, fts_config, table_index_state

#: PQ training needs a few hundred rows; the thresholds are scaled down from the defaults accordingly
SMALL = IndexPolicy(vector_min_rows=400, scalar_min_rows=400, unindexed_max=10_000, interval_s=0.0,
                    check_every_s=0.05)


def _write(store: MemoryStore, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        store.write_segment(make_segment(i, summary=f"segment {i} with a bicycle number {i}"))


def _append(store: MemoryStore, n: int, start: int = 0) -> None:
    """``n`` traces in one Arrow append (what an import or a long stream adds between passes)."""
    rows = []
    for i in range(start, start + n):
        trace = make_segment(i, summary=f"segment {i} with a bicycle number {i}").trace
        rows.append({**trace.model_dump(), "text": trace.summary})
    vectors = store.embedder.embed([r["text"] for r in rows])
    table = store._rows("traces", [{**r, "vector": v} for r, v in zip(rows, vectors)])
    store.bulk_append("traces", pa.Table.from_batches(table.to_batches(), schema=table.schema))


def test_writers_do_not_fold_rows_into_indexes_the_maintainer_does(tmp_path: Path) -> None:
    policy = IndexPolicy(vector_min_rows=10**9, scalar_min_rows=10**9, unindexed_max=10**9, interval_s=3600,
                         check_every_s=3600)
    with MemoryStore(str(tmp_path / "m"), HashEmbedder(16), index_policy=policy) as store:
        _write(store, 60)  # more writes than the store's synchronous optimise interval
        traces = store._table("traces")
        assert table_index_state(traces).unindexed == 60  # nothing was optimised on the write path
        assert {h.text for h in store.search("number 59", mode="fts", limit=3)} >= {
            "segment 59 with a bicycle number 59"}  # unindexed rows are still found
        state = store.maintain_indexes()["traces"]
        assert state.unindexed == 0 and state.fts


def test_the_background_thread_builds_vector_and_scalar_indexes_once_a_table_is_big_enough(tmp_path: Path) -> None:
    with MemoryStore(str(tmp_path / "m"), HashEmbedder(16), index_policy=SMALL) as store:
        _append(store, 200)
        maintainer = store._maintainer
        assert maintainer is not None and maintainer.wait_for_pass(30)
        small = table_index_state(store._table("traces"))
        assert small.fts and not small.vector and small.scalar == []  # 200 rows: a flat scan is faster
        _append(store, 300, start=200)
        assert maintainer.wait_for_pass(120)
        big = table_index_state(store._table("traces"))
        assert big.vector and {"id", "user_id", "camera_id", "wall_start"} <= set(big.scalar) and big.unindexed == 0
        window = "wall_start >= 1700000100.0 AND wall_start < 1700000200.0"  # what "this morning" filters on
        plan = (store._table("traces").search(store.embedder.embed(["bicycle"])[0]).where(window, prefilter=True)
                .explain_plan(True))
        assert "ScalarIndexQuery" in plan and "wall_start_idx" in plan
        hits = store.search("segment 42 with a bicycle number 42", limit=3)
        assert hits[0].text == "segment 42 with a bicycle number 42"  # the indexes answer correctly
        assert maintainer.builds == 1


def test_a_vector_index_is_retrained_when_the_table_has_grown_several_times(tmp_path: Path) -> None:
    policy = IndexPolicy(vector_min_rows=300, scalar_min_rows=10**9, retrain_growth=2.0, check_every_s=3600)
    with MemoryStore(str(tmp_path / "m"), HashEmbedder(16), index_policy=policy) as store:
        _append(store, 300)
        first = store.maintain_indexes()["traces"]
        assert first.vector and first.vector_trained_rows == 300 and first.vector_indexed == 300
        _append(store, 200, start=300)
        grown = store.maintain_indexes()["traces"]
        assert grown.vector_trained_rows == 300 and grown.vector_indexed == 500  # folded in, not retrained
        _append(store, 150, start=500)
        second = store.maintain_indexes()["traces"]
        assert second.vector_trained_rows == 650 and second.unindexed == 0


def test_a_forced_pass_leaves_a_fully_indexed_table_in_one_fragment(tmp_path: Path) -> None:
    # appends land in fragments of their own; indexes built over all of them leave nothing unindexed, so
    # only the forced pass's compaction merges them (a search reads its candidates from every fragment)
    with MemoryStore(str(tmp_path / "m"), HashEmbedder(16), auto_index=False) as store:
        for start in (0, 150, 300):
            _append(store, 150, start=start)
        traces = store._table("traces")
        traces.create_index("text", config=fts_config(), replace=True)
        store.create_vector_index("traces", num_partitions=2)
        assert table_index_state(traces).unindexed == 0
        assert traces.stats()["fragment_stats"]["num_fragments"] == 3
        state = store.maintain_indexes()["traces"]
        assert state.vector and state.unindexed == 0 and state.rows == 450
        assert traces.stats()["fragment_stats"]["num_fragments"] == 1
        hits = store.search("segment 420 with a bicycle number 420", limit=3)
        assert hits[0].text == "segment 420 with a bicycle number 420"  # the indexes follow the moved rows


def test_compaction_targets_follow_the_tiers() -> None:
    tiers, fan_in = (256, 2048, 1 << 20), 8

    def target(rows: list[int]) -> int | None:
        return compaction_target(rows, tiers, fan_in)

    assert target([]) is None and target([40]) is None
    assert target([40, 1]) == 256  # below the first tier, fragments are merged as soon as there are two
    assert target([300, 1]) is None  # one small fragment next to a full one waits
    assert target([256] * fan_in + [5]) is None  # at most fan_in fragments of a tier...
    assert target([256] * (fan_in + 1) + [5]) == 2048  # ...more are merged up into the next
    assert target([1 << 20] * 3) is None  # full fragments are left alone
    assert IndexPolicy().compaction_tiers[-1] == 1 << 20  # the last tier is Lance's own target


def test_a_stream_of_small_writes_is_compacted_by_tiers_without_rewriting_old_fragments(tmp_path: Path) -> None:
    # one fragment per write; every pass merges only the fragments below the first tier, so the cost of a
    # pass stays the same however large the table grows
    policy = IndexPolicy(vector_min_rows=10**9, scalar_min_rows=10**9, unindexed_max=1, interval_s=0.0,
                         check_every_s=3600, compaction_tiers=(256, 2048, 1 << 20))
    with MemoryStore(str(tmp_path / "m"), HashEmbedder(16), index_policy=policy) as store:
        for i in range(600):
            _append(store, 1, start=i)
            if i % 20 == 19:
                store.maintain_indexes(force=False)
        fragments = store._table("traces").to_lance().get_fragments()
        rows = [f.metadata.physical_rows for f in fragments]
        # Lance closes a merged fragment once it reaches the tier, and merges indexed and not yet indexed
        # fragments apart: the newest rows may sit in two small fragments until the next pass
        assert sum(rows) == 600 and min(rows[:2]) >= 256 and len(rows) <= 4
        full = [f.fragment_id for f in fragments[:2]]
        for i in range(600, 640):
            _append(store, 1, start=i)
        state = store.maintain_indexes(force=False)["traces"]
        fragments = store._table("traces").to_lance().get_fragments()
        assert [f.fragment_id for f in fragments[:2]] == full  # the full fragments were not rewritten
        assert len(fragments) <= 4 and state.unindexed == 0 and state.rows == 640
        hits = store.search("segment 630 with a bicycle number 630", limit=3)
        assert hits[0].text == "segment 630 with a bicycle number 630"


def test_a_table_written_many_times_a_second_keeps_few_versions_and_fragments(tmp_path: Path) -> None:
    # a store written faster than the time-based schedule (many cameras, a file read faster than real
    # time): old versions are deleted every few writes and the table is compacted every few dozen, so
    # each read and commit, which costs per version and per fragment, stays as cheap as at the start
    policy = IndexPolicy(vector_min_rows=10**9, scalar_min_rows=10**9, unindexed_max=10**9, interval_s=3600,
                         check_every_s=3600, keep_versions=8, keep_versions_for_s=0.0, cleanup_every=8,
                         compact_every=40)
    with MemoryStore(str(tmp_path / "m"), HashEmbedder(16), index_policy=policy) as store:
        traces = store._table("traces")
        for i in range(200):
            _append(store, 1, start=i)
            if i % 10 == 9:
                store.maintain_indexes(force=False)
                assert len(traces.list_versions()) <= 8 + 10 + 2  # kept, written since, compaction's own
                assert len(traces.to_lance().get_fragments()) <= 40 + 10
        assert store.count_traces() == 200
        hits = store.search("segment 199 with a bicycle number 199", limit=3)
        assert hits[0].text == "segment 199 with a bicycle number 199"


def test_recent_versions_are_kept_for_readers_whatever_the_write_rate(tmp_path: Path) -> None:
    policy = IndexPolicy(vector_min_rows=10**9, scalar_min_rows=10**9, unindexed_max=10**9, interval_s=3600,
                         check_every_s=3600, keep_versions=4, keep_versions_for_s=600.0, cleanup_every=4,
                         compact_every=10**9)
    with MemoryStore(str(tmp_path / "m"), HashEmbedder(16), index_policy=policy) as store:
        traces = store._table("traces")
        first = traces.version
        for i in range(30):
            _append(store, 1, start=i)
            if i % 10 == 9:
                store.maintain_indexes(force=False)
        assert len(traces.list_versions()) >= 30  # all younger than the window
        assert traces.to_lance().checkout_version(first + 1).count_rows() == 1  # an older reader can still read
