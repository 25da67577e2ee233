"""Gallery slots count for identity only once the segment that wrote them is committed."""

from __future__ import annotations

from pathlib import Path

import pytest
from memory_fixtures import SOURCE, make_segment

from memory import HashEmbedder, MemoryStore
from memory.models import GalleryFace, GalleryVoice, SegmentWrite
from memory.store.schema import META_TABLE, SCHEMA_VERSION


def face(slot_id: str, entity_id: str, x: float, quality: float = 0.8) -> GalleryFace:
    return GalleryFace(id=slot_id, entity_id=entity_id, embedding=[x, 1.0 - x] + [0.0] * 126, quality=quality)


def with_slots(index: int, faces: list[GalleryFace], voices: list[GalleryVoice] = ()) -> SegmentWrite:
    return make_segment(index).model_copy(update={"gallery_faces": faces, "gallery_voices": list(voices)})


def crash_before_resume_point(store: MemoryStore, monkeypatch: pytest.MonkeyPatch, seg: SegmentWrite) -> None:
    """Every table of ``seg`` written except ``ingest_log``: what a process killed at that moment leaves."""
    def killed(state: object) -> None:
        raise OSError("killed")

    with monkeypatch.context() as patch:
        patch.setattr(store, "_write_state", killed)
        with pytest.raises(OSError, match="killed"):
            store.write_segment(seg)


def seen(store: MemoryStore) -> dict[str, tuple[str, float]]:
    return {g.id: (g.entity_id, round(g.embedding[0], 3)) for g in store.face_gallery()}


def test_an_uncommitted_segments_slots_do_not_count_until_its_rerun_commits(
        store: MemoryStore, monkeypatch: pytest.MonkeyPatch) -> None:
    store.write_segment(with_slots(0, [face("gal_a", "person_0001", 0.1), face("gal_b", "person_0002", 0.2)]))
    before = seen(store)
    # segment 1 replaces slot a's content and creates slot c, then the process dies
    crash_before_resume_point(store, monkeypatch, with_slots(1, [face("gal_a", "person_0001", 0.5),
                                                                 face("gal_c", "person_0003", 0.7)]))
    assert {r["id"] for r in store.scan_rows("gallery_face")} == {"gal_a", "gal_b", "gal_c"}
    assert store.resume_point(SOURCE) == 0
    assert seen(store) == before  # the replaced slot as it was, the new one not at all

    # a second process reopens the store and sees the same
    with MemoryStore(store.uri, HashEmbedder(64)) as other:
        assert seen(other) == before

    # the re-run of segment 1 decides differently: it only writes slot d
    store.write_segment(with_slots(1, [face("gal_d", "person_0004", 0.9)]))
    assert store.resume_point(SOURCE) == 1
    assert seen(store) == {**before, "gal_d": ("person_0004", 0.9)}
    assert {r["id"] for r in store.scan_rows("gallery_face")} == {"gal_a", "gal_b", "gal_d"}

    # a committed replacement counts, and a later crash restores exactly it
    store.write_segment(with_slots(2, [face("gal_b", "person_0002", 0.3)]))
    committed = seen(store)
    assert committed["gal_b"] == ("person_0002", 0.3)
    crash_before_resume_point(store, monkeypatch, with_slots(3, [face("gal_b", "person_0002", 0.6)]))
    assert seen(store) == committed


def test_a_rerun_that_writes_the_same_slot_again_keeps_the_content_from_before_the_crash(
        store: MemoryStore, monkeypatch: pytest.MonkeyPatch) -> None:
    store.write_segment(with_slots(0, [face("gal_a", "person_0001", 0.1)]))
    crash_before_resume_point(store, monkeypatch, with_slots(1, [face("gal_a", "person_0001", 0.5)]))
    crash_before_resume_point(store, monkeypatch, with_slots(1, [face("gal_a", "person_0001", 0.6)]))
    assert seen(store) == {"gal_a": ("person_0001", 0.1)}
    store.write_segment(with_slots(1, [face("gal_a", "person_0001", 0.7)]))
    crash_before_resume_point(store, monkeypatch, with_slots(2, [face("gal_a", "person_0001", 0.8)]))
    assert seen(store) == {"gal_a": ("person_0001", 0.7)}


def test_the_enrichment_write_of_a_live_latency_segment_leaves_its_slots_alone(store: MemoryStore) -> None:
    first = with_slots(0, [face("gal_a", "person_0001", 0.1)], [GalleryVoice(id="gv_a", entity_id="person_0001",
                                                                             embedding=[1.0, 0.0], quality=0.9)])
    store.write_segment(first)
    store.write_segment(first.model_copy(update={"gallery_faces": [], "enrichment": True}))
    assert seen(store) == {"gal_a": ("person_0001", 0.1)} and len(store.voice_gallery()) == 1


def test_voice_slots_follow_the_same_rule(store: MemoryStore, monkeypatch: pytest.MonkeyPatch) -> None:
    voice = GalleryVoice(id="gv_a", entity_id="person_0001", embedding=[1.0, 0.0], quality=0.9)
    crash_before_resume_point(store, monkeypatch, with_slots(0, [], [voice]))
    assert store.voice_gallery() == []
    store.write_segment(with_slots(0, [], [voice]))
    assert store.voice_gallery() == [voice]


def test_slots_of_identity_edits_and_of_a_reset_source_keep_counting(store: MemoryStore,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    store.add_gallery_faces([face("gal_ref", "person_0009", 0.4)])  # enrolment: no segment behind it
    store.write_segment(with_slots(0, [face("gal_a", "person_0001", 0.1)]))
    crash_before_resume_point(store, monkeypatch, with_slots(1, [face("gal_a", "person_0001", 0.5),
                                                                 face("gal_c", "person_0003", 0.7)]))
    store.reset_source(SOURCE)  # the file changed: its resume point goes, the people stay
    assert store.resume_point(SOURCE) is None
    assert seen(store) == {"gal_ref": ("person_0009", 0.4), "gal_a": ("person_0001", 0.1)}
    assert {r["id"] for r in store.scan_rows("gallery_face")} == {"gal_ref", "gal_a"}


def test_a_version_9_store_gains_the_columns_and_its_slots_keep_counting(store_path: Path) -> None:
    slot = face("gal_old", "person_0001", 0.25)
    with MemoryStore(str(store_path), HashEmbedder(64)) as store:
        store.add_gallery_faces([slot])
        store._db.open_table("gallery_face").drop_columns(["source", "segment_index", "prior"])
        MemoryStore._set_meta(store._db.open_table(META_TABLE), {"schema_version": "9"})
    with MemoryStore(str(store_path), HashEmbedder(64)) as store:
        assert store.face_gallery() == [slot]
        assert {"source", "segment_index", "prior"} <= set(store._db.open_table("gallery_face").schema.names)
        meta = {r["key"]: r["value"] for r in store._db.open_table(META_TABLE).search().limit(None).to_list()}
    assert meta["schema_version"] == str(SCHEMA_VERSION)
