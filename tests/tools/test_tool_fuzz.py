"""Every tool, fuzzed from its own input schema through the real MCP client: no crash, hang or leak."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, given, settings

from memory import HashEmbedder, MemoryStore
from plugin.manifest import load_manifest
from plugin.server import create_server
from tests.conftest import write_manifest
from tests.fuzz import Auditor, arguments_for
from tests.memory.memory_fixtures import populate

#: examples per tool; about 20 tools, so a few hundred calls in all
EXAMPLES = 20


@pytest.fixture(scope="module")
def fuzz_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BlockingPortal, Any, list[Any], Path]]:
    root = tmp_path_factory.mktemp("fuzz")
    manifest = write_manifest(root, perception={"level": "light"}, semantic={"enabled": False},
                              access={"roots": [str(root)], "lan": False, "public": False, "devices": False})
    with MemoryStore(str(root / "lancedb"), HashEmbedder(64), user_id="tester") as store:
        populate(store)
    server = create_server(load_manifest(manifest))
    from mcp import Client

    with start_blocking_portal() as portal, portal.wrap_async_context_manager(Client(server)) as client:
        tools = portal.call(client.list_tools).tools
        yield portal, client, tools, root


def test_fuzzed_calls_to_every_tool_never_crash_hang_or_leak(
        fuzz_client: tuple[BlockingPortal, Any, list[Any], Path]) -> None:
    portal, client, tools, root = fuzz_client
    auditor = Auditor(client, roots=(str(root),))
    try:
        for tool in tools:
            @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                      suppress_health_check=list(HealthCheck))
            @given(args=arguments_for(tool))
            def fuzz(args: dict[str, Any]) -> None:
                portal.call(auditor.call, tool.name, args)

            fuzz()
    finally:
        auditor.close()
    assert auditor.calls >= EXAMPLES * len(tools) // 2
    assert auditor.errors > 0  # the hostile half really was refused
    report = "\n".join(f"{f.kind} {f.tool} {f.args!r:.300}: {f.detail}" for f in auditor.findings[:20])
    assert auditor.findings == [], report
