"""The ``hosts`` test group: real MCP hosts (MCP Inspector CLI, OpenClaw, MCPB CLI) drive our server.

The hosts are npm packages that ``tests/hosts/install.sh`` installs into ``.hosts/`` (git-ignored;
``$REFLECTWORLD_HOSTS_DIR`` overrides it), Node 24 included. ``.ci/run`` installs them and runs
``pytest -m hosts``. When they are not installed the tests skip and say how to install them;
with ``REFLECTWORLD_HOSTS_REQUIRED=1`` (set by ``.ci/run``) a missing host fails instead.
No model and no network are needed: every server runs on 127.0.0.1.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INSTALL_HINT = "run tests/hosts/install.sh (installs Node 24, the MCP Inspector, OpenClaw, mcpb and uv into .hosts/)"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "hosts: drives real MCP hosts installed by tests/hosts/install.sh")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.hosts)


@dataclass(frozen=True)
class Hosts:
    """Paths of the installed hosts."""

    root: Path
    node: Path
    inspector: Path
    openclaw: Path
    openclaw_dist: Path
    mcpb: Path
    uvx: Path

    @property
    def uv_cache(self) -> Path:
        """uv's cache, warmed by install.sh with this checkout's dependencies."""
        return self.root / "uv-cache"

    @property
    def path(self) -> str:
        """``PATH`` with Node 24 and our venv's ``reflectworld`` first."""
        return os.pathsep.join([str(self.node.parent), str(Path(sys.executable).parent), os.environ.get("PATH", "")])


@pytest.fixture(scope="session")
def hosts() -> Hosts:
    root = Path(os.environ.get("REFLECTWORLD_HOSTS_DIR") or ROOT / ".hosts")
    nodes = sorted(root.glob("node24/node_modules/node-linux-*/bin/node"))
    npm = root / "npm" / "node_modules"
    found = Hosts(root=root, node=nodes[0] if nodes else root / "node24/missing/node",
                  inspector=npm / ".bin" / "mcp-inspector", openclaw=npm / ".bin" / "openclaw",
                  openclaw_dist=npm / "openclaw" / "dist", mcpb=npm / ".bin" / "mcpb", uvx=root / "uv" / "bin" / "uvx")
    missing = [p for p in (found.node, found.inspector, found.openclaw, found.openclaw_dist, found.mcpb, found.uvx)
               if not p.exists()]
    if missing:
        message = f"MCP hosts not installed ({', '.join(str(p) for p in missing)}); {INSTALL_HINT}"
        if os.environ.get("REFLECTWORLD_HOSTS_REQUIRED") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def reflectworld() -> str:
    """Our installed console script (hosts launch it like a user's config would)."""
    script = Path(sys.executable).with_name("reflectworld")
    assert script.exists(), "the reflectworld console script is missing; pip install -e . first"
    return str(script)


@pytest.fixture(scope="session")
def http_url(ingested: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``reflectworld serve --http`` on the ingested store, for the whole session."""
    port = free_port()
    log = tmp_path_factory.mktemp("http") / "serve.log"
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    with log.open("wb") as err:
        proc = subprocess.Popen([reflectworld(), "serve", "--manifest", str(ingested), "--http", f"127.0.0.1:{port}"],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=env)
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"reflectworld serve --http exited early: {log.read_text()}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if time.monotonic() > deadline:
                raise AssertionError(f"reflectworld serve --http did not listen within 120 s: {log.read_text()}")
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def run(cmd: list[str], *, env: dict[str, str], cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """Run a host command; the assertion message carries its output when it fails."""
    return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, check=False)


@pytest.fixture(scope="session")
def expected_tools(ingested: Path) -> set[str]:
    """The tool names our server lists for the ingested manifest (through the in-memory SDK client)."""
    import anyio
    from mcp import Client

    from plugin.manifest import load_manifest
    from plugin.server import create_server

    async def names() -> set[str]:
        async with Client(create_server(load_manifest(ingested))) as client:
            return {t.name for t in (await client.list_tools()).tools}

    return anyio.run(names)


@pytest.fixture(scope="session")
def trace_id(ingested: Path) -> str:
    """The id of a trace with key frames in the ingested store."""
    from plugin.manifest import load_manifest
    from plugin.engine import open_store

    store = open_store(load_manifest(ingested))
    try:
        hits = [h for h in store.search("person", level="traces", limit=5) if h.keyframe_ids]
    finally:
        store.close()
    assert hits, "the ingested clip has no trace with key frames"
    return hits[0].id
