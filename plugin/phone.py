"""A phone (or any browser) as a camera: a small page plus an upload endpoint, on the HTTP transport.

``GET /phone`` serves a page that opens the browser camera and microphone, records them with
``MediaRecorder`` in one-second chunks and ``POST``s each chunk to ``/phone/{camera_id}/chunk``
with a per-recording ``session`` id. The first chunk of a session starts a ``phone:{camera_id}``
capture in the background worker (if none runs) and a new session restarts its decode, because
every recording begins with its own container header (WebM in Chrome/Firefox, MP4 in Safari).

Browsers only allow the camera on a secure origin: ``http://127.0.0.1`` / ``localhost``, or HTTPS
(put the server behind a TLS reverse proxy to use a phone on the network).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response

__all__ = ["PAGE", "register"]

logger = logging.getLogger(__name__)

_CAMERA = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
MAX_CHUNK_BYTES = 8 * 1024 * 1024

PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>ReflectWorld phone camera</title>
<style>body{font-family:sans-serif;margin:1em}video{width:100%;max-width:640px;background:#000}</style></head>
<body><h1>ReflectWorld camera</h1>
<p><label>Camera id <input id="cam" value="phone" pattern="[A-Za-z0-9_.-]+"></label>
<button id="go">Start</button> <button id="halt" disabled>Stop</button></p>
<video id="view" autoplay muted playsinline></video><p id="status">idle</p>
<script>
let rec = null, stream = null, sent = 0;
const $ = (id) => document.getElementById(id);
$("go").onclick = async () => {
  const cam = $("cam").value, session = Math.random().toString(36).slice(2);
  stream = await navigator.mediaDevices.getUserMedia({video: {facingMode: "environment"}, audio: true});
  $("view").srcObject = stream;
  const types = ["video/webm;codecs=vp8,opus", "video/webm", "video/mp4"];
  const mimeType = types.find((t) => MediaRecorder.isTypeSupported(t)) || "";
  rec = new MediaRecorder(stream, mimeType ? {mimeType, videoBitsPerSecond: 1500000} : {});
  rec.ondataavailable = async (ev) => {
    if (!ev.data.size) return;
    const r = await fetch(`/phone/chunk?camera=${encodeURIComponent(cam)}&session=${session}`,
                          {method: "POST", body: ev.data});
    sent += ev.data.size;
    $("status").textContent = `${r.ok ? "streaming" : "server said " + r.status}: ${(sent/1e6).toFixed(1)} MB sent`;
  };
  rec.start(1000);
  $("go").disabled = true; $("halt").disabled = false;
};
$("halt").onclick = () => { rec && rec.stop(); stream && stream.getTracks().forEach((t) => t.stop());
  $("go").disabled = false; $("halt").disabled = true; $("status").textContent = "stopped"; };
</script></body></html>
"""


def register(server: MCPServer[Any], get_worker: Callable[[], Any]) -> None:
    """Add ``GET /phone`` (the page) and ``POST /phone/chunk`` (uploads) to ``server``'s HTTP app.

    ``get_worker()`` returns the running :class:`plugin.worker.Worker` (``None`` before the lifespan).
    """
    sessions: dict[str, str] = {}

    @server.custom_route("/phone", methods=["GET"], include_in_schema=False)
    async def phone_page(_request: Request) -> Response:
        return HTMLResponse(PAGE)

    @server.custom_route("/phone/chunk", methods=["POST"], include_in_schema=False)
    async def phone_chunk(request: Request) -> Response:
        camera = request.query_params.get("camera", "phone")
        session = request.query_params.get("session", "")
        if not _CAMERA.match(camera):
            return JSONResponse({"error": "camera must be 1-64 letters, digits, '_', '.' or '-'"}, status_code=400)
        worker = get_worker()
        if worker is None:
            return JSONResponse({"error": "the server is starting; retry in a moment"}, status_code=503)
        data = await request.body()
        if not data or len(data) > MAX_CHUNK_BYTES:
            return JSONResponse({"error": f"send 1 byte to {MAX_CHUNK_BYTES} bytes per chunk"}, status_code=400)
        try:
            source = await anyio.to_thread.run_sync(worker.phone_source, camera)
        except ValueError as exc:
            return JSONResponse({"error": str(exc)}, status_code=409)
        if sessions.get(camera) not in (None, session):
            logger.info("phone %s started a new recording; restarting its decode", camera)
            source.feed.restart()
        sessions[camera] = session
        if not source.feed.write(data):
            return JSONResponse({"error": "the server is behind; chunk dropped"}, status_code=503)
        return JSONResponse({"camera": camera, "bytes": len(data)}, status_code=202)
