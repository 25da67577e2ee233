"""Identity on the real clip, and entity_update (name/enrol, merge, split, forget) through the MCP client."""

from __future__ import annotations

import shutil
from pathlib import Path

import anyio
import pytest
from mcp import Client

from memory.search.modes import sql_literal
from plugin.manifest import load_manifest
from plugin.server import create_server
from plugin.engine import open_store
from tests.conftest import CLIP, DATA, engine_for, write_manifest

pytestmark = pytest.mark.anyio
LIN = str(DATA / "faces" / "lin-manuel-miranda.png")
ALEX = str(DATA / "faces" / "alex-lacamoire.png")
PERCEPTION = {"ocr": {"type": "none"}, "asr": {"type": "none"}, "max_segment_s": 2.5}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def clip_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The clip ingested once (faces + objects + bodies) with both reference stills enrolled first."""
    from memory.identity.identity_ops import enrol_face
    from perception.identity.reference import reference_views

    directory = tmp_path_factory.mktemp("idclip")
    shutil.copy(CLIP, directory / "stage.mp4")
    with engine_for(directory, perception=PERCEPTION) as engine:
        for name, still in (("Lin-Manuel Miranda", LIN), ("Alex Lacamoire", ALEX)):
            (embedding, quality), *views = reference_views(still)
            enrol_face(engine.store, name, embedding, quality, reference=still, views=views)
        engine.identity_edited()
        engine.ingest_file(directory / "stage.mp4", "stage")
    return directory


@pytest.fixture
def manifest_path(clip_store: Path, tmp_path: Path) -> Path:
    """A private copy of the ingested store (tests edit it)."""
    shutil.copytree(clip_store / "lancedb", tmp_path / "lancedb")
    return write_manifest(tmp_path)


def _traces(manifest_path: Path) -> list:
    store = open_store(load_manifest(manifest_path))
    try:
        return store.timeline()
    finally:
        store.close()


def test_the_performer_is_one_named_entity_across_the_cut_and_the_pianist_another(manifest_path: Path) -> None:
    traces = _traces(manifest_path)
    lin = "person_0001"  # enrolled first
    with_lin = [t for t in traces if lin in t.entity_ids]
    assert any(t.t_end <= 2.0 for t in with_lin), "wide shot before the cut"
    assert any(t.t_start >= 3.5 for t in with_lin), "close-up after the cut"
    pianist = next(t for t in traces if 1.4 <= t.t_start <= 2.0).entity_ids
    assert pianist and lin not in pianist
    alex = "person_0002"  # enrolled second
    assert alex in pianist, "the pianist's close profile carries the enrolled name"
    store = open_store(load_manifest(manifest_path))
    try:
        observations = store.entity_observations(lin, limit=20)
        alex_observations = store.entity_observations(alex, limit=20)
        assert store.get_entity(alex).name == "Alex Lacamoire"
    finally:
        store.close()
    assert observations and all("Lin-Manuel Miranda" in o.text for o in observations)
    assert alex_observations and all("Alex Lacamoire" in o.text for o in alex_observations)
    assert not {o.segment_index for o in observations} & {o.segment_index for o in alex_observations} - {
        t.segment_index for t in traces if lin in t.entity_ids and alex in t.entity_ids}


async def test_entity_get_shows_why_an_entity_got_its_sightings(manifest_path: Path) -> None:
    with anyio.fail_after(60):
        async with Client(create_server(load_manifest(manifest_path))) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            detail = (await client.call_tool("entity_get", {"entity_id": "person_0001", "decisions": 20}))
    assert tools["entity_update"].annotations.destructive_hint
    actions = {d["action"] for d in detail.structured_content["decisions"]}
    assert {"enrol", "name", "match"} <= actions
    match = next(d for d in detail.structured_content["decisions"] if d["action"] == "match")
    assert match["score"] >= 0.363 and '"frame_t"' in match["evidence_json"]


async def test_merge_moves_memories_and_redirects_then_split_moves_them_back(manifest_path: Path) -> None:
    traces = _traces(manifest_path)
    pianist = next(t for t in traces if 1.4 <= t.t_start <= 2.0).entity_ids[0]
    with anyio.fail_after(60):
        async with Client(create_server(load_manifest(manifest_path))) as client:
            merged = await client.call_tool("entity_update", {"action": "merge", "entity_id": pianist,
                                                              "into_id": "person_0001"})
            assert merged.structured_content["entity"]["id"] == "person_0001"
            redirected = await client.call_tool("entity_get", {"entity_id": pianist, "observations": 50})
            assert redirected.structured_content["entity"]["id"] == "person_0001"
            moved = [o["id"] for o in redirected.structured_content["observations"] if o["entity_id"] == "person_0001"
                     and 1.4 <= o["t_start"] <= 2.0]
            assert moved
            split = await client.call_tool("entity_update", {"action": "split", "entity_id": "person_0001",
                                                             "observation_ids": moved})
            new_id = split.structured_content["entity"]["id"]
            detail = await client.call_tool("entity_get", {"entity_id": new_id})
    assert [o["id"] for o in detail.structured_content["observations"]] == moved
    assert any(t.entity_ids == [new_id] for t in _traces(manifest_path) if 1.4 <= t.t_start <= 2.0)


async def test_naming_makes_an_entity_findable_and_forget_erases_every_trace_of_it(manifest_path: Path) -> None:
    traces = _traces(manifest_path)
    pianist = next(t for t in traces if 1.4 <= t.t_start <= 2.0).entity_ids[0]
    with anyio.fail_after(60):
        async with Client(create_server(load_manifest(manifest_path))) as client:
            await client.call_tool("entity_update", {"action": "name", "entity_id": pianist, "name": "Zebulon Pianist"})
            found = await client.call_tool("memory_search", {"query": "Zebulon", "level": "entities", "mode": "fts"})
            assert pianist in str(found.structured_content)
            forgot = await client.call_tool("entity_update", {"action": "forget", "entity_id": pianist})
            assert forgot.structured_content["removed"]["observations"] >= 1
            after = await client.call_tool("memory_search", {"query": pianist, "level": "all", "mode": "fts"})
            again = await client.call_tool("memory_search", {"query": "Zebulon", "level": "all", "mode": "fts"})
    assert pianist not in str(after.structured_content) and "Zebulon" not in str(again.structured_content)
    store = open_store(load_manifest(manifest_path))
    try:
        has = f"array_has_any(entity_ids, [{sql_literal(pianist)}])"
        owned = f"entity_id = {sql_literal(pianist)}"
        assert not store.scan_rows("entities", f"id = {sql_literal(pianist)}")
        for table in ("gallery_face", "gallery_body", "observations", "identity_decisions"):
            assert not store.scan_rows(table, owned), table
        for table in ("keyframes", "traces", "facts"):
            assert not store.scan_rows(table, has), table
        assert store.scan_rows("keyframes", has.replace(pianist, "person_0001"))  # others keep their frames
    finally:
        store.close()
