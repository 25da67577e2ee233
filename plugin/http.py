"""Streamable HTTP transport behind one guard (:mod:`plugin.guard`).

Binding anything but a loopback address exposes memory to the network, so it is refused unless a
bearer token is configured. Every route (``/mcp``, the phone page and its upload) goes through
:class:`plugin.guard.HttpGuard`: Host and Origin checks, the token (or a phone pairing cookie) and a
streamed body-size limit.
"""

from __future__ import annotations

import ipaddress
import logging
from typing import Any

from mcp.server.mcpserver import MCPServer
from starlette.types import ASGIApp

from plugin.errors import ServeError
from plugin.guard import DASHBOARD, DEFAULT_MAX_BODY_BYTES, PHONE, HttpGuard, Pairing, pairing_url

__all__ = ["build_http_app", "is_loopback", "parse_bind", "serve_http"]

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


def build_http_app(server: MCPServer[Any], host: str, token: str | None, *,
                   allowed_hosts: list[str] | None = None, allowed_origins: list[str] | None = None,
                   max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, pairing: Pairing | None = None) -> ASGIApp:
    """The server's streamable HTTP app (path ``/mcp``) behind :class:`plugin.guard.HttpGuard`.

    Raises:
        ServeError: ``host`` is not loopback and no token is configured.
    """
    if not is_loopback(host) and not token:
        raise ServeError(
            f"refusing to bind {host}: only loopback addresses may be served without a token; "
            "set server.http.token (e.g. token: ${REFLECTWORLD_TOKEN}) or bind 127.0.0.1"
        )
    app: ASGIApp = server.streamable_http_app(host=host, max_request_body_size=max_body_bytes)
    return HttpGuard(app, bind_host=host, token=token, allowed_hosts=allowed_hosts or [],
                     allowed_origins=allowed_origins or [], max_body_bytes=max_body_bytes, pairing=pairing)


async def serve_http(server: MCPServer[Any], host: str, port: int, token: str | None, *,
                     allowed_hosts: list[str] | None = None, allowed_origins: list[str] | None = None,
                     max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
    """Serve ``server`` over streamable HTTP at ``http://HOST:PORT/mcp`` until cancelled.

    With a token, logs one-time pairing links for the phone page (``/phone?pair=…``) and the
    dashboard (``/?pair=…``); each becomes a cookie that opens only those pages, never ``/mcp``.
    """
    import uvicorn

    pairing = Pairing()
    app = build_http_app(server, host, token, allowed_hosts=allowed_hosts, allowed_origins=allowed_origins,
                         max_body_bytes=max_body_bytes, pairing=pairing)
    if token:
        logger.warning("phone camera: open %s once on the phone (one-time link, valid %d min)",
                       pairing_url(host, port, pairing.issue(PHONE)), int(pairing.code_ttl_s // 60))
        dashboard = pairing_url(host, port, pairing.issue(DASHBOARD), path="/")
        logger.warning("dashboard: open %s once in your browser (one-time link, valid %d min)",
                       dashboard, int(pairing.code_ttl_s // 60))
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    logger.info("serving MCP over streamable HTTP at http://%s:%d/mcp%s", host, port,
                " (bearer token required)" if token else "")
    await uvicorn.Server(config).serve()
