"""Every host manifest in manifests/ is well formed, and its launch command is one our CLI runs.

Required fields and types are encoded here (OpenClaw plugin, Claude Desktop config, MCPB
desktop extension v0.3, MCP registry server.json). The MCPB launch line is started for real
through the Python SDK client over stdio, with ``uvx --from <bundled wheel>`` replaced by the
installed ``reflectworld`` script (tests/hosts/test_hosts_recipes.py builds and runs the real bundle) and the user_config placeholders filled in as Claude Desktop
would. The real hosts themselves are driven in tests/hosts/.
"""

from __future__ import annotations

import json
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from plugin.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
CORE_TOOLS = ("memory_search", "memory_get", "memory_visual_evidence", "entity_list", "entity_get")


def load(rel: str) -> Any:
    return json.loads((MANIFESTS / rel).read_text(encoding="utf-8"))


def typed(data: dict[str, Any], spec: dict[str, type | tuple[type, ...]]) -> None:
    """Each key in ``spec`` is present with the given type."""
    for key, kind in spec.items():
        assert key in data, f"missing {key!r}"
        assert isinstance(data[key], kind), f"{key!r} should be {kind}, got {type(data[key]).__name__}"


def serve_args(args: list[str]) -> list[str]:
    """The arguments after the ``reflectworld`` program name, checked against our CLI parser."""
    rest = args[args.index("reflectworld") + 1:] if "reflectworld" in args else args
    parsed = build_parser().parse_args(rest)
    assert parsed.command == "serve"
    return rest


@pytest.mark.parametrize("variant", ["", "http-variant/"])
def test_openclaw_plugin_has_what_plugins_install_requires(variant: str) -> None:
    plugin = load(f"openclaw/{variant}openclaw.plugin.json")
    typed(plugin, {"id": str, "name": str, "description": str, "version": str, "configSchema": dict,
                   "mcpServers": dict})
    assert re.fullmatch(r"[a-z][a-z0-9-]*", plugin["id"])
    assert plugin["configSchema"]["type"] == "object"
    [(name, server)] = plugin["mcpServers"].items()
    assert name == "reflectworld"  # OpenClaw shows the tools as reflectworld__<tool>
    if variant:
        assert server["transport"] == "streamable-http" and server["url"] == "http://127.0.0.1:8765/mcp"
    else:
        assert server["transport"] == "stdio" and server["command"] == "reflectworld"
        serve_args(server["args"])
    assert isinstance(server["connectionTimeoutMs"], int) and server["connectionTimeoutMs"] >= 30_000
    package = load(f"openclaw/{variant}package.json")
    typed(package, {"name": str, "version": str, "type": str, "openclaw": dict})
    assert package["name"] == plugin["id"] and package["version"] == plugin["version"] == PROJECT["version"]
    [entry] = package["openclaw"]["extensions"]
    source = (MANIFESTS / "openclaw" / variant / entry).read_text()
    assert "export default" in source and f'id: "{plugin["id"]}"' in source and "register(" in source


def test_openclaw_skill_teaches_when_to_call_each_tool() -> None:
    plugin = load("openclaw/openclaw.plugin.json")
    [skills] = plugin["skills"]
    text = (MANIFESTS / "openclaw" / skills / "reflectworld" / "SKILL.md").read_text(encoding="utf-8")
    front = yaml.safe_load(text.split("---")[1])
    assert front["name"] == "reflectworld" and len(front["description"]) > 40
    for tool in (*CORE_TOOLS, "memory_ask"):
        assert f"reflectworld__{tool}" in text, tool


def test_claude_desktop_snippet_runs_our_stdio_server() -> None:
    config = load("claude_desktop_config.json")
    server = config["mcpServers"]["reflectworld"]
    typed(server, {"command": str, "args": list, "env": dict})
    assert server["command"] == "reflectworld" and serve_args(server["args"]) == ["serve"]


def test_mcpb_manifest_has_the_v03_fields_and_user_config() -> None:
    manifest = load("mcpb/manifest.json")
    typed(manifest, {"manifest_version": str, "name": str, "version": str, "description": str, "author": dict,
                     "server": dict, "user_config": dict})
    assert manifest["manifest_version"] == "0.3" and manifest["version"] == PROJECT["version"]
    server = manifest["server"]
    assert server["type"] in {"python", "node", "binary"} and isinstance(server["entry_point"], str)
    typed(server["mcp_config"], {"command": str, "args": list, "env": dict})
    config = manifest["user_config"]
    for key, option in config.items():
        typed(option, {"type": str, "title": str, "description": str})
        assert option["type"] in {"string", "number", "boolean", "directory", "file"}, key
    assert config["store"]["type"] == "directory"
    keys = [k for k in config if k.endswith("_api_key")]
    assert keys and all(config[k]["sensitive"] is True for k in keys)
    args = server["mcp_config"]["args"]
    wheel = f"reflectworld_mm-{PROJECT['version']}-py3-none-any.whl"
    assert args[:2] == ["--from", f"${{__dirname}}/server/{wheel}"], "the bundle runs its own wheel (build.sh)"
    used = set(re.findall(r"\$\{user_config\.(\w+)\}", json.dumps(server["mcp_config"])))
    assert used == set(config), "every user_config key is used by the launch line, and only those"
    assert [t["name"] for t in manifest["tools"]] == list(CORE_TOOLS)


def test_registry_server_json_points_at_our_pypi_package() -> None:
    server = load("server.json")
    typed(server, {"$schema": str, "name": str, "description": str, "version": str, "packages": list})
    assert re.fullmatch(r"[a-zA-Z0-9.-]+/[a-zA-Z0-9._-]+", server["name"])
    assert len(server["description"]) <= 100 and server["version"] == PROJECT["version"]
    [package] = server["packages"]
    assert package["registryType"] == "pypi" and package["identifier"] == PROJECT["name"]
    assert package["version"] == PROJECT["version"] and package["transport"] == {"type": "stdio"}
    args = [a["value"] for a in package["packageArguments"] if a["type"] == "positional"]
    named = [a["name"] for a in package["packageArguments"] if a["type"] == "named"]
    parser_args = [*args, *(x for n in named for x in (n, "x"))]
    assert build_parser().parse_args(parser_args).command == "serve"
    assert all(v["isSecret"] for v in package["environmentVariables"] if v["name"].endswith("_API_KEY"))


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_mcpb_launch_line_starts_and_serves_the_memory(ingested: Path, tmp_path: Path,
                                                             clean_env: dict[str, str]) -> None:
    manifest = load("mcpb/manifest.json")
    mcp_config = manifest["server"]["mcp_config"]
    values = {"store": str(yaml.safe_load(ingested.read_text())["memory"]["uri"]), "manifest": str(ingested),
              "openai_api_key": "", "vlm_api_key": "", "qa_api_key": ""}

    def fill(text: str) -> str:
        return re.sub(r"\$\{user_config\.(\w+)\}", lambda m: values[m.group(1)], text)

    args = [fill(a) for a in serve_args(mcp_config["args"])]
    env = {**clean_env, **{k: fill(v) for k, v in mcp_config["env"].items()}}
    script = Path(sys.executable).with_name("reflectworld")
    params = StdioServerParameters(command=str(script), args=args, env=env)
    with anyio.fail_after(120), (tmp_path / "stderr.log").open("w") as errlog:
        async with Client(stdio_client(params, errlog=errlog)) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            found = await client.call_tool("memory_search", {"query": "person", "limit": 1})
    assert set(CORE_TOOLS) <= names
    assert not found.is_error and found.structured_content["hits"]
