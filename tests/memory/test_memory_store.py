"""MemoryStore writes, opening rules, resume points and listings against a real LanceDB."""

from __future__ import annotations

from pathlib import Path

import pytest

from memory_fixtures import CAMERA, PERSONS, SOURCE, make_segment, populate
from memory import (
    DimensionMismatchError,
    Entity,
    GalleryFace,
    HashEmbedder,
    MemoryStore,
    MemoryStoreError,
    NotFoundError,
    SchemaVersionError,
    SegmentWrite,
)
from memory.store.schema import META_TABLE, SCHEMA_VERSION


def ids(store: MemoryStore, table: str) -> set[str]:
    return {r["id"] for r in store._scan(table, columns=["id"])}


def test_opening_creates_every_table_and_records_version_and_embedder(store_path: Path) -> None:
    with MemoryStore(str(store_path), HashEmbedder(64)) as store:
        counts = store.counts()
        meta = {r["key"]: r["value"] for r in store._db.open_table(META_TABLE).search().limit(None).to_list()}
    assert set(counts) == {"entities", "observations", "traces", "schemas", "facts", "camera_context", "rules",
                           "notifications", "gallery_face", "gallery_body", "keyframes", "ingest_log",
                           "identity_decisions", "semantic_state", "id_alloc", "gallery_voice", "gallery_object",
                           "spoken"}
    assert all(n == 0 for n in counts.values())
    assert meta == {"schema_version": str(SCHEMA_VERSION), "embedding_dim": "64", "embedding_name": "hash-64"}


def test_reopening_with_an_embedder_of_another_dim_names_both_dims_and_the_fix(store_path: Path) -> None:
    with MemoryStore(str(store_path), HashEmbedder(64)) as store:
        store.write_segment(make_segment(0))
    with pytest.raises(DimensionMismatchError) as err:
        MemoryStore(str(store_path), HashEmbedder(32)).open()
    message = str(err.value)
    assert "64" in message and "32" in message and "memory.uri" in message


def test_a_store_from_a_newer_schema_version_is_refused(store_path: Path) -> None:
    with MemoryStore(str(store_path), HashEmbedder(64)) as store:
        MemoryStore._set_meta(store._db.open_table(META_TABLE), {"schema_version": "99"})
    with pytest.raises(SchemaVersionError, match="99"):
        MemoryStore(str(store_path), HashEmbedder(64)).open()


def test_a_version_6_store_gains_face_poses_and_keeps_its_slots(store_path: Path) -> None:
    slot = GalleryFace(id="gal_1", entity_id="person_0001", embedding=[1.0] + [0.0] * 127, quality=0.8)
    with MemoryStore(str(store_path), HashEmbedder(64)) as store:
        store.add_gallery_faces([slot])
        store._db.open_table("gallery_face").drop_columns(["turn"])  # as a version-6 store wrote it
        MemoryStore._set_meta(store._db.open_table(META_TABLE), {"schema_version": "6"})
    with MemoryStore(str(store_path), HashEmbedder(64)) as store:
        assert store.face_gallery() == [slot] and slot.turn == 0.0
        store.add_gallery_faces([slot.model_copy(update={"id": "gal_2", "turn": 1.4})])
        assert sorted(g.turn for g in store.face_gallery()) == [0.0, 1.4]
        meta = {r["key"]: r["value"] for r in store._db.open_table(META_TABLE).search().limit(None).to_list()}
    assert meta["schema_version"] == str(SCHEMA_VERSION) == "11"


def test_using_a_closed_store_says_how_to_open_it(store_path: Path) -> None:
    with pytest.raises(MemoryStoreError, match="open"):
        MemoryStore(str(store_path), HashEmbedder(64)).counts()


def test_writing_the_same_segments_twice_leaves_identical_rows(store: MemoryStore) -> None:
    populate(store)
    first_counts = store.counts()
    first_ids = {t: ids(store, t) for t in ("traces", "observations", "entities", "keyframes")}
    populate(store)
    assert store.counts() == first_counts
    assert {t: ids(store, t) for t in first_ids} == first_ids
    assert first_counts["traces"] == 6 and first_counts["observations"] == 6 and first_counts["entities"] == 2


def test_a_rewritten_segment_drops_observations_it_no_longer_produces(store: MemoryStore) -> None:
    store.write_segment(make_segment(0, entity_ids=["person_0001", "person_0002"]))
    store.write_segment(make_segment(0, entity_ids=["person_0001"]))
    rows = store._scan("observations", columns=["entity_id"])
    assert [r["entity_id"] for r in rows] == ["person_0001"]


def test_resume_point_is_the_last_committed_segment(store: MemoryStore) -> None:
    assert store.resume_point(SOURCE) is None
    store.write_segment(make_segment(0))
    store.write_segment(make_segment(1))
    assert store.resume_point(SOURCE) == 1
    state = store.ingest_state(SOURCE)
    assert state is not None
    assert (state.camera_id, state.last_t_end, state.source_size, state.done) == (CAMERA, 20.0, 1234, False)
    store.write_segment(make_segment(0))  # a re-run of an earlier segment does not move the point back
    assert store.resume_point(SOURCE) == 1
    store.mark_source_done(SOURCE)
    assert store.ingest_state(SOURCE).done is True


def test_a_crash_before_the_ingest_log_leaves_the_segment_to_be_rerun(store: MemoryStore,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    store.write_segment(make_segment(0))
    def crashing(original):  # noqa: ANN001, ANN202
        def crash_on_keyframes(name: str, records: list) -> None:
            if name == "keyframes":
                raise OSError("disk full")
            original(name, records)
        return crash_on_keyframes

    monkeypatch.setattr(store, "_upsert", crashing(store._upsert))  # a rewritten segment's rows
    monkeypatch.setattr(store, "_append", crashing(store._append))  # a new segment's rows
    with pytest.raises(OSError):
        store.write_segment(make_segment(1))
    assert store.resume_point(SOURCE) == 0
    monkeypatch.undo()
    store.write_segment(make_segment(1))
    assert store.resume_point(SOURCE) == 1
    assert store.counts()["traces"] == 2 and store.counts()["keyframes"] == 2


def test_reset_source_deletes_its_rows_but_keeps_entities_and_other_sources(filled: MemoryStore) -> None:
    filled.write_segment(make_segment(0, source="/videos/other.mp4"))
    filled.reset_source(SOURCE)
    counts = filled.counts()
    assert (counts["traces"], counts["observations"], counts["keyframes"], counts["entities"]) == (1, 0, 1, 2)
    assert filled.resume_point(SOURCE) is None
    assert filled.resume_point("/videos/other.mp4") == 0


def test_mark_source_done_works_for_a_source_without_segments(store: MemoryStore) -> None:
    store.mark_source_done("/videos/empty.mp4", camera_id="garage")
    state = store.ingest_state("/videos/empty.mp4")
    assert state is not None and state.done and state.last_segment_index == -1
    assert store.resume_point("/videos/empty.mp4") is None


def test_keyframes_come_back_with_their_jpeg_bytes_in_the_requested_order(filled: MemoryStore) -> None:
    traces = filled.timeline()
    wanted = [traces[3].keyframe_ids[0], "kf_unknown", traces[1].keyframe_ids[0]]
    frames = filled.keyframes(wanted)
    assert [f.id for f in frames] == [wanted[0], wanted[2]]
    assert frames[0].jpeg == b"\xff\xd8fake-jpeg-3"


def test_face_gallery_returns_upserted_slots(store: MemoryStore) -> None:
    faces = [GalleryFace(id=f"gf_{i}", entity_id="person_0001", embedding=[0.5] * 128, quality=0.8) for i in range(3)]
    store.add_gallery_faces(faces)
    store.add_gallery_faces(faces[:1])
    gallery = sorted(store.face_gallery(), key=lambda f: f.id)
    assert [f.id for f in gallery] == ["gf_0", "gf_1", "gf_2"]
    assert gallery[0].embedding == pytest.approx([0.5] * 128)


def test_two_writers_that_both_seeded_the_id_counter_still_allocate_unique_ids(store_path: Path) -> None:
    import pyarrow as pa

    with MemoryStore(str(store_path), HashEmbedder(64)) as store:
        table = store._db.open_table("id_alloc")
        seeds = [{"user_id": store.user_id, "id": "counter:person", "kind": "person", "value": n, "entity_id": None,
                  "created_at": 0.0} for n in (3, 3, 1)]  # two processes raced to create it; one read older rows
        table.add(pa.Table.from_pylist(seeds, schema=table.schema))
        ids = [store.next_entity_id("person") for _ in range(3)]
    assert ids == ["person_0004", "person_0005", "person_0006"]


def test_stamped_counter_rows_move_together_and_a_late_seed_stays_behind(store_path: Path) -> None:
    import pyarrow as pa

    with MemoryStore(str(store_path), HashEmbedder(64)) as store:
        table = store._db.open_table("id_alloc")
        seeds = [{"user_id": store.user_id, "id": "counter:person", "kind": "person", "value": n, "entity_id": stamp,
                  "created_at": 0.0} for n, stamp in ((3, "a"), (3, "b"), (0, "late"))]
        table.add(pa.Table.from_pylist(seeds, schema=table.schema))
        ids = [store.next_entity_id("person") for _ in range(3)]
        rows = sorted((r["value"], r["entity_id"]) for r in store.scan_rows("id_alloc"))
    assert ids == ["person_0004", "person_0005", "person_0006"]
    assert rows[0] == (0, "late") and rows[1][0] == rows[2][0] == 6
    assert isinstance(rows[1][1], str) and rows[1][1] == rows[2][1] not in ("a", "b")  # renewed by every write


def test_entities_list_get_follow_merges_and_number_new_ids(filled: MemoryStore) -> None:
    assert [e.id for e in filled.list_entities()] == ["person_0001", "person_0002"]
    assert [e.id for e in filled.list_entities(limit=1, offset=1)] == ["person_0002"]
    assert filled.list_entities(kind="object") == []
    assert (filled.count_entities(), filled.count_entities(kind="object")) == (2, 0)
    assert filled.next_entity_id("person") == "person_0003"
    assert filled.next_entity_id("object") == "object_0001"
    filled.upsert_entity(Entity(id="person_0003", kind="person", merged_into="person_0001"))
    assert filled.get_entity("person_0003").id == "person_0001"
    assert [e.id for e in filled.list_entities()] == ["person_0001", "person_0002"]
    assert filled.count_entities() == 2
    assert filled.get_entity("person_0002").name == "Bob"


def test_entity_observations_are_newest_first(filled: MemoryStore) -> None:
    obs = filled.entity_observations("person_0001", limit=2)
    assert [o.segment_index for o in obs] == [5, 1]


def test_unknown_entity_raises_not_found_naming_the_id_and_the_listing_tool(filled: MemoryStore) -> None:
    with pytest.raises(NotFoundError) as err:
        filled.get_entity("person_0099")
    assert "person_0099" in str(err.value) and "entity_list" in str(err.value)


def test_timeline_orders_traces_by_source_then_time(filled: MemoryStore) -> None:
    filled.write_segment(make_segment(0, source="/videos/a.mp4", camera="garage"))
    timeline = filled.timeline()
    assert [(t.source, t.segment_index) for t in timeline][:2] == [("/videos/a.mp4", 0), (SOURCE, 0)]
    assert [t.segment_index for t in filled.timeline(source=SOURCE, limit=2, offset=3)] == [3, 4]
    assert [t.camera_id for t in filled.timeline(camera="garage")] == ["garage"]


def test_users_do_not_see_each_others_rows(store_path: Path) -> None:
    with MemoryStore(str(store_path), HashEmbedder(64), user_id="alice") as alice:
        alice.write_segment(make_segment(0, user="alice"))
        alice.upsert_entity(PERSONS["person_0001"])
    with MemoryStore(str(store_path), HashEmbedder(64), user_id="bob") as bob:
        assert bob.counts()["traces"] == 0
        assert bob.search("kettle", mode="fts") == []
        assert bob.next_entity_id("person") == "person_0001"
        bob.upsert_entity(Entity(id="person_0001", kind="person", name="Robert"))
    with MemoryStore(str(store_path), HashEmbedder(64), user_id="alice") as alice:
        assert alice.get_entity("person_0001").name == "Alice"


def test_a_second_handle_sees_commits_of_the_first_without_reopening(store_path: Path) -> None:
    with MemoryStore(str(store_path), HashEmbedder(64)) as writer, \
            MemoryStore(str(store_path), HashEmbedder(64)) as reader:
        assert reader.resume_point(SOURCE) is None
        writer.write_segment(make_segment(0))
        assert reader.resume_point(SOURCE) == 0
        assert [h.id for h in reader.search("kettle", mode="fts")] == [make_segment(0).trace.id]


def test_every_table_carries_user_id_and_searchable_ones_text_and_a_vector_of_the_embedder_dim() -> None:
    from memory.store.schema import SEARCHABLE, table_schemas

    schemas = table_schemas(48)
    assert all("user_id" in s.names and "id" in s.names for s in schemas.values())
    for level in SEARCHABLE:
        assert "text" in schemas[level].names
        assert schemas[level].field("vector").type.list_size == 48


def test_rewriting_a_segment_after_a_crash_never_counts_a_sighting_twice(store: MemoryStore) -> None:
    alice = Entity(id="person_0001", kind="person", sightings=1)
    first = make_segment(0, entity_ids=["person_0001"]).model_copy(update={"entities": [alice]})
    store.write_segment(first)
    # The re-run after a crash computes its counters from the first attempt's entity row.
    again = first.model_copy(update={"entities": [alice.model_copy(update={"sightings": 2})]})
    store.write_segment(again)
    assert store.get_entity("person_0001").sightings == 1
    store.write_segment(make_segment(1, entity_ids=["person_0001"]).model_copy(update={"entities": [alice]}))
    assert store.get_entity("person_0001").sightings == 2


def test_sightings_count_observations_another_writer_and_deletes_added_between_segments(tmp_path: Path) -> None:
    alice = Entity(id="person_0001", kind="person")

    def seg(index: int, source: str = SOURCE) -> SegmentWrite:
        return make_segment(index, source=source, entity_ids=["person_0001"]).model_copy(update={"entities": [alice]})

    with MemoryStore(str(tmp_path / "m"), HashEmbedder(64), auto_index=False) as store, \
            MemoryStore(str(tmp_path / "m"), HashEmbedder(64), auto_index=False) as other:
        counted = []
        for index in range(3):
            write = seg(index)
            store.write_segment(write)
            counted.append(write.entities[0].sightings)  # the write hands the count to post-commit hooks
        assert counted == [1, 2, 3]
        other.write_segment(seg(0, source="/videos/porch.mp4"))  # another process sees Alice elsewhere
        store.write_segment(seg(3))
        assert store.get_entity("person_0001").sightings == 5
        other.delete_rows("observations", f"source = '{SOURCE}' AND segment_index = 0")
        store.write_segment(seg(4))
        assert store.get_entity("person_0001").sightings == 5
        store.write_segment(seg(5))
        assert store.get_entity("person_0001").sightings == 6
