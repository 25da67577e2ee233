"""Object entities from real images: a cat that re-appears across segments of one camera is one entity.

The clip is composed of the repository's real photos (chelsea.png: a cat, coffee.png: a cup,
astronaut.png: a person): cat → cup → astronaut → the cat again, zoomed in (a different crop, so
the second sighting is not the same pixels). Everything runs for real: the COCO-80 detector
(vendored ONNX), the appearance galleries, LanceDB on disk and the MCP client.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import cv2
import numpy as np
import pytest
from mcp import Client

from perception.identity.objects import object_descriptor
from plugin.manifest import load_manifest
from plugin.server import create_server
from tests.conftest import DATA, engine_for, write_manifest
from tests.media import write_clip

pytestmark = pytest.mark.slow
SIZE = (640, 480)
PERCEPTION = {"ocr": {"type": "none"}, "asr": {"type": "none"}, "speakers": {"type": "none"},
              "object_entities": {"classes": ["cat", "dog", "cup"]}}


def _frame(name: str, zoom: float = 1.0) -> np.ndarray:
    img = cv2.imread(str(DATA / "images" / name))
    h, w = img.shape[:2]
    ch, cw = int(h * zoom), int(w * zoom)
    y, x = (h - ch) // 2, (w - cw) // 2
    return cv2.resize(img[y:y + ch, x:x + cw], SIZE, interpolation=cv2.INTER_AREA)


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("objects")
    shots = [_frame("chelsea.png"), _frame("coffee.png"), _frame("astronaut.png"), _frame("chelsea.png", 0.85)]
    write_clip(directory / "room.mp4", lambda i: shots[min(i // 20, 3)], frames=80, fps=10, size=SIZE,
               options={"crf": "18", "preset": "veryfast"})
    with engine_for(directory, perception=PERCEPTION, semantic={"enabled": False}) as engine:
        engine.ingest_file(directory / "room.mp4", "living_room")
    return directory


def _entity_objects(store_dir: Path) -> tuple[list, list]:
    with engine_for(store_dir, perception=PERCEPTION, semantic={"enabled": False}) as engine:
        return engine.store.list_entities(kind="object"), engine.store.timeline()


def test_a_cat_that_comes_back_after_other_shots_is_the_same_object_entity(store_dir: Path) -> None:
    objects, traces = _entity_objects(store_dir)
    pet = [o for o in objects if "cat" in o.description or "dog" in o.description]
    assert len(pet) == 1, [o.description for o in objects]
    seen_in = [t for t in traces if pet[0].id in t.entity_ids]
    # first shot (0–2 s) and the zoomed return (6–8 s), not the cup or astronaut shots in between
    assert min(t.t_start for t in seen_in) < 2.0 and max(t.t_end for t in seen_in) > 6.0
    assert not [t for t in seen_in if 2.5 <= t.t_start and t.t_end <= 5.5]
    assert pet[0].sightings >= 2 and pet[0].cameras == ["living_room"]


def test_the_cup_is_another_object_and_traces_name_the_coco_classes(store_dir: Path) -> None:
    objects, traces = _entity_objects(store_dir)
    cups = [o for o in objects if o.description.startswith("cup")]
    assert len(cups) == 1 and cups[0].id not in {o.id for o in objects if "cat" in o.description}
    labels = {label for t in traces for label in t.objects}
    assert {"cup", "person"} <= labels  # COCO-80 classes in trace.objects
    cup_trace = next(t for t in traces if cups[0].id in t.entity_ids)
    assert f"{cups[0].id} (cup)" in cup_trace.summary


def test_entity_list_kind_object_and_search_reach_object_entities(store_dir: Path) -> None:
    async def run() -> tuple[dict, dict, dict]:
        manifest = load_manifest(write_manifest(store_dir, perception=PERCEPTION))
        async with Client(create_server(manifest), raise_exceptions=True) as client:
            listed = await client.call_tool("entity_list", {"kind": "object"})
            people = await client.call_tool("entity_list", {"kind": "person"})
            first = listed.structured_content["entities"][0]["id"]
            got = await client.call_tool("entity_get", {"entity_id": first})
            return listed.structured_content, people.structured_content, got.structured_content

    listed, people, got = anyio.run(run)
    assert listed["total"] >= 2 and all(e["kind"] == "object" for e in listed["entities"])
    assert all(e["kind"] == "person" for e in people["entities"])
    obs = got["observations"]
    assert obs and "living_room" in obs[0]["text"] and "of frame" in obs[0]["text"]  # where and when
    assert got["decisions"] and got["decisions"][-1]["action"] == "new"


def test_appearance_descriptor_tells_the_cat_from_the_cup_but_not_from_itself_zoomed() -> None:
    cat, zoomed, cup = _frame("chelsea.png"), _frame("chelsea.png", 0.85), _frame("coffee.png")
    box = (40, 40, 560, 400)
    a, b, c = (object_descriptor(img, box) for img in (cat, zoomed, cup))
    assert a is not None and b is not None and c is not None
    assert float(a @ b) >= 0.8 > float(a @ c)


def test_a_named_object_can_be_searched_for_and_a_rule_naming_it_fires_when_it_returns(
        store_dir: Path, tmp_path: Path) -> None:
    import shutil

    shutil.copytree(store_dir / "lancedb", tmp_path / "lancedb")
    manifest = load_manifest(write_manifest(tmp_path, perception=PERCEPTION, semantic={"enabled": False}))
    objects, _ = _entity_objects(tmp_path)
    pet = next(o for o in objects if "cat" in o.description or "dog" in o.description)

    async def name_and_rule() -> tuple[dict, dict]:
        async with Client(create_server(manifest), raise_exceptions=True) as client:
            await client.call_tool("entity_update", {"action": "name", "entity_id": pet.id, "name": "Chelsea"})
            rule = await client.call_tool("rule_add", {"text": "tell me when Chelsea appears"})
            hits = await client.call_tool("memory_search", {"query": "Chelsea", "level": "entities"})
            return rule.structured_content, hits.structured_content

    rule, hits = anyio.run(name_and_rule)
    assert hits["hits"][0]["id"] == pet.id
    assert rule["conditions"]["entities"] and not rule["conditions"]["needs_vlm"]
    shots = [_frame("coffee.png"), _frame("chelsea.png", 0.9)]
    write_clip(tmp_path / "later.mp4", lambda i: shots[min(i // 20, 1)], frames=40, fps=10, size=SIZE,
               options={"crf": "18", "preset": "veryfast"})
    with engine_for(tmp_path, perception=PERCEPTION, semantic={"enabled": False}) as engine:
        engine.ingest_file(tmp_path / "later.mp4", "living_room")
        sent = [r for r in engine.store.scan_rows("notifications") if r["rule_id"] == rule["id"]]
        traces = engine.store.timeline(camera="living_room")
    later = [t for t in traces if t.source.endswith("later.mp4") and pet.id in t.entity_ids]
    assert later and min(t.t_start for t in later) >= 1.5  # the cat shot, not the cup before it
    fired = [r["trace_id"] for r in sent if r["decision"] == "sent"]
    assert fired and fired[0] in {t.id for t in later}  # it fired on the cat's return, not on the cup
