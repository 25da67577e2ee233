"""context_get / context_set, facts in entity_get and chapters in memory_get, through the real client."""

from __future__ import annotations

from datetime import timezone
from pathlib import Path

import anyio
import pytest
from mcp import Client

from memory.semantic.chapters import ChapterSettings, build_chapters
from memory.semantic.consolidate import ConsolidationEngine
from memory.semantic.local_consolidator import LocalConsolidator
from plugin.manifest import load_manifest
from plugin.server import create_server
from plugin.engine import open_store
from tests.conftest import write_manifest
from tests.memory.semantic_stream import Stream, run, week

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def remembered(tmp_path: Path) -> tuple[Path, str]:
    """A store with a few days of cafe/gym visits, consolidated facts and one chapter."""
    path = write_manifest(tmp_path)
    store = open_store(load_manifest(path))
    try:
        stream = Stream()
        week(stream, days=range(3))
        run(store, ConsolidationEngine(store, LocalConsolidator(timezone=timezone.utc)), stream.segments,
            {"cam_cafe": "cafe", "cam_gym": "gym"})
        chapter = build_chapters(store, "rtsp://cam_cafe", "cam_cafe", ChapterSettings(), source_done=True)[0]
    finally:
        store.close()
    return path, chapter.id


async def test_context_set_then_get_and_annotations(remembered: tuple[Path, str]) -> None:
    path, _ = remembered
    with anyio.fail_after(60):
        async with Client(create_server(load_manifest(path))) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert tools["context_get"].annotations.read_only_hint
            assert not tools["context_set"].annotations.read_only_hint
            missing = await client.call_tool("context_get", {"camera_id": "cam_cafe"})
            assert missing.is_error and "context_set" in missing.content[0].text
            empty = await client.call_tool("context_set", {"camera_id": "cam_cafe"})
            assert empty.is_error and "nothing to set" in empty.content[0].text
            set_ = await client.call_tool("context_set", {"camera_id": "cam_cafe", "scene_type": "cafe",
                                                          "routines": ["busy at 8"]})
            assert not set_.is_error and set_.structured_content["locked"] == ["routines", "scene_type"]
            got = await client.call_tool("context_get", {})
            contexts = got.structured_content["contexts"]
            assert [c["camera_id"] for c in contexts] == ["cam_cafe"] and contexts[0]["scene_type"] == "cafe"
            assert "cam_cafe: cafe" in got.content[0].text


async def test_entity_get_shows_facts_and_memory_get_walks_a_chapter(remembered: tuple[Path, str]) -> None:
    path, chapter_id = remembered
    with anyio.fail_after(60):
        async with Client(create_server(load_manifest(path))) as client:
            detail = await client.call_tool("entity_get", {"entity_id": "person_0001"})
            facts = detail.structured_content["facts"]
            assert facts and all(0.0 <= f["importance"] <= 1.0 and f["evidence_ids"] for f in facts)
            assert [f["importance"] for f in facts] == sorted((f["importance"] for f in facts), reverse=True)
            assert "fact fct_" in detail.content[0].text
            evidence = await client.call_tool("memory_get", {"id": facts[0]["evidence_ids"][0], "neighbors": 0})
            assert not evidence.is_error
            chapter = await client.call_tool("memory_get", {"id": chapter_id, "neighbors": 0})
            item = chapter.structured_content
            assert [t["id"] for t in item["children"]] == item["item"]["trace_ids"]
            assert len(item["children"]) == 9
            search = await client.call_tool("memory_search", {"query": "usually at the cafe", "level": "facts"})
            assert any("cafe in the morning" in h["text"] for h in search.structured_content["hits"])
