"""OpenClaw 2026.9.6 (TypeScript SDK 1.x, protocol 2025-11-25) with our server, in a throwaway HOME.

The README recipes, run for real: ``openclaw mcp add`` (stdio and streamable HTTP) then
``openclaw mcp probe`` lists every tool; ``openclaw plugins install manifests/openclaw --force``
(and its HTTP variant) then ``openclaw plugins inspect`` shows the plugin with our MCP server; and
OpenClaw's own agent runtime (no model) materializes the tools of both plugins and calls
``memory_search`` and ``memory_visual_evidence`` through them.

The shipped plugin files are copied and changed only as the README tells a user to: the absolute
path of ``reflectworld`` with ``--manifest`` pointing at the test store, and the HTTP variant's URL port. The
HTTP variant's server is renamed so both plugins can be installed side by side in one HOME.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest

from tests.hosts.conftest import ROOT, Hosts, reflectworld, run

#: tools OpenClaw adds for every server that advertises resources/prompts
UTILITY = {"resources_list", "resources_read", "prompts_list", "prompts_get"}


@pytest.fixture(scope="module")
def openclaw(hosts: Hosts, tmp_path_factory: pytest.TempPathFactory, ingested: Path, http_url: str) -> dict[str, Any]:
    """A configured OpenClaw HOME: two `mcp add` servers and both plugins installed."""
    work = tmp_path_factory.mktemp("openclaw")
    home = work / "home"
    (home / ".openclaw").mkdir(parents=True)
    (home / ".openclaw" / "openclaw.json").write_text(json.dumps({
        "logging": {"file": str(work / "openclaw.log")},
        "update": {"checkOnStart": False},
        "discovery": {"mdns": {"mode": "off"}},
    }))
    base = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env = {**base, "HOME": str(home), "PATH": hosts.path, "NPM_CONFIG_UPDATE_NOTIFIER": "false",
           "OPENCLAW_DISABLE_BONJOUR": "1", "OPENCLAW_NO_AUTO_UPDATE": "1", "DO_NOT_TRACK": "1",
           "OPENCLAW_SKIP_CHANNELS": "1", "OPENCLAW_SKIP_CRON": "1", "OPENCLAW_SKIP_GMAIL_WATCHER": "1",
           "OPENCLAW_SKIP_CANVAS_HOST": "1"}

    def oc(*args: str) -> str:
        done = run([str(hosts.openclaw), *args], env=env, cwd=work, timeout=240)
        assert done.returncode == 0, f"openclaw {' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
        return done.stdout

    # README: openclaw mcp add (stdio, then streamable HTTP); probing happens once, below
    oc("mcp", "add", "rwstdio", "--command", reflectworld(), "--arg", "serve", "--arg", "--manifest",
       "--arg", str(ingested), "--connect-timeout", "120", "--no-probe")
    oc("mcp", "add", "rwhttp", "--url", http_url, "--transport", "streamable-http", "--no-probe")

    plugin = work / "plugin"
    shutil.copytree(ROOT / "manifests" / "openclaw", plugin, ignore=shutil.ignore_patterns("http-variant"))
    def absolute(m: dict[str, Any]) -> None:  # README: the absolute script path and the manifest
        m["mcpServers"]["reflectworld"]["command"] = reflectworld()
        m["mcpServers"]["reflectworld"]["args"].extend(["--manifest", str(ingested)])

    edit(plugin / "openclaw.plugin.json", absolute)
    http_plugin = work / "plugin-http"
    shutil.copytree(ROOT / "manifests" / "openclaw" / "http-variant", http_plugin)

    def point_at_test_server(m: dict[str, Any]) -> None:
        server = m["mcpServers"].pop("reflectworld")
        m["mcpServers"]["reflectworldhttp"] = {**server, "url": http_url}

    edit(http_plugin / "openclaw.plugin.json", point_at_test_server)
    installed = [oc("plugins", "install", str(p), "--force", "--accept-capabilities") for p in (plugin, http_plugin)]
    return {"oc": oc, "env": env, "work": work, "installed": installed}


def edit(path: Path, change: Any) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=2))


def test_mcp_add_then_probe_lists_every_tool_over_stdio_and_http(openclaw: dict[str, Any],
                                                                  expected_tools: set[str]) -> None:
    probe = json.loads(openclaw["oc"]("mcp", "probe", "--json"))
    for name in ("rwstdio", "rwhttp"):
        server = probe["servers"][name]
        assert server["tools"] == len(expected_tools), server
        listed = {t.split("__", 1)[1] for t in probe["tools"] if t.startswith(f"{name}__")}
        assert listed - UTILITY == expected_tools
    assert probe["diagnostics"] == []


def test_installed_plugin_declares_our_server(openclaw: dict[str, Any]) -> None:
    assert all("Installed plugin" in out for out in openclaw["installed"])
    shown = openclaw["oc"]("plugins", "inspect", "reflectworld")
    assert "Status: enabled" in shown and "Format: openclaw" in shown
    assert "MCP servers:\nreflectworld" in shown


def test_openclaw_runtime_calls_our_tools_through_both_plugins(openclaw: dict[str, Any], hosts: Hosts,
                                                              trace_id: str, expected_tools: set[str]) -> None:
    calls = []
    for server in ("reflectworld", "reflectworldhttp"):
        calls += [{"tool": f"{server}__memory_search", "args": {"query": "person", "limit": 2}},
                  {"tool": f"{server}__memory_visual_evidence", "args": {"id": trace_id, "max_images": 1}}]
    script = Path(__file__).with_name("openclaw_runtime_call.mjs")
    done = run([str(hosts.node), str(script), str(hosts.openclaw_dist), json.dumps(calls)],
               env=openclaw["env"], cwd=openclaw["work"], timeout=240)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT_JSON:")]
    assert done.returncode == 0 and lines, done.stdout + done.stderr
    out = json.loads(lines[0].removeprefix("RESULT_JSON:"))
    for server in ("reflectworld", "reflectworldhttp"):
        assert {t.split("__", 1)[1] for t in out["tools"] if t.startswith(f"{server}__")} - UTILITY == expected_tools
    for call in out["calls"]:
        assert "error" not in call, call
        result = call["result"]
        if call["tool"].endswith("memory_search"):
            hits = result["details"]["structuredContent"]["hits"]
            texts = [b["text"] for b in result["content"] if b["type"] == "text"]
            # OpenClaw shows the structured JSON once, then our one-line-per-hit summary (not the JSON again)
            assert hits and sum(t.count(hits[0]["text"][:40]) for t in texts) <= 2
            assert any(t.startswith(f"{len(hits)} traces hit(s)") for t in texts)
        else:
            [image] = [b for b in result["content"] if b["type"] == "image"]
            frame = cv2.imdecode(np.frombuffer(base64.b64decode(image["data"]), np.uint8), cv2.IMREAD_COLOR)
            assert image["mimeType"] == "image/jpeg" and frame is not None and frame.shape[0] > 100
