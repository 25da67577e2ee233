"""The MCP Inspector CLI (TypeScript SDK, protocol 2025-11-25 by default) against our server.

Over stdio (the Inspector spawns ``reflectworld serve``) and streamable HTTP it lists the tools,
calls ``memory_search`` and ``memory_visual_evidence``, and the returned JPEG is decoded.
``--protocol-era modern`` exercises the 2026-07-28 protocol from a non-Python client.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest

from tests.hosts.conftest import Hosts, reflectworld, run

#: our stdio server imports LanceDB, PyAV, OpenCV and the MCP SDK before it answers `initialize`:
#: a few seconds on a quiet machine, far more on a loaded CI runner (the Inspector's default is 15 s)
CONNECT_MS = "120000"


@pytest.fixture
def env(hosts: Hosts, tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    base = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    return {**base, "HOME": str(home), "PATH": hosts.path, "NPM_CONFIG_UPDATE_NOTIFIER": "false"}


def inspector(hosts: Hosts, env: dict[str, str], cwd: Path, target: list[str], *args: str) -> dict[str, Any]:
    """Run ``mcp-inspector --cli TARGET ARGS`` and return its JSON output."""
    done = run([str(hosts.inspector), "--cli", *target, "--connect-timeout", CONNECT_MS, *args], env=env, cwd=cwd)
    assert done.returncode == 0, f"inspector {args} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return json.loads(done.stdout)


def check_listing(listing: dict[str, Any], expected: set[str]) -> None:
    tools = {t["name"]: t for t in listing["tools"]}
    assert set(tools) == expected
    for name, tool in tools.items():
        assert len(name) <= 30 and tool.get("description"), name
        hints = tool.get("annotations") or {}
        assert "readOnlyHint" in hints or "destructiveHint" in hints, f"{name} has no safety hints"
    assert "outputSchema" not in tools["memory_visual_evidence"]
    assert tools["memory_search"]["outputSchema"]["properties"]["hits"]["type"] == "array"


def check_search(result: dict[str, Any]) -> str:
    """The search returned hits as structured content and a short summary (not the JSON again)."""
    assert result["isError"] is False
    hits = result["structuredContent"]["hits"]
    assert 1 <= len(hits) <= 2 and result["structuredContent"]["next_offset"] == 2
    [text] = result["content"]
    assert text["type"] == "text" and hits[0]["id"] in text["text"]
    assert not text["text"].lstrip().startswith("{") and len(text["text"]) < len(json.dumps(hits))
    return str(hits[0]["id"])


def check_image(result: dict[str, Any]) -> None:
    assert result["isError"] is False and "structuredContent" not in result
    images = [b for b in result["content"] if b["type"] == "image"]
    assert images and images[0]["mimeType"] == "image/jpeg"
    frame = cv2.imdecode(np.frombuffer(base64.b64decode(images[0]["data"]), np.uint8), cv2.IMREAD_COLOR)
    assert frame is not None and frame.shape[0] > 100 and frame.std() > 5


def test_inspector_over_stdio_lists_searches_and_decodes_a_key_frame(
        hosts: Hosts, env: dict[str, str], tmp_path: Path, ingested: Path, expected_tools: set[str]) -> None:
    target = [reflectworld(), "serve", "--manifest", str(ingested)]
    check_listing(inspector(hosts, env, tmp_path, target, "--method", "tools/list"), expected_tools)
    hit = check_search(inspector(hosts, env, tmp_path, target, "--method", "tools/call", "--tool-name",
                                 "memory_search", "--tool-arg", "query=person", "--tool-arg", "limit=2"))
    check_image(inspector(hosts, env, tmp_path, target, "--method", "tools/call", "--tool-name",
                          "memory_visual_evidence", "--tool-arg", f"id={hit}", "--tool-arg", "max_images=1"))


def test_inspector_over_http_in_both_protocol_eras(hosts: Hosts, env: dict[str, str], tmp_path: Path, http_url: str,
                                                   trace_id: str, expected_tools: set[str]) -> None:
    target = ["--transport", "http", "--server-url", http_url]
    check_listing(inspector(hosts, env, tmp_path, target, "--method", "tools/list"), expected_tools)
    check_search(inspector(hosts, env, tmp_path, target, "--method", "tools/call", "--tool-name", "memory_search",
                           "--tool-arg", "query=person", "--tool-arg", "limit=2"))
    check_image(inspector(hosts, env, tmp_path, target, "--method", "tools/call", "--tool-name",
                          "memory_visual_evidence", "--tool-arg", f"id={trace_id}"))
    modern = inspector(hosts, env, tmp_path, target, "--protocol-era", "modern", "--method", "tools/call",
                       "--tool-name", "memory_search", "--tool-arg", "query=person", "--tool-arg", "limit=2")
    check_search(modern)
    assert modern["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "reflectworld"


def test_inspector_reports_a_tool_error_with_our_hint(hosts: Hosts, env: dict[str, str], tmp_path: Path,
                                                      http_url: str) -> None:
    done = run([str(hosts.inspector), "--cli", "--transport", "http", "--server-url", http_url, "--method",
                "tools/call", "--tool-name", "memory_get", "--tool-arg", "id=trc_nothere00000", "--format", "json",
                "--connect-timeout", CONNECT_MS],
               env=env, cwd=tmp_path)
    assert done.returncode == 5, done.stderr  # the Inspector's exit code for isError results
    assert "memory_search" in done.stdout


def test_mcpb_cli_validates_the_desktop_extension_manifest(hosts: Hosts, env: dict[str, str], tmp_path: Path) -> None:
    manifest = Path(__file__).resolve().parents[2] / "manifests" / "mcpb" / "manifest.json"
    done = run([str(hosts.mcpb), "validate", str(manifest)], env=env, cwd=tmp_path)
    assert done.returncode == 0 and "validation passes" in done.stdout, done.stdout + done.stderr
