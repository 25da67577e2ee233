"""A reusable fake OpenAI-compatible VLM server on 127.0.0.1 that checks every request.

Only the remote model is fake: the client under test speaks real HTTP to a real uvicorn server.

    from fake_vlm_server import FakeVLMServer, Reply      # from tests/perception/
    # elsewhere: sys.path-independent import `from tests.perception.fake_vlm_server import ...`

    with FakeVLMServer(require_images=True, require_text=["## Working memory"]) as fake:
        fake.enqueue(Reply(status=429), Reply(content="{not json"), Reply(content={"answer": "x"}))
        client = VLMClient(base_url=fake.base_url, model="fake-vlm", api_key="sk-test")
        ...
        assert fake.problems == []                         # every request passed the checks
        fake.requests[-1]["body"]                          # what the client sent

A :class:`Reply` scripts one response (JSON object/array → serialised; ``str`` → sent verbatim, so
malformed JSON can be scripted; ``status`` for 429/5xx; ``delay_s`` to provoke client timeouts).
With an empty script, ``responder(body)`` answers (returns a dict), else a minimal instance of the
requested JSON schema is generated.

Each request is checked: model set, ``response_format`` is a strict ``json_schema`` (unless
``require_schema=False``), at least one JPEG data-URL image part when ``require_images``, every
``require_text`` string present in the prompt text, and the bearer key equal to ``api_key``. A
failing check is recorded in :attr:`problems` and answered with HTTP 400 naming it.
"""

from __future__ import annotations

import base64
import json
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route


@dataclass
class Reply:
    """One scripted response."""

    content: dict[str, Any] | list[Any] | str | None = None
    status: int = 200
    delay_s: float = 0.0
    prompt_tokens: int = 100
    completion_tokens: int = 20
    headers: dict[str, str] = field(default_factory=dict)


def example_for_schema(schema: dict[str, Any], defs: dict[str, Any] | None = None) -> Any:
    """A minimal instance satisfying a (strict) JSON schema."""
    defs = defs if defs is not None else schema.get("$defs", {})
    if "$ref" in schema:
        return example_for_schema(defs[schema["$ref"].split("/")[-1]], defs)
    if "anyOf" in schema:
        return example_for_schema(schema["anyOf"][0], defs)
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    if kind == "object":
        return {k: example_for_schema(v, defs) for k, v in schema.get("properties", {}).items()}
    if kind == "array":
        return []
    return {"string": "example", "integer": 1, "number": 0.5, "boolean": False, "null": None}.get(kind, "x")


def prompt_text(body: dict[str, Any]) -> str:
    """All text parts of all messages, joined."""
    out: list[str] = []
    for msg in body.get("messages", []):
        content = msg.get("content")
        if isinstance(content, str):
            out.append(content)
        elif isinstance(content, list):
            out.extend(p.get("text", "") for p in content if p.get("type") == "text")
    return "\n".join(out)


def image_parts(body: dict[str, Any]) -> list[bytes]:
    """Decoded bytes of every data-URL image part."""
    images: list[bytes] = []
    for msg in body.get("messages", []):
        content = msg.get("content")
        if isinstance(content, list):
            for part in content:
                if part.get("type") == "image_url":
                    url = part["image_url"]["url"]
                    if url.startswith("data:"):
                        images.append(base64.b64decode(url.split(",", 1)[1]))
    return images


class FakeVLMServer:
    """Scripted, request-checking ``/v1/chat/completions`` on an ephemeral loopback port."""

    def __init__(self, *, require_images: bool = False, require_text: Sequence[str] = (),
                 require_schema: bool = True, api_key: str | None = None,
                 responder: Callable[[dict[str, Any]], Any] | None = None) -> None:
        self.require_images = require_images
        self.require_text = list(require_text)
        self.require_schema = require_schema
        self.api_key = api_key
        self.responder = responder
        self.script: deque[Reply] = deque()
        self.requests: list[dict[str, Any]] = []
        self.problems: list[str] = []
        self._lock = threading.Lock()
        self._stopping = False
        self._active = 0
        self.max_active = 0  # most requests the server handled at once
        self.app = Starlette(routes=[Route("/v1/chat/completions", self._chat, methods=["POST"]),
                                     Route("/v1/models", self._models, methods=["GET"])])
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    # ------------------------------------------------------------------ lifecycle

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> FakeVLMServer:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(self.app, log_level="warning", lifespan="off", ws="none", http="h11",
                                timeout_graceful_shutdown=2)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("fake VLM server did not start within 10 s")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self._stopping = True
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> FakeVLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ scripting

    def enqueue(self, *replies: Reply) -> None:
        with self._lock:
            self.script.extend(replies)

    def check(self, body: dict[str, Any], headers: dict[str, str]) -> list[str]:
        """The problems with one request (empty when it passes every check)."""
        problems: list[str] = []
        if not body.get("model"):
            problems.append("no model")
        if self.api_key is not None and headers.get("authorization") != f"Bearer {self.api_key}":
            problems.append("wrong or missing bearer key")
        rf = body.get("response_format") or {}
        if self.require_schema:
            js = rf.get("json_schema") or {}
            if rf.get("type") != "json_schema" or not js.get("strict") or not js.get("schema", {}).get("properties"):
                problems.append("no strict json_schema response_format")
        if self.require_images:
            images = image_parts(body)
            if not images:
                problems.append("no image parts")
            elif not all(im[:2] == b"\xff\xd8" for im in images):
                problems.append("an image part is not a JPEG")
        text = prompt_text(body)
        problems.extend(f"prompt lacks {needle!r}" for needle in self.require_text if needle not in text)
        return problems

    # ------------------------------------------------------------------ endpoints

    async def _chat(self, request: Request) -> Response:
        body = await request.json()
        headers = {k.lower(): v for k, v in request.headers.items()}
        problems = self.check(body, headers)
        with self._lock:
            self.requests.append({"body": body, "headers": {k: v for k, v in headers.items()
                                                            if k != "authorization"}, "problems": problems})
            self.problems.extend(problems)
            reply = self.script.popleft() if self.script else None
        if problems:
            return JSONResponse({"error": {"message": "; ".join(problems), "type": "invalid_request_error"}},
                                status_code=400)
        if reply is None:
            content: Any = (self.responder(body) if self.responder is not None else
                            example_for_schema((body.get("response_format") or {}).get("json_schema", {})
                                               .get("schema", {"type": "object"})))
            reply = Reply(content=content)
        with self._lock:
            self._active += 1
            self.max_active = max(self.max_active, self._active)
        try:
            waited = 0.0
            while waited < reply.delay_s and not self._stopping:
                await anyio.sleep(0.02)
                waited += 0.02
        finally:
            with self._lock:
                self._active -= 1
        if reply.status != 200:
            return JSONResponse({"error": {"message": f"scripted {reply.status}", "type": "server_error"}},
                                status_code=reply.status, headers=reply.headers)
        text = reply.content if isinstance(reply.content, str) or reply.content is None else json.dumps(reply.content)
        return JSONResponse({
            "id": f"chatcmpl-fake-{len(self.requests)}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model", "fake"),
            "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                         "message": {"role": "assistant", "content": text, "refusal": None}}],
            "usage": {"prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens,
                      "total_tokens": reply.prompt_tokens + reply.completion_tokens},
        }, headers=reply.headers)

    async def _models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "fake-vlm", "object": "model", "created": 0,
                                                         "owned_by": "tests"}]})
