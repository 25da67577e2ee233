"""One guard in front of every HTTP route: Host, Origin, credentials and a streamed size limit.

Every request to the HTTP app (``/mcp``, ``/phone``, ``/phone/chunk`` and any later route) passes
through :class:`HttpGuard`, in this order:

1. **Host.** On a loopback bind only loopback names are accepted (``127.0.0.1``, ``localhost``,
   ``[::1]``), which defeats DNS rebinding. ``server.http.allowed_hosts`` adds names (e.g. the
   machine's LAN name). On a non-loopback bind without ``allowed_hosts`` any Host is accepted: a
   token is then mandatory, and neither the token nor the pairing cookie travels to a rebound name.
2. **Origin.** A browser request from another origin is refused (``Origin`` must name the
   request's own Host (http or https, so a TLS-terminating proxy works), or be listed in ``server.http.allowed_origins``; ``Origin: null``
   and ``Sec-Fetch-Site: cross-site`` are refused too), so a web page cannot drive the server.
3. **Credentials** (only when ``server.http.token`` is set). ``Authorization: Bearer <token>``
   (the scheme is case-insensitive) on any route, or the cookie a pairing link set: on ``/phone``
   routes a phone session, on the dashboard pages a dashboard session (neither ever opens ``/mcp``).
   Sessions carry their scope, so a phone's cookie gets 403 on every dashboard page and form, under
   whichever cookie name it is sent; a phone link's code does not redeem on the dashboard. A
   pairing link (``/phone?pair=CODE`` or ``/?pair=CODE``) is one-time and expires after ten
   minutes; ``reflectworld serve --http`` logs one of each at start-up and ``POST /phone/pair``
   with the bearer token returns a fresh phone link.
4. **Size.** A declared ``Content-Length`` over ``max_body_bytes`` is refused before any body is
   read; a chunked body is counted as it arrives and the request is cut off with 413 as soon as
   it passes the limit, so the server never buffers more than the limit.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.datastructures import Headers, QueryParams
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["COOKIE", "DASHBOARD", "DASHBOARD_COOKIE", "PHONE", "DEFAULT_MAX_BODY_BYTES", "HttpGuard", "Pairing", "bearer_ok", "pairing_url"]

logger = logging.getLogger(__name__)

COOKIE = "rw_phone"
#: session scopes: the phone routes, the dashboard pages
PHONE, DASHBOARD = "phone", "dashboard"
#: the dashboard's session cookie: opens the dashboard pages, never /mcp or /phone
DASHBOARD_COOKIE = "rw_dashboard"
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
_LOOPBACK_NAMES = {"127.0.0.1", "localhost", "::1"}
_PHONE_PREFIX = "/phone"


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _host_name(value: str) -> str:
    """The host part of a Host header (``[::1]:8765`` → ``::1``, ``a.b:80`` → ``a.b``), lower-cased."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def bearer_ok(header: str | None, token: str) -> bool:
    """True when ``header`` is ``Bearer <token>`` (scheme case-insensitive), compared in constant time."""
    if not header:
        return False
    scheme, _, credentials = header.strip().partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(credentials.strip().encode(), token.encode())


class Pairing:
    """One-time pairing codes that become long-lived browser sessions of one scope each.

    A code is issued for a scope (``"phone"``: the ``/phone`` routes; ``"dashboard"``: the dashboard
    pages) and redeems only there; the session it becomes opens only that scope's routes, whichever
    cookie name it is sent under.

    Args:
        code_ttl_s: how long a code stays redeemable.
        max_sessions: paired browsers remembered (the oldest is forgotten first).
    """

    def __init__(self, code_ttl_s: float = 600.0, max_sessions: int = 64) -> None:
        self.code_ttl_s = code_ttl_s
        self._codes: dict[str, tuple[float, str]] = {}
        self._sessions: OrderedDict[str, str] = OrderedDict()
        self._max_sessions = max_sessions
        self._lock = threading.Lock()

    def issue(self, scope: str = PHONE) -> str:
        """A fresh one-time code for ``scope`` (:data:`PHONE` or :data:`DASHBOARD`)."""
        code = secrets.token_urlsafe(18)
        now = time.monotonic()
        with self._lock:
            self._codes = {c: v for c, v in self._codes.items() if v[0] > now}
            if len(self._codes) >= 32:  # bound unredeemed codes
                self._codes.pop(next(iter(self._codes)))
            self._codes[code] = (now + self.code_ttl_s, scope)
        return code

    def redeem(self, code: str, scope: str = PHONE) -> str | None:
        """The new session secret for ``code`` redeemed on ``scope``'s page, or ``None`` when it is unknown,
        used, expired or issued for another scope (a phone link does not open the dashboard)."""
        with self._lock:
            entry = self._codes.get(code)
            if entry is None or entry[1] != scope:
                return None
            del self._codes[code]
            if entry[0] < time.monotonic():
                return None
            session = secrets.token_urlsafe(32)
            self._sessions[session] = scope
            while len(self._sessions) > self._max_sessions:
                self._sessions.popitem(last=False)
            return session

    def scope_of(self, session: str | None) -> str | None:
        """The scope of a paired browser's cookie, ``None`` when it is not one."""
        if not session:
            return None
        with self._lock:
            found = None
            for s, scope in self._sessions.items():
                if hmac.compare_digest(session.encode(), s.encode()):
                    found = scope
            return found

    def valid(self, session: str | None, scope: str = PHONE) -> bool:
        """Whether ``session`` is a paired browser's cookie for ``scope``."""
        return self.scope_of(session) == scope


class _TooLarge:
    """Per-request state of the streamed size limit."""

    def __init__(self, receive: Receive, send: Send, limit: int) -> None:
        self._receive, self._send, self.limit = receive, send, limit
        self.received = 0
        self.over = False
        self.started = False

    async def receive(self) -> Message:
        if self.over:
            return {"type": "http.disconnect"}
        message = await self._receive()
        if message["type"] == "http.request":
            self.received += len(message.get("body", b""))
            if self.received > self.limit:
                self.over = True  # stop reading: the app sees a disconnect, the client gets 413
                return {"type": "http.disconnect"}
        return message

    async def send(self, message: Message) -> None:
        if self.over and not self.started:
            return  # the app's reply to a cut-off body is replaced by our 413
        if message["type"] == "http.response.start":
            self.started = True
        await self._send(message)


class HttpGuard:
    """ASGI middleware applying the checks of the module docstring to every HTTP request.

    Args:
        app: the wrapped app. bind_host: the address served (decides the default Host policy).
        token: the bearer token, or ``None`` (loopback only; no credentials are checked).
        allowed_hosts, allowed_origins: extra Host names and Origins to accept.
        max_body_bytes: the largest request body any route accepts.
        pairing: pairing codes and sessions for the phone page (created when omitted).
    """

    def __init__(self, app: ASGIApp, *, bind_host: str, token: str | None,
                 allowed_hosts: Iterable[str] = (), allowed_origins: Iterable[str] = (),
                 max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, pairing: Pairing | None = None) -> None:
        self.app = app
        self.token = token or None
        self.max_body_bytes = max_body_bytes
        self.pairing = pairing or Pairing()
        extra = {_host_name(h) for h in allowed_hosts}
        if _is_loopback(bind_host):
            self._hosts: set[str] | None = _LOOPBACK_NAMES | {bind_host.strip("[]").lower()} | extra
        elif extra:
            self._hosts = extra | _LOOPBACK_NAMES | {bind_host.strip("[]").lower()}
        else:
            self._hosts = None  # any Host: the token protects a network bind
        self._origins = {o.rstrip("/").lower() for o in allowed_origins}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        refusal = self._refusal(scope, headers)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        path = scope.get("path", "")
        if path == f"{_PHONE_PREFIX}/pair" and scope.get("method") == "POST":
            await self._issue_link(scope, headers)(scope, receive, send)
            return
        query = QueryParams(scope.get("query_string", b""))
        if path in (_PHONE_PREFIX, "/") and "pair" in query:
            await self._redeem(scope, query["pair"], path)(scope, receive, send)
            return
        allowed = self._authorised(path, headers)
        if allowed is not True:
            await (self._forbidden() if allowed == "forbidden" else self._unauthorised(path))(scope, receive, send)
            return
        declared = headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_body_bytes):
            await _too_large(self.max_body_bytes, close=False)(scope, receive, send)
            return
        limit = _TooLarge(receive, send, self.max_body_bytes)
        try:
            await self.app(scope, limit.receive, limit.send)
        except Exception:
            if not limit.over:
                raise
            logger.debug("request body cut off at %d bytes", limit.received, exc_info=True)
        if limit.over and not limit.started:
            logger.warning("refused a request body over %d bytes on %s", self.max_body_bytes, path)
            await _too_large(self.max_body_bytes)(scope, receive, send)

    # ------------------------------------------------------------------ checks

    def _refusal(self, scope: Scope, headers: Headers) -> Response | None:
        host = headers.get("host")
        if not host:
            return PlainTextResponse("missing Host header", status_code=400)
        if self._hosts is not None and _host_name(host) not in self._hosts:
            logger.warning("refused a request for Host %r (not in the allowed hosts)", host[:100])
            return PlainTextResponse("Host not allowed: add it to server.http.allowed_hosts", status_code=421)
        origin = headers.get("origin")
        if origin is not None:
            if not self._origin_ok(origin, scope, host):
                logger.warning("refused a cross-origin request from %r", origin[:100])
                return PlainTextResponse("cross-origin requests are refused; add the origin to "
                                         "server.http.allowed_origins to allow it", status_code=403)
        elif headers.get("sec-fetch-site", "").lower() == "cross-site":
            return PlainTextResponse("cross-site requests are refused", status_code=403)
        return None

    def _origin_ok(self, origin: str, scope: Scope, host: str) -> bool:
        value = origin.strip().rstrip("/").lower()
        if value in self._origins:
            return True
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            return False
        # Same host and port as the request; the scheme may differ behind a TLS-terminating proxy.
        return parts.netloc == host.strip().lower()

    def _authorised(self, path: str, headers: Headers) -> bool | str:
        """True, False (no credentials: 401) or ``"forbidden"`` (a session of another scope: 403)."""
        if self.token is None:
            return True
        if bearer_ok(headers.get("authorization"), self.token):
            return True
        cookies = headers.get("cookie", "")
        scopes = {self.pairing.scope_of(_cookie(cookies, name)) for name in (COOKIE, DASHBOARD_COOKIE)}
        scopes.discard(None)
        on_phone = path == _PHONE_PREFIX or path.startswith(_PHONE_PREFIX + "/")
        on_mcp = path == "/mcp" or path.startswith("/mcp/")
        needed = PHONE if on_phone else None if on_mcp else DASHBOARD
        if needed is not None and needed in scopes:
            return True
        return "forbidden" if scopes and not on_mcp else False

    # ------------------------------------------------------------------ pairing

    def _issue_link(self, scope: Scope, headers: Headers) -> Response:
        if self.token is None:
            return JSONResponse({"url": f"{_base_url(scope, headers)}{_PHONE_PREFIX}", "expires_in_s": None})
        if not bearer_ok(headers.get("authorization"), self.token):
            return self._unauthorised(_PHONE_PREFIX + "/pair")
        code = self.pairing.issue(PHONE)
        return JSONResponse({"url": f"{_base_url(scope, headers)}{_PHONE_PREFIX}?pair={code}",
                             "expires_in_s": int(self.pairing.code_ttl_s)})

    def _redeem(self, scope: Scope, code: str, path: str = _PHONE_PREFIX) -> Response:
        session = self.pairing.redeem(code, PHONE if path == _PHONE_PREFIX else DASHBOARD)
        if session is None:
            return PlainTextResponse("this pairing link is expired or was already used; get a new one from "
                                     "the `reflectworld serve` log or POST /phone/pair with the token",
                                     status_code=401)
        # a phone link opens the phone page only; a dashboard link (/?pair=…) the dashboard pages only
        name, scope_path = (COOKIE, _PHONE_PREFIX) if path == _PHONE_PREFIX else (DASHBOARD_COOKIE, "/")
        reply = RedirectResponse(path, status_code=303)
        reply.set_cookie(name, session, max_age=30 * 24 * 3600, path=scope_path, httponly=True,
                         samesite="strict", secure=str(scope.get("scheme")) == "https")
        return reply

    def _forbidden(self) -> Response:
        return JSONResponse({"error": "forbidden: this browser's pairing opens another part of the server (a phone "
                             "link opens only the phone page; a dashboard link only the dashboard)"}, status_code=403)

    def _unauthorised(self, path: str) -> Response:
        if path == _PHONE_PREFIX or path.startswith(_PHONE_PREFIX + "/"):
            text = ("unauthorized: open the phone pairing link that `reflectworld serve --http` logs "
                    "(or POST /phone/pair with the bearer token for a new one)")
        else:
            text = "unauthorized: send 'Authorization: Bearer <token>' with the token configured in server.http.token"
        return JSONResponse({"error": text}, status_code=401, headers={"www-authenticate": "Bearer"})


def _too_large(limit: int, close: bool = True) -> Response:
    # Connection: close makes the server drop a cut-off connection instead of reading the rest of
    # the body; a refused declared length is answered before the client sends its body.
    return JSONResponse({"error": f"request body too large: at most {limit} bytes"}, status_code=413,
                        headers={"connection": "close"} if close else None)


def _cookie(header: str, name: str) -> str | None:
    for part in header.split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value
    return None


def _base_url(scope: Scope, headers: Headers) -> str:
    return f"{scope.get('scheme', 'http')}://{headers.get('host', '127.0.0.1')}"


def pairing_url(host: str, port: int, code: str, path: str = _PHONE_PREFIX) -> str:
    """The pairing link of ``path`` (the phone page, or ``/`` for the dashboard) for a server bound at
    ``host:port`` (a wildcard bind shows this machine's name)."""
    import socket

    shown = host
    if host in ("0.0.0.0", "::", ""):
        shown = socket.gethostname()
    elif ":" in host:
        shown = f"[{host}]"
    return f"http://{shown}:{port}{path}?pair={code}"

