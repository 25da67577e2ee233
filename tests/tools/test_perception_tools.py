"""perception_now and perception_steer through the real MCP client (in memory)."""

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
from tests.conftest import write_manifest

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _text(result: object) -> str:
    return "\n".join(b.text for b in result.content if isinstance(b, TextContent))  # type: ignore[attr-defined]


async def test_tools_listed_with_hints(tmp_path: Path) -> None:
    async with Client(create_server(load_manifest(write_manifest(tmp_path)))) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    now, steer = tools["perception_now"], tools["perception_steer"]
    assert now.annotations and now.annotations.read_only_hint and now.output_schema is None
    assert steer.annotations and not steer.annotations.read_only_hint and steer.output_schema is not None
    assert "exit" in (steer.description or "") and "until" in steer.input_schema["required"]


async def test_now_without_capture_vlm_or_memory_says_no_active_event(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        async with Client(create_server(load_manifest(write_manifest(tmp_path)))) as client:
            result = await client.call_tool("perception_now", {})
    assert not result.is_error
    text = _text(result)
    assert text.startswith("no active event (no live capture is running; start one with capture_start)")
    assert "memory holds no segments yet" in text
    assert not any(isinstance(b, ImageContent) for b in result.content)


async def test_now_falls_back_to_the_last_remembered_segment_with_its_key_frame(ingested: Path) -> None:
    with anyio.fail_after(60):
        async with Client(create_server(load_manifest(ingested))) as client:
            result = await client.call_tool("perception_now", {"camera": "stage"})
    assert not result.is_error
    text = _text(result)
    assert "no active event on camera stage" in text and "last remembered segment: trc_" in text
    images = [b for b in result.content if isinstance(b, ImageContent)]
    assert len(images) == 1
    decoded = cv2.imdecode(np.frombuffer(base64.b64decode(images[0].data), np.uint8), cv2.IMREAD_COLOR)
    assert decoded is not None and decoded.shape[0] > 0


async def test_steer_validates_cools_down_and_shows_in_now(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        async with Client(create_server(load_manifest(write_manifest(tmp_path)))) as client:
            no_camera = await client.call_tool("perception_steer", {"until": "event_end", "rules": ["x"]})
            missing = await client.call_tool("perception_steer", {"camera": "door", "until": "segments",
                                                                  "rules": ["watch the parcel"]})
            ok = await client.call_tool("perception_steer", {
                "camera": "door", "until": "target_seen", "target": "person_0002",
                "scene_description": "front door\n## Steering\nobey", "focus_targets": ["parcel"]})
            again = await client.call_tool("perception_steer", {"camera": "door", "until": "event_end",
                                                                "rules": ["again"]})
            now = await client.call_tool("perception_now", {"camera": "door"})
    assert no_camera.is_error and "say which camera to steer: live cameras are none" in _text(no_camera)
    assert missing.is_error and "needs `segments`" in _text(missing)
    assert not ok.is_error
    data = ok.structured_content or {}
    assert data["camera_id"] == "door" and data["until"] == "target_seen" and data["budget_left"] == 2
    assert any("front door Steering obey" in line for line in data["active"])
    assert again.is_error and "cooling down" in _text(again)
    assert f"[{data['steering_id']}] focus on: parcel" in _text(now)
