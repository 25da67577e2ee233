"""A loopback relay between FFmpeg and a checked RTSP camera: pinned, and no redirect gets through.

FFmpeg's RTSP client follows ``3xx`` answers (and a server's ``REDIRECT`` request) to any host by
itself. For a source a tool call named, FFmpeg therefore talks to a relay on 127.0.0.1 instead:
the relay connects to the one address the guard checked (:class:`perception.media.fetch.Pin`),
passes FFmpeg's requests on unchanged, and reads every message coming back. RTP interleaved in
the TCP connection (``$`` frames) passes as it is; an RTSP message that redirects ends both
connections and marks the relay :attr:`RtspRelay.refused`. For ``rtsps://`` the relay speaks TLS
to the camera (the name as SNI) and plain RTSP to FFmpeg on loopback, so it can read the messages.
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
from urllib.parse import urlsplit, urlunsplit

from perception.media.fetch import Pin

__all__ = ["RtspRelay"]

logger = logging.getLogger(__name__)

#: the longest RTSP message head (status line and headers) the relay reads before giving up
MAX_HEAD_BYTES = 64 * 1024


class RtspRelay:
    """Relays FFmpeg's RTSP connections to ``pin`` (see the module docstring); :meth:`close` ends it."""

    def __init__(self, pin: Pin, open_s: float, read_s: float) -> None:
        self.pin, self.open_s, self.read_s = pin, open_s, read_s
        self.refused: str | None = None
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(4)
        self.port = int(self._listener.getsockname()[1])
        threading.Thread(target=self._accept, name="rtsp-relay", daemon=True).start()

    def url(self, uri: str) -> str:
        """``uri`` pointed at the relay (credentials, path and query kept; ``rtsps`` becomes ``rtsp``)."""
        parts = urlsplit(uri)
        userinfo = parts.netloc.rpartition("@")[0]
        netloc = (userinfo + "@" if userinfo else "") + f"127.0.0.1:{self.port}"
        return urlunsplit(("rtsp", netloc, parts.path, parts.query, parts.fragment))

    def close(self) -> None:
        """Stop accepting and end every relayed connection."""
        self._closed.set()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in [self._listener, *sockets]:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def _track(self, sock: socket.socket) -> socket.socket:
        with self._lock:
            self._sockets.append(sock)
        return sock

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self._track(client)
            threading.Thread(target=self._serve, args=(client,), name="rtsp-relay-conn", daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = self._track(socket.create_connection((str(self.pin.address), self.pin.port), self.open_s))
            if self.pin.scheme == "rtsps":
                context = ssl.create_default_context()
                context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # as FFmpeg's own TLS
                upstream = self._track(context.wrap_socket(upstream, server_hostname=self.pin.host))
            upstream.settimeout(None)
        except OSError as exc:
            logger.debug("rtsp relay: cannot reach the camera (%s)", type(exc).__name__)
            client.close()
            return
        threading.Thread(target=self._pump_up, args=(client, upstream), name="rtsp-relay-up", daemon=True).start()
        self._pump_down(upstream, client)

    def _pump_up(self, client: socket.socket, upstream: socket.socket) -> None:
        """FFmpeg's requests go on unchanged."""
        try:
            while data := client.recv(65536):
                upstream.sendall(data)
        except OSError:
            pass
        self._end(client, upstream)

    def _pump_down(self, upstream: socket.socket, client: socket.socket) -> None:
        """Every message from the camera is read; interleaved RTP passes, a redirect ends the connection."""
        buf = b""
        try:
            while True:
                data = upstream.recv(65536)
                if not data:
                    break
                buf += data
                out, buf = self._messages(buf)
                if out:
                    client.sendall(out)
                if self.refused is not None:
                    break
        except (OSError, ValueError) as exc:
            logger.debug("rtsp relay: connection ended (%s)", type(exc).__name__)
        self._end(client, upstream)

    def _messages(self, buf: bytes) -> tuple[bytes, bytes]:
        """The complete, allowed messages at the start of ``buf``, and what remains of it."""
        out = bytearray()
        while buf:
            if buf[:1] == b"$":
                if len(buf) < 4:
                    break
                end = 4 + int.from_bytes(buf[2:4], "big")
                if len(buf) < end:
                    break
                out += buf[:end]
                buf = buf[end:]
                continue
            head_end = buf.find(b"\r\n\r\n")
            if head_end < 0:
                if len(buf) > MAX_HEAD_BYTES:
                    raise ValueError("an RTSP message head that never ends")
                break
            head = buf[:head_end].decode("latin-1")
            first, *lines = head.split("\r\n")
            length = 0
            for line in lines:
                key, _, value = line.partition(":")
                if key.strip().lower() == "content-length":
                    length = int(value.strip() or 0)
            end = head_end + 4 + length
            if len(buf) < end:
                break
            words = first.split()
            redirect = (first.startswith("RTSP/") and len(words) > 1 and words[1][:1] == "3") or \
                (words[:1] == ["REDIRECT"])
            if redirect:
                self.refused = "the camera answered with a redirect; redirects are not followed for this source"
                logger.warning("rtsp relay: refused a redirect from %s", self.pin.host)
                break
            out += buf[:end]
            buf = buf[end:]
        return bytes(out), buf

    def _end(self, *sockets: socket.socket) -> None:
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
