"""Forget is erasure: no file of the store keeps the forgotten rows; references elsewhere are scrubbed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import cv2
import numpy as np
import pytest

from memory import HashEmbedder, MemoryStore
from memory.identity.identity_ops import forget_entity, name_entity, record_decision, split_entity
from memory.models import Chapter, Fact, GalleryFace, IdentityDecision, Keyframe, stable_id
from tests.memory.memory_fixtures import make_segment, populate


def _noise_jpeg(seed: int) -> bytes:
    image = np.random.default_rng(seed).integers(0, 255, (64, 64, 3), dtype=np.uint8)
    ok, buf = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, 95])
    assert ok
    return bytes(buf)


def _files_holding(root: Path, needle: bytes) -> list[str]:
    found = []
    for directory, _dirs, files in os.walk(root):
        for name in files:
            path = Path(directory) / name
            if needle in path.read_bytes():
                found.append(str(path.relative_to(root)))
    return found


@pytest.fixture
def store(tmp_path: Path):  # type: ignore[no-untyped-def]
    with MemoryStore(str(tmp_path / "db"), HashEmbedder(64)) as s:
        yield s


def test_forget_leaves_no_byte_of_the_embedding_or_key_frame_in_any_file(store: MemoryStore, tmp_path: Path) -> None:
    populate(store)  # Alice = person_0001, Bob = person_0002
    alice_face = (np.arange(128, dtype=np.float32) * 0.0137 + 0.5).astype(np.float32)
    store.add_gallery_faces([GalleryFace(id="gal_alice", entity_id="person_0001", embedding=alice_face.tolist(),
                                         quality=0.9, keyframe_id=None)])
    jpeg = _noise_jpeg(11)
    seg = make_segment(0, entity_ids=["person_0001"])
    frame = seg.keyframes[0].model_copy(update={"jpeg": jpeg})
    store.upsert_rows("keyframes", [frame.model_dump()])
    name_entity(store, "person_0001", "Alice")
    for i in range(5):  # several versions of every table, as a real store has
        store.upsert_rows("keyframes", [Keyframe(**{**frame.model_dump(), "quality": 0.1 * i}).model_dump()])
    store.upsert_rows("identity_decisions", [IdentityDecision(
        id="dec_bob", entity_id="person_0002", action="match", source="s", segment_index=2, score=0.7,
        runner_up="person_0001", runner_up_score=0.5, reason="close to person_0001 (Alice)",
        evidence_json=json.dumps([{"best": ["person_0002", 0.7], "runner_up": ["person_0001", 0.5]}])).model_dump()])
    store.upsert_chapters([Chapter(id="sch_1", camera_id="kitchen", source="s", t_start=0, t_end=60,
                                   title="Alice makes tea", text="Alice (person_0001) and Bob drink tea",
                                   entity_ids=["person_0001", "person_0002"])])
    store.upsert_rows("semantic_state", [{"id": "sem_a", "kind": "entity", "subject": "person_0001", "observed": 3,
                                          "consolidated_at": 0, "runs": 1, "skipped": 0, "last_run_at": 0.0}])
    store.upsert_facts([Fact(id="fct_rel", entity_ids=["person_0002"], text="Bob often has tea with Alice",
                             kind="relation")])
    db = tmp_path / "db"
    assert _files_holding(db, alice_face.tobytes()[64:192]) and _files_holding(db, jpeg[200:264])

    forget_entity(store, "person_0001")

    assert _files_holding(db, alice_face.tobytes()[64:192]) == []
    assert _files_holding(db, jpeg[200:264]) == []
    assert _files_holding(db, b"Alice") == []
    bob = store.scan_rows("identity_decisions", "id = 'dec_bob'")[0]
    assert bob["runner_up"] is None and "person_0001" not in bob["evidence_json"] + bob["reason"]
    chapter = store.scan_rows("schemas")[0]
    assert "Alice" not in chapter["title"] + chapter["text"] and chapter["entity_ids"] == ["person_0002"]
    assert store.scan_rows("semantic_state", "subject = 'person_0001'") == []
    assert "Alice" not in store.scan_rows("facts", "id = 'fct_rel'")[0]["text"]
    assert store.search("Alice", level="all") == [] or all("Alice" not in h.text for h in store.search("Alice"))
    assert store.next_entity_id("person") == "person_0003"  # the forgotten id is never handed out again


def test_forgotten_ids_are_not_reused_even_when_they_were_the_highest(store: MemoryStore) -> None:
    populate(store)
    assert store.next_entity_id("person") == "person_0003"
    forget_entity(store, "person_0002")
    assert store.next_entity_id("person") == "person_0004"


def test_split_moves_only_what_belongs_to_the_split_off_sightings(store: MemoryStore) -> None:
    populate(store)
    name_entity(store, "person_0001", "Alice")
    moved = stable_id("obs_", "default", "/videos/kitchen.mp4", 0, "person_0001")
    kept = stable_id("obs_", "default", "/videos/kitchen.mp4", 1, "person_0001")
    store.upsert_facts([
        Fact(id="fct_kettle", entity_ids=["person_0001"], text="switches on the kettle", evidence_ids=[moved]),
        Fact(id="fct_mug", entity_ids=["person_0001"], text="uses the red mug", evidence_ids=[kept, moved]),
    ])
    record_decision(store, "person_0001", "match", "seen")
    new = split_entity(store, "person_0001", [moved])
    owner = {r["id"]: r["entity_ids"] for r in store.scan_rows("facts")}
    name_fact = stable_id("fct_", "default", "person_0001", "name")
    assert owner[name_fact] == ["person_0001"]  # the name stays with the person it was given to
    assert owner["fct_kettle"] == [new.id] and owner["fct_mug"] == ["person_0001"]
    assert store.get_entity("person_0001").name == "Alice" and new.name is None


def test_forget_scrubs_rules_and_notifications_that_name_the_entity_or_show_its_key_frames(store: MemoryStore) -> None:
    from memory.procedural import ProceduralMemory, RuleConditions

    populate(store)  # Alice = person_0001, Bob = person_0002
    name_entity(store, "person_0001", "Alice")
    frame = make_segment(0, entity_ids=["person_0001"]).keyframes[0]
    store.upsert_rows("keyframes", [frame.model_dump()])
    rules = ProceduralMemory(store)
    named = rules.add_rule("tell me when Alice (person_0001) is at the door",
                           conditions=RuleConditions(entities=["person_0001"]))
    by_name = rules.add_rule("Alice at the fridge", conditions=RuleConditions(entities=["Alice"], objects=["refrigerator"]))
    other = rules.add_rule("a dog on the couch", conditions=RuleConditions(objects=["dog"]))
    store.upsert_rows("notifications", [{
        "id": "ntf_1", "rule_id": other.id, "trace_id": "t", "camera_id": "kitchen", "decision": "fire",
        "reason": "Alice (person_0001) walked by", "channels_json": "[]", "created_at": 1.0, "entity_id": "",
        "keyframe_id": frame.id, "seq": 1, "payload_json": json.dumps({"keyframe_id": frame.id, "message": "Alice"}),
    }])

    forget_entity(store, "person_0001")

    rows = {r["id"]: r for r in store.scan_rows("rules")}
    assert "Alice" not in rows[named.id]["text"] and "person_0001" not in rows[named.id]["text"] + rows[named.id]["conditions_json"]
    assert not rows[named.id]["enabled"] and not rows[by_name.id]["enabled"] and rows[other.id]["enabled"]
    assert "Alice" not in rows[by_name.id]["conditions_json"] + rows[by_name.id]["text"]
    note = store.scan_rows("notifications", "id = 'ntf_1'")[0]
    assert note["keyframe_id"] == "" and frame.id not in note["payload_json"] and "Alice" not in note["payload_json"]
    assert "person_0001" not in note["reason"] and store.keyframes([frame.id]) == []
    assert {r.id for r in rules.list_rules()} == {named.id, by_name.id, other.id}  # still readable as rules
