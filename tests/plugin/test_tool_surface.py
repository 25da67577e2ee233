"""The tool surface hosts see: names, descriptions, hints, capped pages, and no duplicated text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from mcp import Client
from mcp.types import TextContent

from plugin.manifest import load_manifest
from plugin.server import create_server

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_every_tool_is_named_described_and_hinted_for_hosts(ingested: Path, mode: str) -> None:
    async with Client(create_server(load_manifest(ingested)), mode=mode) as client:
        tools = (await client.list_tools()).tools
    assert tools
    for tool in tools:
        assert len(tool.name) <= 30, tool.name
        assert tool.description and len(tool.description) >= 20, f"{tool.name}: describe it for a model"
        hints = tool.annotations
        assert hints is not None and (hints.read_only_hint is not None or hints.destructive_hint is not None), \
            f"{tool.name} has no read-only/destructive hint (OpenClaw asks approval for every unhinted call)"
        if hints.read_only_hint:
            assert not hints.destructive_hint, tool.name


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_structured_results_carry_a_summary_not_the_json_again(ingested: Path, mode: str) -> None:
    async with Client(create_server(load_manifest(ingested)), mode=mode) as client:
        found = await client.call_tool("memory_search", {"query": "person", "limit": 3})
        top = found.structured_content["hits"][0]["id"]
        results = {
            "memory_search": found,
            "memory_get": await client.call_tool("memory_get", {"id": top, "neighbors": 1}),
            "entity_list": await client.call_tool("entity_list", {"limit": 3}),
        }
        entity = results["entity_list"].structured_content["entities"][0]["id"]
        results["entity_get"] = await client.call_tool("entity_get", {"entity_id": entity})
    for name, result in results.items():
        assert not result.is_error, (name, result.content)
        [text] = result.content
        assert isinstance(text, TextContent)
        dumped = json.dumps(result.structured_content)
        with pytest.raises(json.JSONDecodeError):
            json.loads(text.text)
        assert 0 < len(text.text) < len(dumped) / 2, f"{name}: summary too close to the full JSON"
    assert top in results["memory_search"].content[0].text
    assert entity in results["entity_get"].content[0].text


async def test_pages_are_capped_by_the_manifest_and_say_where_to_continue(ingested: Path, tmp_path: Path) -> None:
    data = yaml.safe_load(ingested.read_text())
    data["server"] = {"max_results": 2}
    path = tmp_path / "capped.yaml"
    path.write_text(yaml.safe_dump(data))
    async with Client(create_server(load_manifest(path))) as client:
        page = (await client.call_tool("memory_search", {"query": "person", "limit": 50})).structured_content
        entities = (await client.call_tool("entity_list", {"limit": 100})).structured_content
    assert len(page["hits"]) == 2 and page["next_offset"] == 2
    assert len(entities["entities"]) == 2 and entities["next_offset"] == 2 and entities["total"] > 2
