"""Capture tools through the real SDK client, and the phone page + upload route over real HTTP."""

from __future__ import annotations

import base64
import socket
from pathlib import Path

import anyio
import av
import cv2
import httpx
import numpy as np
import pytest
import uvicorn
from mcp import Client
from mcp.types import ImageContent, TextContent

from plugin.manifest import load_manifest
from plugin.server import create_server
from tests.conftest import write_manifest
from tests.plugin.stream_media import make_clip

pytestmark = pytest.mark.anyio

CAPTURE_TOOLS = {"capture_start", "capture_stop", "capture_status", "capture_snapshot"}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _light(tmp_path: Path) -> Path:
    return write_manifest(tmp_path, perception={"level": "light"}, access={"roots": [str(tmp_path)]})


async def _until(client: Client, camera: str, state: str) -> dict:  # type: ignore[type-arg]
    while True:
        status = await client.call_tool("capture_status", {"camera_id": camera})
        assert not status.is_error
        capture = status.structured_content["captures"][0]  # type: ignore[index]
        if capture["state"] == state:
            return capture  # type: ignore[no-any-return]
        await anyio.sleep(0.1)


async def test_capture_tools_are_listed_with_annotations_and_the_snapshot_has_no_schema(tmp_path: Path) -> None:
    async with Client(create_server(load_manifest(_light(tmp_path)))) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert CAPTURE_TOOLS <= set(tools)
    assert tools["capture_snapshot"].output_schema is None
    assert tools["capture_status"].annotations.read_only_hint  # type: ignore[union-attr]
    assert not tools["capture_start"].annotations.read_only_hint  # type: ignore[union-attr]


async def test_a_file_capture_runs_to_the_end_and_a_snapshot_is_an_image(tmp_path: Path) -> None:
    clip = make_clip(tmp_path / "porch.mp4", seconds=3.0)
    with anyio.fail_after(90):
        async with Client(create_server(load_manifest(_light(tmp_path)))) as client:
            started = await client.call_tool("capture_start", {"source": str(clip)})
            assert not started.is_error, started.content
            assert started.structured_content["camera_id"] == "porch"  # type: ignore[index]
            shot = await client.call_tool("capture_snapshot", {"camera_id": "porch"})
            assert not shot.is_error
            images = [b for b in shot.content if isinstance(b, ImageContent)]
            assert len(images) == 1
            image = cv2.imdecode(np.frombuffer(base64.b64decode(images[0].data), np.uint8), cv2.IMREAD_COLOR)
            assert image.shape == (120, 160, 3)
            done = await _until(client, "porch", "done")
            assert done["segments_written"] == 3 and done["kind"] == "file"
            found = await client.call_tool("memory_search", {"query": "scene", "camera": "porch"})
            hits = found.structured_content["hits"]  # type: ignore[index]
            assert len(hits) + sum(len(h["collapsed"]) for h in hits) == 3  # near-identical neighbours fold
            status = (await client.call_tool("capture_status", {})).structured_content
            gate = status["perception"]["scheduler"]  # type: ignore[index]
            assert gate["analysed"] + gate["skipped"] == 3 and gate["mode"] == "offline_quality"
            assert status["perception"]["vlm_tokens_per_segment"] == 0  # type: ignore[index]
            again = await client.call_tool("capture_start", {"source": str(clip)})
            assert not again.is_error  # a finished capture may be started again: nothing new to write


@pytest.mark.parametrize(("source", "expected"), [
    ("/nowhere/missing.mp4", "the source is not a readable path under the allowed roots"),
    ("ftp://bob:pw@host/a.mp4", "URL scheme 'ftp' is not allowed for tool calls; allowed: rtsp"),
])
async def test_a_bad_source_gives_a_clear_error_without_the_password(tmp_path: Path, source: str,
                                                                    expected: str) -> None:
    with anyio.fail_after(30):
        async with Client(create_server(load_manifest(_light(tmp_path)))) as client:
            result = await client.call_tool("capture_start", {"source": source})
            status = await client.call_tool("capture_status", {})
    text = " ".join(b.text for b in result.content if isinstance(b, TextContent))
    assert result.is_error and expected in text and "pw" not in text
    assert status.structured_content["captures"] == []  # type: ignore[index]


async def test_a_corrupt_file_is_refused_with_the_documented_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"\x00\x00\x00\x18ftypmp42" + b"\x13" * 4000)
    async with Client(create_server(load_manifest(_light(tmp_path)))) as client:
        result = await client.call_tool("capture_start", {"source": str(bad)})
        stop = await client.call_tool("capture_stop", {"camera_id": "bad"})
    text = " ".join(b.text for b in result.content if isinstance(b, TextContent))
    assert result.is_error and "corrupt or not an audio/video format" in text
    assert stop.is_error and "call capture_status" in " ".join(b.text for b in stop.content if isinstance(b, TextContent))


def _webm_bytes(path: Path) -> bytes:
    with av.open(str(path), "w", format="webm") as out:
        vs = out.add_stream("libvpx", rate=10)
        vs.width, vs.height, vs.pix_fmt = 160, 120, "yuv420p"
        rng = np.random.default_rng(7)
        for i in range(40):  # noise: a recording big enough to stream in many chunks, like a real camera
            frame = av.VideoFrame.from_ndarray(rng.integers(0, 255, (120, 160, 3), dtype=np.uint8), format="bgr24")
            frame.pts = i
            for p in vs.encode(frame):
                out.mux(p)
        for p in vs.encode():
            out.mux(p)
    return path.read_bytes()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_the_phone_page_is_served_and_posted_chunks_become_a_capture(tmp_path: Path) -> None:
    server = create_server(load_manifest(_light(tmp_path)))
    port = _free_port()
    config = uvicorn.Config(server.streamable_http_app(host="127.0.0.1"), host="127.0.0.1", port=port,
                            log_level="warning", lifespan="on")
    web = uvicorn.Server(config)
    data = _webm_bytes(tmp_path / "rec.webm")
    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            tg.start_soon(web.serve)
            while not web.started:
                await anyio.sleep(0.05)
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
                page = await http.get("/phone")
                assert page.status_code == 200 and "MediaRecorder" in page.text
                bad = await http.post("/phone/chunk?camera=../etc&session=s1", content=b"x")
                assert bad.status_code == 400
                for i in range(0, len(data), 16384):
                    sent = await http.post("/phone/chunk?camera=pocket&session=s1", content=data[i:i + 16384])
                    assert sent.status_code == 202, sent.text
                async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                    while True:
                        shot = await client.call_tool("capture_snapshot", {"camera_id": "pocket"})
                        if not shot.is_error:
                            break
                        await anyio.sleep(0.1)
                    status = await client.call_tool("capture_status", {"camera_id": "pocket"})
            capture = status.structured_content["captures"][0]  # type: ignore[index]
            assert capture["kind"] == "phone" and capture["live"] and capture["stats"]["frames_in"] > 0
            web.should_exit = True
