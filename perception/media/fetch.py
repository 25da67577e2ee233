"""Network fetches with every hop checked and pinned: what FFmpeg reads from HTTP(S) and HLS.

FFmpeg is never handed a URL it would resolve and follow by itself. Instead:

* :class:`NetGuard` resolves a host *once*, checks every address with its ``allow`` function (the
  access policy's, built on :func:`perception.media.addresses.classify`) and returns the address to
  connect to (:meth:`NetGuard.pin`). A name that answers differently the next time (DNS rebinding)
  is checked again on the next connection, so a second answer cannot slip through.
* :func:`open_http` connects to that pinned address itself (the ``Host`` header and TLS SNI keep the
  name), and follows redirects one hop at a time, each hop pinned and checked the same way.
* An HLS playlist is read here, not by FFmpeg: every variant playlist and every segment URL is
  fetched through :func:`open_http` (:class:`HlsReader`), and FFmpeg only sees the concatenated
  segment bytes. DASH manifests and encrypted or byte-range HLS are refused.
* The bytes go to PyAV as a file-like object, opened with :data:`MEDIA_OPTIONS`: a whitelist of
  demuxers that never open other resources (no ``hls``, ``dash``, ``concat`` …) and no protocols.
* RTSP stays with FFmpeg, but through :class:`perception.media.rtsp_relay.RtspRelay` on the pinned
  address, which lets no redirect through.

A refused hop raises :class:`FetchRefused` with one text for every refused host, before connecting.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import logging
import re
import secrets
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urljoin, urlsplit, urlunsplit

from perception.errors import MediaError
from perception.media.addresses import Address, parse_address

__all__ = ["FetchRefused", "HlsReader", "HttpBody", "LOCAL_MEDIA_OPTIONS", "MEDIA_OPTIONS", "NetGuard", "Pin", "open_http", "open_media"]

logger = logging.getLogger(__name__)

#: demuxers that read one stream of media and never open another resource (no playlists, manifests, lists)
MEDIA_DEMUXERS = ("mov,matroska,webm,mpegts,mpeg,mpegvideo,flv,live_flv,avi,asf,ogg,wav,w64,flac,mp3,aac,ac3,eac3,"
                  "h264,hevc,m4v,mjpeg,mpjpeg,ivf,obu,nut,dv,mxf,gif,image2,png_pipe,jpeg_pipe,webp_pipe,bmp_pipe,"
                  "tiff_pipe,yuv4mpegpipe,aiff,caf,amr,vc1,av1,vvc,webm")
#: open options for bytes fetched here: media demuxers only, and no protocol of FFmpeg's own
MEDIA_OPTIONS = {"format_whitelist": MEDIA_DEMUXERS, "protocol_whitelist": "none"}
#: open options for local media files: the same demuxers, reading the one file only
LOCAL_MEDIA_OPTIONS = {"format_whitelist": MEDIA_DEMUXERS, "protocol_whitelist": "file"}
MAX_REDIRECTS = 5
MAX_PLAYLIST_BYTES = 1 << 20
_HLS_TYPES = ("application/vnd.apple.mpegurl", "application/x-mpegurl", "audio/mpegurl", "audio/x-mpegurl")
_DASH_TYPES = ("application/dash+xml",)
_DNS_TIMEOUT_S = 3.0
Resolver = Callable[[str], list[str]]
_CHALLENGE_FIELD = re.compile(r'(\w+)=(?:"([^"]*)"|([^\s,]+))')


class FetchRefused(MediaError):
    """A hop (the first URL, a redirect, a playlist entry) names a host or scheme the guard refuses."""


def _getaddrinfo(host: str) -> list[str]:
    return sorted({info[4][0] for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)})


def _resolve_bounded(resolve: Resolver, host: str, timeout_s: float) -> list[str] | None:
    """``resolve(host)`` on its own daemon thread, ``None`` when it fails or takes longer than ``timeout_s``."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["found"] = resolve(host)
        except Exception as exc:  # any failure of the resolver means: the name does not resolve
            box["error"] = exc

    thread = threading.Thread(target=run, name="resolve", daemon=True)
    thread.start()
    thread.join(timeout_s)
    return box.get("found")


@dataclass(frozen=True)
class Pin:
    """A URL and the one address its connection goes to."""

    url: str
    scheme: str
    host: str
    port: int
    address: Address


@dataclass
class NetGuard:
    """Which hosts and schemes a source's fetches may reach (see the module docstring).

    Args:
        allow: whether a connection may go to an address (every address of a name must pass).
        schemes: URL schemes a hop may use.
        resolve: host name → address strings (``socket.getaddrinfo`` by default).
        refused: the one text every refused host gets.
    """

    allow: Callable[[Address], bool] = lambda _a: True
    schemes: tuple[str, ...] = ("http", "https", "rtsp", "rtsps")
    resolve: Resolver | None = None
    refused: str = "the stream's host is not on a network this source may reach"
    max_redirects: int = MAX_REDIRECTS
    #: whether HLS playlists may be followed (segment by segment, each checked)
    playlists: bool = True
    #: verify HTTPS certificates (a tool call's guard does; a manifest camera may be self-signed, as FFmpeg allowed)
    tls_verify: bool = False
    _ports: dict[str, int] = field(default_factory=lambda: {"http": 80, "https": 443, "rtsp": 554, "rtsps": 322})

    def pin(self, url: str) -> Pin:
        """Resolve ``url``'s host once and check its scheme and every address.

        Raises:
            FetchRefused: the scheme or an address is not allowed, or the name does not resolve.
        """
        try:
            parts = urlsplit(url)
            host, port = parts.hostname, parts.port
        except ValueError:
            raise FetchRefused("the URL is malformed; pass scheme://host[:port]/path", _safe(url)) from None
        scheme = parts.scheme.lower()
        if scheme not in self.schemes:
            raise FetchRefused(f"URL scheme {scheme!r} is not allowed here; allowed: {', '.join(self.schemes)}",
                               _safe(url))
        if not host:
            raise FetchRefused("the URL has no host; pass scheme://host[:port]/path", _safe(url))
        try:
            addresses = [parse_address(host)]
        except ValueError:
            found = None if len(host) > 253 else _resolve_bounded(self.resolve or _getaddrinfo, host, _DNS_TIMEOUT_S)
            try:
                addresses = [parse_address(str(a)) for a in (found or [])]
            except ValueError:
                addresses = []
        if not addresses or not all(self.allow(a) for a in addresses):
            raise FetchRefused(self.refused, _safe(url))
        return Pin(url, scheme, host, port or self._ports.get(scheme, 80), addresses[0])

    def pinned_url(self, url: str) -> str:
        """``url`` with its host replaced by the checked address (for FFmpeg's own RTSP client)."""
        pin = self.pin(url)
        parts = urlsplit(url)
        literal = f"[{pin.address}]" if pin.address.version == 6 else str(pin.address)
        userinfo = parts.netloc.rpartition("@")[0]
        netloc = (userinfo + "@" if userinfo else "") + literal + (f":{parts.port}" if parts.port else "")
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def _safe(url: str) -> str:
    parts = urlsplit(url) if "://" in url else None
    return url if parts is None else urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, "", ""))


class _PinnedHTTP(http.client.HTTPConnection):
    def __init__(self, pin: Pin, open_s: float, read_s: float) -> None:
        super().__init__(pin.host, pin.port, timeout=open_s)
        self._pin, self._read_s = pin, read_s

    def connect(self) -> None:
        self.sock = socket.create_connection((str(self._pin.address), self._pin.port), self.timeout)
        self.sock.settimeout(self._read_s)


class _PinnedHTTPS(http.client.HTTPSConnection):
    def __init__(self, pin: Pin, open_s: float, read_s: float, verify: bool) -> None:
        context = ssl.create_default_context()
        if not verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        super().__init__(pin.host, pin.port, timeout=open_s, context=context)
        self._pin, self._read_s, self._ctx = pin, read_s, context

    def connect(self) -> None:
        sock = socket.create_connection((str(self._pin.address), self._pin.port), self.timeout)
        self.sock = self._ctx.wrap_socket(sock, server_hostname=self._pin.host)
        self.sock.settimeout(self._read_s)


class HttpBody:
    """A response body as a non-seekable file (``read(n)`` returns what has arrived, ``b""`` at its end)."""

    def __init__(self, conn: http.client.HTTPConnection, response: http.client.HTTPResponse, url: str) -> None:
        self._conn, self._response, self.url = conn, response, url
        self.content_type = (response.getheader("content-type") or "").split(";", 1)[0].strip().lower()
        self._head = b""

    def peek(self, n: int) -> bytes:
        """The first ``n`` bytes (or fewer at the end), still returned by the next reads."""
        while len(self._head) < n:
            more = self._response.read1(n - len(self._head))
            if not more:
                break
            self._head += more
        return self._head[:n]

    def read(self, n: int = -1) -> bytes:
        if self._head:
            size = len(self._head) if n is None or n < 0 else n
            out, self._head = self._head[:size], self._head[size:]
            return out
        if n is None or n < 0:
            return self._response.read()
        return self._response.read1(n)

    def read_all(self, limit: int) -> bytes:
        """The whole body; over ``limit`` bytes it is refused."""
        data = self.read(limit + 1)
        while len(data) <= limit:
            more = self.read(limit + 1 - len(data))
            if not more:
                return data
            data += more
        raise MediaError(f"a playlist larger than {limit} bytes was refused", _safe(self.url))

    def close(self) -> None:
        self._response.close()
        self._conn.close()


def _get(pin: Pin, target: str, headers: dict[str, str], guard: NetGuard, open_s: float,
         read_s: float) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    conn: http.client.HTTPConnection = (_PinnedHTTPS(pin, open_s, read_s, guard.tls_verify)
                                        if pin.scheme == "https" else _PinnedHTTP(pin, open_s, read_s))
    try:
        conn.request("GET", target, headers=headers)
        return conn, conn.getresponse()
    except (OSError, http.client.HTTPException) as exc:
        conn.close()
        raise OSError(f"HTTP request failed: {type(exc).__name__}: {exc}") from exc


def _digest(challenge: str, user: str, password: str, target: str) -> str | None:
    """The ``Authorization`` value answering an HTTP Digest ``challenge`` (MD5 or SHA-256, qop auth), or None."""
    fields = {k.lower(): quoted or bare for k, quoted, bare in _CHALLENGE_FIELD.findall(challenge)}
    algorithm = fields.get("algorithm", "MD5").upper()
    digest = {"MD5": hashlib.md5, "SHA-256": hashlib.sha256}.get(algorithm)
    realm, nonce = fields.get("realm"), fields.get("nonce")
    if digest is None or realm is None or nonce is None:
        return None

    def h(text: str) -> str:
        return digest(text.encode()).hexdigest()

    ha1, ha2 = h(f"{user}:{realm}:{password}"), h(f"GET:{target}")
    parts = [f'username="{user}"', f'realm="{realm}"', f'nonce="{nonce}"', f'uri="{target}"', f"algorithm={algorithm}"]
    if "auth" in [q.strip() for q in fields.get("qop", "").split(",")]:
        cnonce = secrets.token_hex(8)
        parts += [f'response="{h(f"{ha1}:{nonce}:00000001:{cnonce}:auth:{ha2}")}"', "qop=auth", "nc=00000001",
                  f'cnonce="{cnonce}"']
    else:
        parts.append(f'response="{h(f"{ha1}:{nonce}:{ha2}")}"')
    if "opaque" in fields:
        parts.append(f'opaque="{fields["opaque"]}"')
    return "Digest " + ", ".join(parts)


def open_http(url: str, guard: NetGuard, open_s: float = 10.0, read_s: float = 10.0) -> HttpBody:
    """GET ``url`` with every hop pinned and checked; redirects are followed here (at most ``max_redirects``).

    Credentials in the first URL (``user:password@``) answer Basic and Digest challenges of that
    origin only; a redirect to another origin does not get them.

    Raises:
        FetchRefused: a hop is not allowed. MediaError: an HTTP error status or too many redirects.
        OSError: the connection failed or timed out.
    """
    origin = urlsplit(url)
    user, password = unquote(origin.username or ""), unquote(origin.password or "")
    for _hop in range(guard.max_redirects + 1):
        pin = guard.pin(url)
        if pin.scheme not in ("http", "https"):
            raise FetchRefused(f"URL scheme {pin.scheme!r} cannot be fetched over HTTP", _safe(url))
        parts = urlsplit(url)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        headers = {"User-Agent": "ReflectWorld", "Accept": "*/*", "Connection": "close"}
        same_origin = (parts.scheme, parts.hostname, parts.port) == (origin.scheme, origin.hostname, origin.port)
        if (user or password) and same_origin:
            headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        conn, response = _get(pin, target, headers, guard, open_s, read_s)
        challenge = response.getheader("www-authenticate") or ""
        if response.status == 401 and "Authorization" in headers and challenge.lower().startswith("digest"):
            answer = _digest(challenge, user, password, target)
            if answer is not None:  # the same pinned address answers the challenge
                response.close()
                conn.close()
                conn, response = _get(pin, target, {**headers, "Authorization": answer}, guard, open_s, read_s)
        if response.status in (301, 302, 303, 307, 308):
            location = response.getheader("location")
            response.close()
            conn.close()
            if not location:
                raise MediaError(f"HTTP {response.status} without a Location", _safe(url))
            url = urljoin(url, location.strip())
            logger.debug("redirected (%d) to %s", response.status, _safe(url))
            continue
        if response.status != 200:
            response.close()
            conn.close()
            raise MediaError(f"HTTP {response.status} {response.reason}", _safe(url))
        return HttpBody(conn, response, url)
    raise MediaError(f"more than {guard.max_redirects} redirects", _safe(url))


def _is_hls(body: HttpBody) -> bool:
    path = urlsplit(body.url).path.lower()
    return (body.content_type in _HLS_TYPES or path.endswith((".m3u8", ".m3u"))
            or body.peek(7) == b"#EXTM3U")


def _is_dash(body: HttpBody) -> bool:
    head = body.peek(64).lstrip()
    return (body.content_type in _DASH_TYPES or urlsplit(body.url).path.lower().endswith(".mpd")
            or head.startswith(b"<?xml") or head.startswith(b"<MPD"))


def open_media(url: str, guard: NetGuard, open_s: float = 10.0, read_s: float = 10.0,
               stop: threading.Event | None = None) -> HttpBody | HlsReader:
    """A file-like object with the media bytes of ``url``: the body itself, or an HLS playlist's segments.

    Raises:
        FetchRefused: a hop is refused, or the URL is a DASH manifest (or HLS where ``guard`` allows no
            playlists). MediaError, OSError: as :func:`open_http`.
    """
    body = open_http(url, guard, open_s, read_s)
    try:
        if _is_hls(body):
            if not guard.playlists:
                raise FetchRefused("HLS playlists are not accepted here; pass the stream itself (MPEG-TS, MP4)",
                                   _safe(url))
            text = body.read_all(MAX_PLAYLIST_BYTES).decode("utf-8", "replace")
            return HlsReader(body.url, text, guard, open_s, read_s, stop)
        if _is_dash(body):
            raise FetchRefused("DASH manifests are not supported; use HLS, MPEG-TS or faststart MP4", _safe(url))
    except BaseException:
        body.close()
        raise
    return body


@dataclass
class _Playlist:
    segments: list[tuple[int, str]]  # (media sequence number, absolute URL)
    ended: bool
    target_s: float
    variants: list[tuple[int, str]]  # (bandwidth, absolute URL) of a master playlist
    init: str | None  # EXT-X-MAP URI


def parse_playlist(url: str, text: str) -> _Playlist:
    """The segments (or variants) of an HLS playlist, with absolute URLs.

    Raises:
        FetchRefused: the playlist is not HLS, or uses encryption or byte ranges.
    """
    try:
        return _parse_playlist(url, text)
    except ValueError:
        raise FetchRefused("the HLS playlist is malformed", _safe(url)) from None


def _parse_playlist(url: str, text: str) -> _Playlist:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines or not lines[0].startswith("#EXTM3U"):
        raise FetchRefused("not an HLS playlist (no #EXTM3U)", _safe(url))
    segments: list[tuple[int, str]] = []
    variants: list[tuple[int, str]] = []
    sequence, target, ended, init, bandwidth = 0, 6.0, False, None, None
    for line in lines[1:]:
        if line.startswith("#EXT-X-MEDIA-SEQUENCE:"):
            sequence = int(line.split(":", 1)[1] or 0)
        elif line.startswith("#EXT-X-TARGETDURATION:"):
            target = max(float(line.split(":", 1)[1] or 6), 0.5)
        elif line.startswith("#EXT-X-ENDLIST"):
            ended = True
        elif line.startswith("#EXT-X-KEY:") and "METHOD=NONE" not in line:
            raise FetchRefused("encrypted HLS is not supported", _safe(url))
        elif line.startswith("#EXT-X-BYTERANGE") or (line.startswith("#EXT-X-MAP:") and "BYTERANGE" in line):
            raise FetchRefused("HLS byte-range segments are not supported", _safe(url))
        elif line.startswith("#EXT-X-MAP:"):
            uri = _attribute(line, "URI")
            init = urljoin(url, uri) if uri else None
        elif line.startswith("#EXT-X-STREAM-INF:"):
            bandwidth = int(_attribute(line, "BANDWIDTH") or 0)
        elif not line.startswith("#"):
            if bandwidth is not None:
                variants.append((bandwidth, urljoin(url, line)))
                bandwidth = None
            else:
                segments.append((sequence + len(segments), urljoin(url, line)))
    return _Playlist(segments, ended, target, variants, init)


def _attribute(line: str, name: str) -> str | None:
    for part in line.split(":", 1)[1].split(","):
        key, _, value = part.partition("=")
        if key.strip().upper() == name:
            return value.strip().strip('"')
    return None


class HlsReader:
    """The segments of an HLS playlist as one byte stream; every playlist and segment fetch is checked.

    A master playlist's highest-bandwidth variant is followed. A live playlist (no ``#EXT-X-ENDLIST``)
    starts three segments from its end and is reloaded every half target duration; no new segment
    for ``max(read_s, 3 × target)`` seconds raises ``TimeoutError``.
    """

    def __init__(self, url: str, text: str, guard: NetGuard, open_s: float, read_s: float,
                 stop: threading.Event | None = None) -> None:
        self.url, self._guard, self._open_s, self._read_s = url, guard, open_s, read_s
        self._stop = stop or threading.Event()
        playlist = parse_playlist(url, text)
        for _ in range(3):
            if not playlist.variants:
                break
            self.url = max(playlist.variants)[1]
            playlist = self._load()
        if playlist.variants:
            raise FetchRefused("HLS playlists nest too deeply", _safe(url))
        self._queue = list(playlist.segments if playlist.ended else playlist.segments[-3:])
        self._init = playlist.init
        self._next_seq = self._queue[0][0] if self._queue else 0
        self._ended, self._target = playlist.ended, playlist.target_s
        self._loaded_at = time.monotonic()
        self._fresh_at = time.monotonic()
        self._body: HttpBody | None = None

    def _load(self) -> _Playlist:
        body = open_http(self.url, self._guard, self._open_s, self._read_s)
        try:
            text = body.read_all(MAX_PLAYLIST_BYTES).decode("utf-8", "replace")
        finally:
            body.close()
        return parse_playlist(self.url, text)

    def _refresh(self) -> None:
        wait = self._loaded_at + self._target / 2 - time.monotonic()
        if wait > 0 and self._stop.wait(wait):
            return
        playlist = self._load()
        self._loaded_at = time.monotonic()
        self._ended, self._target = playlist.ended, playlist.target_s
        new = [s for s in playlist.segments if s[0] >= self._next_seq]
        if new:
            self._queue.extend(new)
            self._fresh_at = time.monotonic()
        elif time.monotonic() - self._fresh_at > max(self._read_s, 3 * self._target):
            raise TimeoutError(f"no new HLS segment for {time.monotonic() - self._fresh_at:.0f}s")

    def read(self, n: int = -1) -> bytes:
        size = 1 << 16 if n is None or n < 0 else n
        while not self._stop.is_set():
            if self._body is not None:
                data = self._body.read(size)
                if data:
                    return data
                self._body.close()
                self._body = None
            if self._init is not None:
                url, self._init = self._init, None
                self._body = open_http(url, self._guard, self._open_s, self._read_s)
                continue
            if self._queue:
                seq, url = self._queue.pop(0)
                self._next_seq = seq + 1
                self._body = open_http(url, self._guard, self._open_s, self._read_s)
                continue
            if self._ended:
                return b""
            self._refresh()
        return b""

    def close(self) -> None:
        if self._body is not None:
            self._body.close()
            self._body = None
