"""A started server keeps its long-lived objects out of the garbage collector's full passes."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
from mcp import Client

from plugin.manifest import load_manifest
from plugin.server import create_server
from tests.conftest import NO_MODELS, write_manifest

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_a_running_server_freezes_what_it_started_with_and_thaws_it_when_it_stops(tmp_path: Path) -> None:
    manifest = load_manifest(write_manifest(tmp_path, perception=NO_MODELS))
    assert gc.get_freeze_count() == 0
    async with Client(create_server(manifest)) as client:
        found = await client.call_tool("memory_search", {"query": "anything at all"})
        assert not found.is_error
        frozen = gc.get_freeze_count()
        assert frozen > 10_000  # the models, tables and modules a server runs on
        assert len(gc.get_objects()) < frozen / 5  # what a full collection still walks
    assert gc.get_freeze_count() == 0
