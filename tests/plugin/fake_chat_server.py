"""A scripted OpenAI-compatible ``/v1/chat/completions`` on 127.0.0.1 for tool-calling agents.

Only the remote model is fake: the agent under test speaks real HTTP (openai + httpx2) to a real
uvicorn server. A ``responder(n, body)`` gets the request number (0-based) and the JSON body and
returns the assistant message: ``{"content": "..."}`` or ``{"tool_calls": [call("name", {...})]}``.
Every request body is kept in :attr:`requests`.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

Responder = Callable[[int, dict[str, Any]], dict[str, Any]]


def call(name: str, arguments: dict[str, Any] | str, call_id: str | None = None) -> dict[str, Any]:
    """One scripted tool call (``arguments`` as a str is sent verbatim, so it can be malformed)."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id or f"call_{name}_{abs(hash(args)) % 10_000}", "type": "function",
            "function": {"name": name, "arguments": args}}


def tool_replies(body: dict[str, Any]) -> list[str]:
    """The ``tool`` messages of the latest round in ``body``, in order."""
    out: list[str] = []
    for message in reversed(body["messages"]):
        if message["role"] == "tool":
            out.insert(0, message["content"])
        elif out:
            break
    return out


class FakeChatServer:
    """Scripted chat completions on an ephemeral loopback port."""

    def __init__(self, responder: Responder) -> None:
        self.responder = responder
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self.app = Starlette(routes=[Route("/v1/chat/completions", self._chat, methods=["POST"])])
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> FakeChatServer:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(self.app, log_level="warning", lifespan="off", ws="none", http="h11")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("fake chat server did not start within 10 s")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None and self._thread is not None
        self._server.should_exit = True
        self._thread.join(timeout=10)

    async def _chat(self, request: Request) -> JSONResponse:
        body = await request.json()
        with self._lock:
            n = len(self.requests)
            self.requests.append(body)
        try:
            message = self.responder(n, body)
        except Exception as exc:  # a broken script must fail the test loudly, not hang the agent
            return JSONResponse({"error": {"message": f"responder failed: {exc!r}"}}, status_code=400)
        calls = message.get("tool_calls")
        return JSONResponse({
            "id": f"chatcmpl-{n}", "object": "chat.completion", "created": 0, "model": body.get("model", "fake"),
            "choices": [{"index": 0, "logprobs": None, "finish_reason": "tool_calls" if calls else "stop",
                         "message": {"role": "assistant", "content": message.get("content"), "refusal": None,
                                     **({"tool_calls": calls} if calls else {})}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        })
