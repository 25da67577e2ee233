"""Streamable HTTP transport with a loopback guard and an optional bearer token.

Binding anything but a loopback address exposes memory to the network, so it is refused unless a
bearer token is configured; when a token is configured every request must carry it
(``Authorization: Bearer <token>``), compared in constant time.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
from typing import Any

from mcp.server.mcpserver import MCPServer
from starlette.types import ASGIApp, Receive, Scope, Send

from plugin.errors import ServeError

__all__ = ["BearerAuth", "build_http_app", "is_loopback", "parse_bind", "serve_http"]

logger = logging.getLogger(__name__)


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost``."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def parse_bind(value: str, default_port: int) -> tuple[str, int]:
    """Parse ``HOST:PORT``, ``:PORT``, ``PORT`` or ``HOST`` (``[::1]:8765`` for IPv6)."""
    host, port = "127.0.0.1", default_port
    text = value.strip()
    if text.startswith("["):
        end = text.find("]")
        host, rest = text[1:end], text[end + 1 :]
        if rest.startswith(":"):
            port = int(rest[1:])
    elif text.isdigit():
        port = int(text)
    elif ":" in text:
        h, p = text.rsplit(":", 1)
        host, port = h or host, int(p)
    elif text:
        host = text
    if not 0 < port < 65536:
        raise ServeError(f"port {port} is out of range; use 1–65535")
    return host, port


class BearerAuth:
    """ASGI middleware requiring ``Authorization: Bearer <token>`` on every HTTP request."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            supplied = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(supplied, self._expected):
                body = json.dumps({"error": "unauthorized: send 'Authorization: Bearer <token>' "
                                            "with the token configured in server.http.token"}).encode()
                await send({"type": "http.response.start", "status": 401, "headers": [
                    (b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def build_http_app(server: MCPServer[Any], host: str, token: str | None) -> ASGIApp:
    """The server's streamable HTTP app (path ``/mcp``), behind the token when one is set.

    Raises:
        ServeError: ``host`` is not loopback and no token is configured.
    """
    if not is_loopback(host) and not token:
        raise ServeError(
            f"refusing to bind {host}: only loopback addresses may be served without a token; "
            "set server.http.token (e.g. token: ${REFLECTWORLD_TOKEN}) or bind 127.0.0.1"
        )
    app: ASGIApp = server.streamable_http_app(host=host)
    return BearerAuth(app, token) if token else app


async def serve_http(server: MCPServer[Any], host: str, port: int, token: str | None) -> None:
    """Serve ``server`` over streamable HTTP at ``http://HOST:PORT/mcp`` until cancelled."""
    import uvicorn

    app = build_http_app(server, host, token)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    logger.info("serving MCP over streamable HTTP at http://%s:%d/mcp%s", host, port,
                " (bearer token required)" if token else "")
    await uvicorn.Server(config).serve()
