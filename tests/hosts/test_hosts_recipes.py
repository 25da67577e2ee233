"""The README's recipes, run from this clone the way a user runs them: absolute paths, no package
index release of ``reflectworld-mm``.

Each test reads its recipe out of README.md (so the README cannot drift from what is tested),
puts this clone's paths where the README says ``/path/to/…``, and runs it: Claude Desktop's
config with the venv's script and with ``uvx --from`` the clone, the ``.mcpb`` built by
``manifests/mcpb/build.sh`` and launched as Claude Desktop launches it, and the pinned MCP
Inspector commands against a token-protected HTTP server. uv runs offline on the cache that
``tests/hosts/install.sh`` warmed. (The OpenClaw recipes are in test_hosts_openclaw.py.)
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.hosts.conftest import ROOT, Hosts, free_port, reflectworld, run

README = (ROOT / "README.md").read_text(encoding="utf-8")


def readme_block(after: str, lang: str) -> str:
    """The first ```lang fenced block of README.md after the text ``after``."""
    start = README.index(after)
    match = re.compile(rf"```{lang}\n(.*?)```", re.S).search(README, start)
    assert match, f"no {lang} block after {after!r} in README.md"
    return match.group(1)


def fill(text: str, values: dict[str, str]) -> str:
    """Put real paths where the README has placeholders (longest placeholder first)."""
    for placeholder in sorted(values, key=len, reverse=True):
        text = text.replace(placeholder, values[placeholder])
    assert "/path/to/" not in text, f"unfilled placeholder in {text}"
    return text


def desktop_env(tmp_path: Path, hosts: Hosts, extra: dict[str, str] | None = None) -> dict[str, str]:
    """What a desktop host gives a server: a bare PATH and HOME (plus uv's warmed cache, offline)."""
    home = tmp_path / "desktop-home"
    home.mkdir(exist_ok=True)
    return {"PATH": f"{hosts.uvx.parent}:/usr/bin:/bin", "HOME": str(home), "UV_CACHE_DIR": str(hosts.uv_cache),
            "UV_OFFLINE": "1", **(extra or {})}


def serve_and_search(command: str, args: list[str], env: dict[str, str], log: Path) -> tuple[set[str], list[Any]]:
    """Start the server as a desktop host does (stdio), list its tools and search memory."""

    async def go() -> tuple[set[str], list[Any]]:
        params = StdioServerParameters(command=command, args=args, env=env)
        with anyio.fail_after(300), log.open("w") as errlog:
            async with Client(stdio_client(params, errlog=errlog)) as client:
                names = {t.name for t in (await client.list_tools()).tools}
                found = await client.call_tool("memory_search", {"query": "person", "limit": 2})
        assert not found.is_error, found.content
        return names, found.structured_content["hits"]

    return anyio.run(go)


@pytest.fixture
def paths(hosts: Hosts, ingested: Path) -> dict[str, str]:
    return {"/path/to/reflectworld/.venv/bin/reflectworld": reflectworld(), "/path/to/reflectworld": str(ROOT),
            "/path/to/manifest.yaml": str(ingested), "/path/to/uvx": str(hosts.uvx)}


def test_claude_desktop_config_with_absolute_paths(hosts: Hosts, paths: dict[str, str], tmp_path: Path,
                                                   expected_tools: set[str]) -> None:
    config = json.loads(fill(readme_block("**Claude Desktop (stdio).**", "json"), paths))
    entry = config["mcpServers"]["reflectworld"]
    assert Path(entry["command"]).is_absolute()
    names, hits = serve_and_search(entry["command"], entry["args"], desktop_env(tmp_path, hosts, entry.get("env")),
                                   tmp_path / "stderr.log")
    assert names == expected_tools and hits


def test_claude_desktop_with_uvx_builds_the_clone(hosts: Hosts, paths: dict[str, str], tmp_path: Path,
                                                  expected_tools: set[str]) -> None:
    config = json.loads(fill(readme_block("**Claude Desktop with uv", "json"), paths))
    entry = config["mcpServers"]["reflectworld"]
    assert entry["command"] == str(hosts.uvx) and entry["args"][:2] == ["--from", str(ROOT)]
    names, hits = serve_and_search(entry["command"], entry["args"], desktop_env(tmp_path, hosts),
                                   tmp_path / "stderr.log")
    assert names == expected_tools and hits


def test_mcpb_built_from_the_clone_carries_the_wheel_and_serves(hosts: Hosts, ingested: Path, tmp_path: Path,
                                                                expected_tools: set[str]) -> None:
    command = readme_block("**Claude Desktop extension (.mcpb).**", "bash").split("#")[0].strip()
    assert command == "manifests/mcpb/build.sh"
    out = tmp_path / "reflectworld.mcpb"
    env = {**os.environ, "PATH": hosts.path, "MCPB": str(hosts.mcpb), "UV": str(hosts.uvx.with_name("uv")),
           "UV_CACHE_DIR": str(hosts.uv_cache), "UV_OFFLINE": "1", "HOME": str(tmp_path)}
    built = run([str(ROOT / command), str(out)], env=env, cwd=ROOT, timeout=600)
    assert built.returncode == 0, built.stdout + built.stderr
    ext = tmp_path / "installed"
    with zipfile.ZipFile(out) as bundle:
        names = set(bundle.namelist())
        bundle.extractall(ext)
    wheels = [n for n in names if n.startswith("server/") and n.endswith(".whl")]
    assert names == {"manifest.json", *wheels} and len(wheels) == 1
    checked = run([str(hosts.mcpb), "validate", str(ext / "manifest.json")], env=env, cwd=tmp_path)
    assert checked.returncode == 0 and "validation passes" in checked.stdout, checked.stdout + checked.stderr

    # launch it as Claude Desktop does: ${__dirname} is the unpacked bundle, user_config as the user set it
    manifest = json.loads((ext / "manifest.json").read_text())
    mcp_config = manifest["server"]["mcp_config"]
    values = {"__dirname": str(ext), "user_config.store": yaml.safe_load(ingested.read_text())["memory"]["uri"],
              "user_config.manifest": str(ingested), "user_config.openai_api_key": "",
              "user_config.vlm_api_key": "", "user_config.qa_api_key": ""}

    def substitute(text: str) -> str:
        return re.sub(r"\$\{([\w.]+)\}", lambda m: values[m.group(1)], text)

    args = [substitute(a) for a in mcp_config["args"]]
    assert args[:2] == ["--from", str(ext / wheels[0])]
    server_env = desktop_env(tmp_path, hosts, {k: substitute(v) for k, v in mcp_config["env"].items()})
    names_seen, hits = serve_and_search(str(hosts.uvx) if mcp_config["command"] == "uvx" else mcp_config["command"],
                                        args, server_env, tmp_path / "stderr.log")
    assert names_seen == expected_tools and hits


def test_readme_inspector_commands_run_on_the_pinned_version_with_a_token(
        hosts: Hosts, ingested: Path, tmp_path: Path, expected_tools: set[str]) -> None:
    pinned = re.search(r'INSPECTOR_PKG="(@modelcontextprotocol/inspector@[\d.]+)"',
                       (ROOT / "tests" / "hosts" / "install.sh").read_text())
    assert pinned, "install.sh pins no Inspector"
    installed = json.loads((hosts.inspector.parents[1] / "@modelcontextprotocol" / "inspector" / "package.json")
                           .read_text())
    assert pinned.group(1).endswith("@" + installed["version"])
    node = subprocess.run([str(hosts.node), "--version"], capture_output=True, text=True, check=True).stdout.strip()
    major, minor = (int(x) for x in node.lstrip("v").split(".")[:2])
    assert (major, minor) >= (22, 19), f"the Inspector needs Node 22.19+, the hosts have {node}"

    prefix = f"npx -y {pinned.group(1)} "
    lines = [b.replace("\\\n", " ") for b in (readme_block("the MCP Inspector CLI lists the", "bash"),
                                             readme_block("When a token is set, send it as a header", "bash"))]
    commands = [line for block in lines for line in block.splitlines() if line.strip()]
    assert len(commands) == 3 and all(c.startswith(prefix) for c in commands), commands

    data = yaml.safe_load(ingested.read_text())
    data.setdefault("server", {})["http"] = {"token": "${REFLECTWORLD_TOKEN}"}
    manifest = tmp_path / "token.yaml"
    manifest.write_text(yaml.safe_dump(data))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env.update(PATH=hosts.path, HOME=str(tmp_path), REFLECTWORLD_TOKEN="t0ken-from-readme")
    from tests.plugin.test_transports import http_server

    with http_server(manifest, port, env, tmp_path / "serve.log"):
        results = []
        for line in commands:
            argv = shlex.split(line.replace("$REFLECTWORLD_TOKEN", env["REFLECTWORLD_TOKEN"])
                               .replace("127.0.0.1:8765", f"127.0.0.1:{port}"))
            argv = [str(hosts.inspector), *argv[3:]]  # `npx -y <pinned>` → the installed pinned Inspector
            if "--header" not in argv:  # the token server needs the header the README adds for this case
                argv += ["--header", f"Authorization: Bearer {env['REFLECTWORLD_TOKEN']}"]
            done = run(argv, env=env, cwd=tmp_path)
            assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
            results.append(json.loads(done.stdout))
        refused = run([str(hosts.inspector), "--cli", f"http://127.0.0.1:{port}/mcp", "--method", "tools/list"],
                      env=env, cwd=tmp_path)
        assert refused.returncode != 0
    assert {t["name"] for t in results[0]["tools"]} == expected_tools == {t["name"] for t in results[2]["tools"]}
    assert results[1]["isError"] is False and results[1]["structuredContent"]["hits"]
