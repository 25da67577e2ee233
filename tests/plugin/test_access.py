"""What tool calls may reach: paths under the allowed roots, stream URLs on allowed networks."""

from __future__ import annotations

import ipaddress
import socket
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.types import TextContent

from tools.access import AccessDenied, AccessPolicy
from plugin.manifest import load_manifest
from plugin.server import create_server
from tests.conftest import write_manifest
from tests.plugin.stream_media import make_clip

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _text(result: object) -> str:
    return " ".join(b.text for b in result.content if isinstance(b, TextContent))  # type: ignore[attr-defined]


@pytest.fixture
def roots(tmp_path: Path) -> tuple[Path, Path]:
    allowed, outside = tmp_path / "allowed", tmp_path / "outside"
    allowed.mkdir()
    outside.mkdir()
    return allowed, outside


async def test_paths_outside_the_roots_get_one_text_whether_or_not_they_exist(tmp_path: Path,
                                                                                roots: tuple[Path, Path]) -> None:
    allowed, outside = roots
    secret = make_clip(outside / "private.mp4", seconds=1.0)
    (allowed / "link.mp4").symlink_to(secret)
    (allowed / ".hidden").mkdir()
    make_clip(allowed / ".hidden" / "clip.mp4", seconds=1.0)
    manifest = write_manifest(tmp_path, perception={"level": "light"}, access={"roots": [str(allowed)]})
    with anyio.fail_after(60):
        async with Client(create_server(load_manifest(manifest))) as client:
            async def start(source: str) -> str:
                result = await client.call_tool("capture_start", {"source": source})
                assert result.is_error
                return _text(result)

            async def enrol(path: str) -> str:
                result = await client.call_tool("entity_update", {"action": "name", "name": "x", "image_path": path})
                assert result.is_error
                return _text(result)

            existing, missing = await start(str(secret)), await start(str(outside / "nothing.mp4"))
            dotdot = await start(str(allowed / ".." / "outside" / "private.mp4"))
            via_link, hidden = await start(str(allowed / "link.mp4")), await start(str(allowed / ".hidden" / "clip.mp4"))
            etc, etc_missing = await enrol("/etc/hostname"), await enrol("/etc/no-such-file")
            inside_missing = await start(str(allowed / "nothing.mp4"))
            status = (await client.call_tool("capture_status", {})).structured_content
    assert existing == missing == dotdot == via_link == hidden
    assert "not a readable path under the allowed roots" in existing and str(allowed) in existing
    assert etc == etc_missing and "image_path is not a readable path" in etc
    assert "private" not in existing and "nothing" not in existing
    assert "media file not found" in inside_missing  # inside the roots a plain answer is fine
    assert status["captures"] == []  # type: ignore[index]


async def test_forbidden_stream_hosts_are_refused_alike_without_connecting(tmp_path: Path) -> None:
    manifest = write_manifest(tmp_path, perception={"level": "light"})
    with socket.socket() as listening, socket.socket() as closed:
        listening.bind(("127.0.0.1", 0))
        listening.listen(8)
        listening.setblocking(False)
        closed.bind(("127.0.0.1", 0))  # bound, never listening: connections would be refused
        silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        silent.bind(("127.0.0.1", 0))
        targets = [f"http://127.0.0.1:{listening.getsockname()[1]}/a.ts",
                   f"rtsp://127.0.0.1:{closed.getsockname()[1]}/live",
                   f"rtsp://127.0.0.1:{silent.getsockname()[1]}/live",
                   "http://169.254.169.254/latest/meta-data/", "http://[::ffff:169.254.169.254]/",
                   "http://localhost:1/x", "rtsp://[fe80::1]/x", "http://0.0.0.0:80/"]
        with anyio.fail_after(60):
            async with Client(create_server(load_manifest(manifest))) as client:
                texts = {_text(await client.call_tool("capture_start", {"source": t, "options": {
                    "open_timeout_s": 1e9}})) for t in targets}
        with pytest.raises(BlockingIOError):
            listening.accept()  # nobody connected to the open port
        silent.close()
    assert len(texts) == 1
    text = texts.pop()
    assert "not on a network tool calls may reach" in text and "127.0.0.1" not in text


async def test_an_unsupported_url_scheme_is_refused_with_the_allowed_list(tmp_path: Path) -> None:
    manifest = write_manifest(tmp_path, access={"url_schemes": ["rtsp"]})
    async with Client(create_server(load_manifest(manifest))) as client:
        result = await client.call_tool("capture_start", {"source": "https://cam.example/live.m3u8"})
    assert result.is_error and "allowed: rtsp" in _text(result)


def _resolver(table: dict[str, list[str]]):  # type: ignore[no-untyped-def]
    def resolve(host: str) -> list[str]:
        if host not in table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return table[host]

    return resolve


def test_lan_cameras_are_allowed_and_metadata_or_loopback_names_are_not() -> None:
    names = {"cam.lan": ["192.168.1.20"], "meta.evil": ["169.254.169.254"], "local.evil": ["127.0.0.1"],
             "mixed.evil": ["192.168.1.20", "169.254.169.254"], "public.example": ["93.184.216.34"]}
    policy = AccessPolicy(roots=[], resolve=_resolver(names))
    assert policy.check_url("rtsp://user:pw@cam.lan:554/stream") == "rtsp://user:pw@cam.lan:554/stream"
    assert policy.check_url("https://public.example/live.m3u8")
    assert policy.check_url("rtsp://10.1.2.3/x") and policy.check_url("rtsp://[fd12::5]/x")
    for url in ("http://meta.evil/", "http://local.evil/", "http://mixed.evil/", "http://nowhere.invalid/"):
        with pytest.raises(AccessDenied, match="not on a network"):
            policy.check_url(url)
    closed = AccessPolicy(roots=[], lan=False, public=False, loopback=True,
                          networks=(ipaddress.ip_network("192.168.7.0/24"), ipaddress.ip_network("169.254.0.0/16")),
                          resolve=_resolver(names))
    assert closed.check_url("http://local.evil/") and closed.check_url("rtsp://192.168.7.9/x")
    for url in ("rtsp://192.168.1.20/x", "http://93.184.216.34/", "http://169.254.169.254/"):
        with pytest.raises(AccessDenied):
            closed.check_url(url)


def test_caller_timeouts_are_clamped_and_odd_paths_get_clear_errors(tmp_path: Path) -> None:
    policy = AccessPolicy(roots=[tmp_path], max_timeout_s=20)
    assert policy.clamp_options({"open_timeout_s": 1e12, "read_timeout_s": -5, "mode": "live_latency"}) == {
        "open_timeout_s": 20.0, "read_timeout_s": 0.1, "mode": "live_latency"}
    with pytest.raises(AccessDenied, match="must be a number"):
        policy.clamp_options({"open_timeout_s": "forever"})
    with pytest.raises(AccessDenied, match="too long"):
        policy.check_path(str(tmp_path / ("a" * 5000)))
    with pytest.raises(AccessDenied, match="too long"):
        policy.check_path(str(tmp_path / ("a" * 300) / "b"))
    with pytest.raises(AccessDenied, match="NUL"):
        policy.check_path(str(tmp_path / "a\x00b"))
    assert policy.check_path(str(tmp_path / "sub" / "x.mp4")) == (tmp_path / "sub" / "x.mp4").resolve()
