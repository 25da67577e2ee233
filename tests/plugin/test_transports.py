"""`reflectworld serve` spawned for real: stdio, streamable HTTP, the token and the loopback guard."""

from __future__ import annotations

import base64
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import httpx2
import pytest
import yaml
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import ImageContent

from plugin.errors import ServeError
from plugin.http import build_http_app, is_loopback, parse_bind
from plugin.manifest import load_manifest
from plugin.server import create_server

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def cli() -> list[str]:
    """The installed console script when present, else the module."""
    script = Path(sys.executable).with_name("reflectworld")
    return [str(script)] if script.exists() else [sys.executable, "-m", "plugin"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def http_server(manifest: Path, port: int, env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as err:
        proc = subprocess.Popen([*cli(), "serve", "--manifest", str(manifest), "--http", f"127.0.0.1:{port}"],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=env)
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"server exited early: {log.read_text()}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if time.monotonic() > deadline:
                raise AssertionError(f"server did not listen within 60 s: {log.read_text()}")
            time.sleep(0.1)
        yield proc
    finally:
        proc.terminate()
        proc.wait(timeout=20)


async def exercise(client: Client) -> None:
    """List tools, search, and decode the image of the top hit."""
    names = {t.name for t in (await client.list_tools()).tools}
    assert {"memory_search", "memory_visual_evidence", "entity_list"} <= names
    hits = (await client.call_tool("memory_search", {"query": "person", "limit": 2})).structured_content["hits"]
    assert hits
    shown = await client.call_tool("memory_visual_evidence", {"id": hits[0]["id"]})
    images = [b for b in shown.content if isinstance(b, ImageContent)]
    assert images and base64.b64decode(images[0].data)[:3] == b"\xff\xd8\xff"  # JPEG magic
    missing = await client.call_tool("memory_get", {"id": "trc_nothere00000"})
    assert missing.is_error and "memory_search" in missing.content[0].text


async def test_stdio_serves_the_memory_tools(ingested: Path, clean_env: dict[str, str], tmp_path: Path) -> None:
    cmd = cli()
    params = StdioServerParameters(command=cmd[0], args=[*cmd[1:], "serve", "--manifest", str(ingested)],
                                   env=clean_env)
    with anyio.fail_after(90), (tmp_path / "stderr.log").open("w") as errlog:
        async with Client(stdio_client(params, errlog=errlog)) as client:
            await exercise(client)


async def test_streamable_http_serves_both_protocol_eras(ingested: Path, clean_env: dict[str, str],
                                                         tmp_path: Path) -> None:
    port = free_port()
    with http_server(ingested, port, clean_env, tmp_path / "http.log"), anyio.fail_after(90):
        url = f"http://127.0.0.1:{port}/mcp"
        async with Client(url) as client:
            assert client.protocol_version == "2026-07-28"
            await exercise(client)
        async with Client(url, mode="legacy") as client:
            assert client.protocol_version == "2025-11-25"
            await exercise(client)


async def test_a_configured_token_is_required_on_http(ingested: Path, clean_env: dict[str, str],
                                                      tmp_path: Path) -> None:
    data = yaml.safe_load(ingested.read_text())
    data["server"] = {"http": {"token": "${RW_TEST_TOKEN}"}}
    manifest = tmp_path / "token.yaml"
    manifest.write_text(yaml.safe_dump(data))
    env = {**clean_env, "RW_TEST_TOKEN": "s3cret-token"}
    port = free_port()
    with http_server(manifest, port, env, tmp_path / "http.log") as _proc, anyio.fail_after(90):
        url = f"http://127.0.0.1:{port}/mcp"
        async with httpx2.AsyncClient() as raw:
            refused = await raw.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
            assert refused.status_code == 401 and "Bearer" in refused.text
        authed = httpx2.AsyncClient(headers={"Authorization": "Bearer s3cret-token"},
                                    timeout=httpx2.Timeout(30, read=60))
        async with authed, Client(streamable_http_client(url, http_client=authed)) as client:
            await exercise(client)
    assert "s3cret-token" not in (tmp_path / "http.log").read_text()


def test_non_loopback_bind_without_token_is_refused(ingested: Path) -> None:
    server = create_server(load_manifest(ingested))
    with pytest.raises(ServeError, match="set server.http.token"):
        build_http_app(server, "0.0.0.0", None)
    assert build_http_app(server, "0.0.0.0", "tok") is not None


def test_bind_strings_parse_and_loopback_is_recognised() -> None:
    assert parse_bind("127.0.0.1:9000", 8765) == ("127.0.0.1", 9000)
    assert parse_bind(":9001", 8765) == ("127.0.0.1", 9001)
    assert parse_bind("[::1]:9002", 8765) == ("::1", 9002)
    assert parse_bind("", 8765) == ("127.0.0.1", 8765)
    assert is_loopback("127.0.0.2") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.4")
