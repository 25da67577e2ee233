"""The access policy through the paths users take: capture_start over the real MCP client, the phone
upload route over real HTTP. The policy allows 127.0.0.1/32 only; 127.0.0.2 is the forbidden network."""

from __future__ import annotations

import socket
import threading
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import uvicorn
from mcp import Client
from mcp.types import TextContent

from perception.media.sources import VideoIn, make_source
from plugin.manifest import load_manifest
from plugin.server import create_server
from tests.conftest import write_manifest
from tests.network.hop_servers import SilentListener, file_route, redirect_route, serving, text_route
from tests.network.rtsp_fake import FakeRtsp
from tests.plugin.stream_media import make_clip
from tools.access import AccessPolicy

pytestmark = pytest.mark.anyio

ALLOWED, FORBIDDEN = "127.0.0.1", "127.0.0.2"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _manifest(tmp_path: Path, **access: Any) -> Path:
    return write_manifest(tmp_path, perception={"level": "light"}, access={
        "roots": [str(tmp_path / "media")], "networks": [f"{ALLOWED}/32"], "lan": False, "public": False, **access})


def _text(result: Any) -> str:
    return " ".join(b.text for b in result.content if isinstance(b, TextContent))


async def test_capture_start_never_reaches_a_forbidden_host_by_any_route(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    media = tmp_path / "media"
    media.mkdir()
    clip = make_clip(media / "clip.ts", seconds=2.0, fmt="mpegts")
    answers = iter([ALLOWED, FORBIDDEN, FORBIDDEN])
    real_getaddrinfo = socket.getaddrinfo

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:  # the DNS layer answers for rebind.test
        if host == "rebind.test":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (next(answers), 0))]
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    with serving(FORBIDDEN, {"/clip.ts": file_route(clip), "/list.m3u8": text_route("#EXTM3U\nclip.ts\n")}) as bad:
        away = f"http://{FORBIDDEN}:{bad.port}"
        rtsp_moved = FakeRtsp(ALLOWED, redirect=f"rtsp://{FORBIDDEN}:{bad.port}/live")
        (media / "list.m3u8").write_text(f"#EXTM3U\n#EXTINF:2,\n{away}/clip.ts\n#EXT-X-ENDLIST\n")
        (media / "renamed.mp4").write_text(f"#EXTM3U\n#EXTINF:2,\n{away}/clip.ts\n#EXT-X-ENDLIST\n")
        (media / "concat.mkv").write_text(f"ffconcat version 1.0\nfile {away}/clip.ts\n")
        (media / "list.txt").write_text(f"file '{clip}'\n")
        routes = {"/clip.ts": file_route(clip), "/away": redirect_route(f"{away}/clip.ts"),
                  "/mapped": redirect_route(f"http://[::ffff:{FORBIDDEN}]:{bad.port}/clip.ts", 307),
                  "/list.m3u8": text_route(f"#EXTM3U\n#EXTINF:2,\n{away}/clip.ts\n#EXT-X-ENDLIST\n")}
        with serving(ALLOWED, routes) as good:
            base = f"http://{ALLOWED}:{good.port}"
            refused = [f"rtsp://{ALLOWED}:{rtsp_moved.port}/live", f"{base}/away", f"{base}/mapped", f"{base}/list.m3u8", f"{away}/clip.ts",
                       f"http://rebind.test:{bad.port}/clip.ts", str(media / "list.m3u8"), str(media / "renamed.mp4"),
                       str(media / "concat.mkv"), str(media / "list.txt")]
            refused += [f"http://[{a}]:{bad.port}/clip.ts" for a in (
                f"::ffff:{FORBIDDEN}", f"::{FORBIDDEN}", "::ffff:0:7f00:2", "64:ff9b::7f00:2", "2002:7f00:2::",
                "2001:0:0:0:0:0:80ff:fffd", "::1", "64:ff9b::a9fe:a9fe", "2002:a9fe:a9fe::", "fe80::1")]
            options = {"live": False, "open_timeout_s": 5, "read_timeout_s": 5}
            with anyio.fail_after(120):
                async with Client(create_server(load_manifest(_manifest(tmp_path)))) as client:
                    started = await client.call_tool("capture_start", {"source": f"{base}/clip.ts", "camera_id": "ok",
                                                                        "options": options})
                    await client.call_tool("capture_stop", {"camera_id": "ok"})
                    results = {u: await client.call_tool("capture_start", {"source": u, "options": options})
                               for u in refused}
                    status = (await client.call_tool("capture_status", {})).structured_content
        connections = bad.connections
        rtsp_moved.close()
    assert not started.is_error, _text(started)
    assert {u for u, r in results.items() if not r.is_error} == set(), {u: _text(r) for u, r in results.items()}
    assert "not accepted from tool calls" in _text(results[str(media / "list.m3u8")])
    assert connections == 0
    assert [c["camera_id"] for c in status["captures"]] == ["ok"]  # type: ignore[index]


async def test_names_are_limited_in_utf8_bytes_with_a_plain_error(tmp_path: Path) -> None:
    media = tmp_path / "media"
    media.mkdir()
    names = ["é" * 200 + ".mp4", "😀" * 70 + ".mp4", "a" * 300 + ".mp4", "é" * 100 + "/" + "x.mp4"]
    async with Client(create_server(load_manifest(_manifest(tmp_path)))) as client:
        texts = [(await client.call_tool("capture_start", {"source": str(media / n)})) for n in names]
    for result in texts[:3]:
        assert result.is_error and "at most 4096 bytes in UTF-8, 255 per name" in _text(result), _text(result)
    assert texts[3].is_error and "media file not found" in _text(texts[3])  # 200 bytes: a fine name, no such file
    assert not any("Traceback" in _text(r) or "OSError" in _text(r) for r in texts)


def test_a_folder_source_does_not_follow_links_out_of_the_roots(tmp_path: Path) -> None:
    import cv2
    import numpy as np

    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "shots").mkdir(parents=True)
    outside.mkdir()
    cv2.imwrite(str(root / "shots" / "a.jpg"), np.full((48, 64, 3), 90, np.uint8))
    cv2.imwrite(str(outside / "secret.jpg"), np.full((48, 64, 3), 200, np.uint8))
    (root / "shots" / "b.jpg").symlink_to(outside / "secret.jpg")
    (root / "shots" / "c.jpg").symlink_to(root / "shots" / "a.jpg")  # a link that stays inside is fine
    policy = AccessPolicy(roots=[root])
    checked = policy.check_source(str(root / "shots"))
    source = make_source(checked, confine=lambda p: policy.check_path(p, "a file"))
    means = [float(item.frame.mean()) for item in source.open_stream(threading.Event()) if isinstance(item, VideoIn)]
    trusted = make_source(checked)  # a manifest's folder is trusted: its links are followed
    assert len(means) == 2 and max(means) < 150
    assert len([i for i in trusted.open_stream(threading.Event()) if isinstance(i, VideoIn)]) == 3


async def test_forty_concurrent_captures_stay_under_the_cap_and_searches_do_not_wait_behind_them(
        tmp_path: Path) -> None:
    (tmp_path / "media").mkdir()
    silent = SilentListener(ALLOWED)
    url = f"http://{ALLOWED}:{silent.port}/never.ts"
    done: list[str] = []

    async def start(client: Client, i: int) -> None:
        result = await client.call_tool("capture_start", {"source": url, "camera_id": f"c{i}", "options": {
            "open_timeout_s": 30, "read_timeout_s": 30}})
        done.append("refused" if "most this server allows" in _text(result) else "ended")

    try:
        with anyio.fail_after(120):
            async with Client(create_server(load_manifest(_manifest(tmp_path, max_captures=16)))) as client:
                async with anyio.create_task_group() as tg:
                    for i in range(45):
                        tg.start_soon(start, client, i)
                    while len(silent.accepted) < 8 or len(done) < 29:  # the probe pool is full, the rest refused
                        await anyio.sleep(0.05)
                    with anyio.fail_after(10):  # generous: a search takes milliseconds
                        found = await client.call_tool("memory_search", {"query": "anything"})
                    pending_while_searching = 45 - len(done)
                    silent.close()  # the silent host goes away: the waiting checks fail and return
    finally:
        silent.close()
    assert not found.is_error, _text(found)
    assert done.count("refused") == 29 and pending_while_searching == 16
    assert len(silent.accepted) <= 16


async def test_forty_phone_names_never_exceed_the_capture_cap(tmp_path: Path) -> None:
    (tmp_path / "media").mkdir()
    server = create_server(load_manifest(_manifest(tmp_path, max_captures=6)))
    with socket.socket() as s:
        s.bind((ALLOWED, 0))
        port = int(s.getsockname()[1])
    web = uvicorn.Server(uvicorn.Config(server.streamable_http_app(host=ALLOWED), host=ALLOWED, port=port,
                                        log_level="warning", lifespan="on"))
    with anyio.fail_after(90):
        async with anyio.create_task_group() as tg:
            tg.start_soon(web.serve)
            while not web.started:
                await anyio.sleep(0.05)
            async with httpx.AsyncClient(base_url=f"http://{ALLOWED}:{port}") as http:
                codes = [(await http.post(f"/phone/chunk?camera=phone{i}&session=s", content=b"\x1a\x45\xdf\xa3")).status_code
                         for i in range(40)]
                async with Client(f"http://{ALLOWED}:{port}/mcp") as client:
                    status = (await client.call_tool("capture_status", {})).structured_content
                    refused = await client.call_tool("capture_start", {"source": str(tmp_path / "media"), "camera_id": "x"})
            web.should_exit = True
    assert codes.count(202) == 6 and set(codes) == {202, 409}
    assert len(status["captures"]) == 6  # type: ignore[index]
    assert refused.is_error and "most this server allows" in _text(refused)
