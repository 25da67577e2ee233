"""The memory and entity tools through the real SDK client, in memory (both protocol eras)."""

from __future__ import annotations

import base64
from pathlib import Path

import anyio
import cv2
import numpy as np
import pytest
from mcp import Client
from mcp.types import ImageContent, TextContent

from plugin.manifest import load_manifest
from plugin.server import create_server

pytestmark = pytest.mark.anyio

TOOLS = {"memory_search", "memory_get", "memory_visual_evidence", "entity_list", "entity_get"}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def decode_jpeg(block: ImageContent) -> np.ndarray:
    image = cv2.imdecode(np.frombuffer(base64.b64decode(block.data), np.uint8), cv2.IMREAD_COLOR)
    assert image is not None, "image content is not a decodable picture"
    return image


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_tools_are_listed_with_read_only_hints_and_no_schema_on_the_image_tool(ingested: Path,
                                                                                        mode: str) -> None:
    async with Client(create_server(load_manifest(ingested)), mode=mode) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert TOOLS <= set(tools)
    assert all(len(name) <= 30 for name in tools)
    assert all(tools[n].annotations and tools[n].annotations.read_only_hint for n in TOOLS)
    assert tools["memory_visual_evidence"].output_schema is None
    assert tools["memory_search"].output_schema is not None
    assert all(tools[n].description for n in TOOLS)


async def test_search_get_and_visual_evidence_walk_from_a_hit_to_its_frames(ingested: Path) -> None:
    with anyio.fail_after(60):
        async with Client(create_server(load_manifest(ingested))) as client:
            found = await client.call_tool("memory_search", {"query": "person close-up", "limit": 3})
            assert not found.is_error
            hits = found.structured_content["hits"]
            assert 1 <= len(hits) <= 3
            top = hits[0]
            assert top["id"].startswith("trc_") and top["level"] == "traces"

            opened = await client.call_tool("memory_get", {"id": top["id"], "neighbors": 1})
            assert not opened.is_error
            item = opened.structured_content
            assert item["item"]["id"] == top["id"]
            times = [n["t_start"] for n in item["before"]] + [item["item"]["t_start"]] + [
                n["t_start"] for n in item["after"]]
            assert times == sorted(times)
            assert len(item["before"]) <= 1 and len(item["after"]) <= 1

            shown = await client.call_tool("memory_visual_evidence", {"id": top["id"], "max_images": 2})
            assert not shown.is_error
            texts = [b for b in shown.content if isinstance(b, TextContent)]
            images = [b for b in shown.content if isinstance(b, ImageContent)]
            assert len(texts) == 1 and "kf_" in texts[0].text
            assert 1 <= len(images) <= 2
            assert all(img.mime_type == "image/jpeg" for img in images)
            frame = decode_jpeg(images[0])
            assert frame.shape[2] == 3 and frame.shape[0] > 100 and frame.std() > 5


async def test_search_pages_do_not_overlap(ingested: Path) -> None:
    async with Client(create_server(load_manifest(ingested))) as client:
        first = (await client.call_tool("memory_search", {"query": "person", "limit": 2})).structured_content
        assert first["next_offset"] == 2
        second = (await client.call_tool("memory_search", {"query": "person", "limit": 2, "offset": 2}))
        ids_1 = {h["id"] for h in first["hits"]}
        ids_2 = {h["id"] for h in second.structured_content["hits"]}
    assert ids_1 and ids_2 and not ids_1 & ids_2


async def test_entities_are_listed_and_opened_with_their_observations(ingested: Path) -> None:
    async with Client(create_server(load_manifest(ingested))) as client:
        page = (await client.call_tool("entity_list", {"kind": "person"})).structured_content
        assert page["total"] >= 1 and page["entities"]
        person = page["entities"][0]
        assert person["id"].startswith("person_")
        detail = await client.call_tool("entity_get", {"entity_id": person["id"]})
        assert not detail.is_error
        observations = detail.structured_content["observations"]
        assert observations and all(o["entity_id"] == person["id"] for o in observations)
        frames = await client.call_tool("memory_visual_evidence", {"id": person["id"], "max_images": 1})
        assert any(isinstance(b, ImageContent) for b in frames.content)


@pytest.mark.parametrize(
    ("tool", "args", "expected"),
    [
        ("memory_get", {"id": "trc_000000000000"}, "memory_search"),
        ("memory_visual_evidence", {"id": "obs_doesnotexist"}, "memory_search"),
        ("entity_get", {"entity_id": "person_9999"}, "entity_list"),
    ],
)
async def test_unknown_ids_fail_with_a_message_naming_the_tool_that_lists_ids(ingested: Path, tool: str,
                                                                                args: dict[str, str],
                                                                                expected: str) -> None:
    async with Client(create_server(load_manifest(ingested))) as client:
        result = await client.call_tool(tool, args)
    assert result.is_error
    text = result.content[0].text
    assert next(iter(args.values())) in text and expected in text


async def test_bad_search_arguments_say_what_to_change(ingested: Path) -> None:
    async with Client(create_server(load_manifest(ingested))) as client:
        empty = await client.call_tool("memory_search", {"query": "   "})
        swapped = await client.call_tool("memory_search", {"query": "x", "start": 5, "end": 1})
    assert empty.is_error and "query is empty" in empty.content[0].text
    assert swapped.is_error and "swap them" in swapped.content[0].text


async def test_search_says_how_it_read_the_query_and_what_it_could_not_understand(ingested: Path) -> None:
    async with Client(create_server(load_manifest(ingested))) as client:
        unknown = await client.call_tool("memory_search", {"query": "Zorro on stage at 25 pm", "limit": 3})
        named = await client.call_tool("memory_search", {"query": "person_0001 close-up", "limit": 3})
        nobody = await client.call_tool("memory_search", {"query": "Zebulon Quetzal", "limit": 3})
    assert not unknown.is_error
    understood = unknown.structured_content["understood"]
    assert understood["cameras"] == ["stage"]
    notes = " ".join(understood["notes"])
    assert "'Zorro'" in notes and "could not read the time 'at 25 pm'" in notes
    text = unknown.content[0].text
    assert "Understood: camera stage" in text and "Note: no person or object is named 'Zorro'" in text
    hits = named.structured_content["hits"]
    assert named.structured_content["understood"]["entities"] == {"person_0001": ["person_0001"]}
    assert hits and "person_0001" in hits[0]["entity_ids"] and 0 < hits[0]["score"] <= 1
    assert any(m["field"] == "names" and m["entity_id"] == "person_0001" for m in hits[0]["why"])
    assert "(matched: names" in named.content[0].text
    # nothing answers any part of it: no hits scored 0, and a note that says so. The names are far from
    # every text of the clip in meaning (cosine about -0.18, the floor is 0.15), whatever the transcript
    # the CPU's kernels produce ("Zorro Zapatero" sat at 0.175, just above the floor)
    assert nobody.structured_content["hits"] == [], [h["why"] for h in nobody.structured_content["hits"]]
    assert "nothing stored answers any part" in " ".join(nobody.structured_content["understood"]["notes"])
