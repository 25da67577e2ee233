"""The tool surface hosts see: names, descriptions, hints, capped pages, and no duplicated text."""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from mcp import Client
from mcp.types import CallToolResult, ImageContent, TextContent

from plugin.manifest import load_manifest
from plugin.server import create_server
from tests.plugin.stream_media import make_clip

pytestmark = pytest.mark.anyio

#: tools that answer with images (and text) only: no output schema, no structured content
IMAGE_TOOLS = {"memory_visual_evidence", "capture_snapshot", "perception_now"}
#: structured tools this file does not call, and where their result text is checked instead
NOT_CALLED = {"memory_ask": "needs a chat model; tests/plugin/test_ask_agent.py checks its summary"}


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


def _every_group_manifest(ingested: Path, tmp_path: Path) -> Path:
    """The ingested manifest on a private copy of its store (tools here write), with ``qa`` pointing at
    a closed loopback port so memory_ask is registered too."""
    data = yaml.safe_load(ingested.read_text())
    store = tmp_path / "lancedb"
    shutil.copytree(Path(data["memory"]["uri"]), store)
    data["memory"]["uri"] = str(store)
    data["perception"] = {"level": "light"}  # the tool surface does not depend on the model level
    data["access"] = {"roots": [str(tmp_path)]}
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    data["qa"] = {"base_url": f"http://127.0.0.1:{port}/v1", "model": "unused"}
    path = tmp_path / "every_group.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


async def _call_every_tool(client: Client) -> dict[str, CallToolResult]:
    """Each tool once with minimal valid arguments; writes go to the private store copy only."""
    results: dict[str, CallToolResult] = {}

    async def call(name: str, args: dict[str, Any]) -> dict[str, Any]:
        results[name] = await client.call_tool(name, args)
        assert not results[name].is_error, (name, results[name].content)
        return results[name].structured_content or {}

    top = (await call("memory_search", {"query": "person", "limit": 3}))["hits"][0]["id"]
    await call("memory_get", {"id": top, "neighbors": 1})
    await call("memory_visual_evidence", {"id": top, "max_images": 1})
    entity = (await call("entity_list", {"limit": 3}))["entities"][0]["id"]
    await call("entity_get", {"entity_id": entity})
    await call("entity_update", {"action": "name", "entity_id": entity, "name": "Stage Person"})
    await call("memory_note", {"text": "Stage Person promised to bring the microphone back."})
    await call("context_set", {"camera_id": "stage", "scene_type": "theatre stage", "routines": ["rehearsal"]})
    await call("context_get", {"camera_id": "stage"})
    rule = (await call("rule_add", {"text": "someone at the microphone", "camera": "stage"}))["id"]
    await call("rule_list", {})
    await call("rule_remove", {"rule_id": rule})
    await call("notify_policy", {"camera": "stage", "min_severity": "warning"})
    await call("notify_poll", {"since": 0, "wait_s": 0})
    await call("perception_steer", {"camera": "stage", "until": "event_end", "rules": ["watch the singer"]})
    await call("perception_now", {"camera": "stage"})
    return results


async def test_every_structured_tool_answers_with_a_summary_not_its_json(ingested: Path, tmp_path: Path) -> None:
    clip = make_clip(tmp_path / "porch.mp4", seconds=2.0)
    with anyio.fail_after(120):
        async with Client(create_server(load_manifest(_every_group_manifest(ingested, tmp_path)))) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            results = await _call_every_tool(client)
            for name, args in [("capture_start", {"source": str(clip)}), ("capture_status", {}),
                               ("capture_stop", {"camera_id": "porch"})]:
                results[name] = await client.call_tool(name, args)
    assert {"memory_ask", "capture_start", "perception_steer", "notify_poll"} <= set(tools)
    for name, tool in tools.items():
        if tool.output_schema is None:
            assert name in IMAGE_TOOLS, f"{name} has no output schema; annotate it Annotated[CallToolResult, Model]"
            if name in results:
                assert results[name].structured_content is None
                assert any(isinstance(b, ImageContent) for b in results[name].content), name
            continue
        assert name not in IMAGE_TOOLS, name
        if name in NOT_CALLED:
            continue
        assert name in results, f"{name} is not called here; add a minimal call (or a NOT_CALLED reason)"
        result = results[name]
        assert not result.is_error, (name, result.content)
        assert result.structured_content is not None, name
        [text] = result.content
        assert isinstance(text, TextContent), name
        dumped = json.dumps(result.structured_content)
        try:
            parsed: Any = json.loads(text.text)
        except json.JSONDecodeError:
            parsed = None
        assert parsed is None, f"{name}: the text is JSON ({text.text[:80]!r}); write a summary instead"
        assert text.text.strip() and dumped not in text.text, name
        if len(dumped) > 400:
            assert len(text.text) < len(dumped) / 2, f"{name}: summary too close to the full JSON"


async def test_the_default_tool_surface_fits_a_hosts_budget_and_groups_are_chosen_in_the_manifest(
        tmp_path: Path) -> None:
    from plugin.manifest import default_manifest
    from tests.conftest import write_manifest

    def size(tools: list) -> int:  # type: ignore[type-arg]
        return sum(len(json.dumps(t.model_dump(mode="json", exclude_none=True, by_alias=True))) for t in tools)

    async with Client(create_server(default_manifest())) as client:
        default = (await client.list_tools()).tools
    async with Client(create_server(load_manifest(write_manifest(tmp_path)))) as client:
        every = (await client.list_tools()).tools
    only = load_manifest(write_manifest(tmp_path / "few", server={"tools": ["memory"]}))
    async with Client(create_server(only)) as client:
        memory = {t.name for t in (await client.list_tools()).tools}
    assert size(default) <= 20_000, f"tools/list with the default manifest is {size(default)} characters"
    names = {t.name for t in default}
    assert {"memory_search", "entity_update", "rule_add", "notify_poll", "capture_start"} <= names
    assert not names & {"perception_steer", "context_set"}  # opt-in groups
    assert {"perception_steer", "context_set"} <= {t.name for t in every} and len(every) == 20
    assert memory == {"memory_search", "memory_get", "memory_visual_evidence", "memory_note"}
    # compacting keeps every input property and description the model needs
    rule_add = next(t for t in default if t.name == "rule_add")
    assert set(rule_add.input_schema["properties"]) == {"text", "camera", "conditions", "severity", "cooldown"}
    assert all("description" in p for p in rule_add.input_schema["properties"].values())
    assert "title" not in json.dumps(rule_add.input_schema)
