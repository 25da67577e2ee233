"""Loopback listeners for the every-hop tests: an allowed web server on 127.0.0.1 and a forbidden one
on 127.0.0.2 (a policy allowing only 127.0.0.1/32 stands in for "internal network"), each counting the
connections it accepts."""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

Route = Callable[[http.server.BaseHTTPRequestHandler], tuple[int, dict[str, str], bytes]]


class CountingServer(http.server.ThreadingHTTPServer):
    """An HTTP server whose routes are ``path -> route(handler) -> (status, headers, body)``."""

    daemon_threads = True

    def __init__(self, host: str, routes: dict[str, Route]) -> None:
        self.routes = routes
        self.connections = 0
        self.paths: list[str] = []
        super().__init__((host, 0), _Handler)

    def process_request(self, request: object, client_address: object) -> None:
        self.connections += 1
        super().process_request(request, client_address)  # type: ignore[arg-type]

    @property
    def port(self) -> int:
        return int(self.server_address[1])


class _Handler(http.server.BaseHTTPRequestHandler):
    server: CountingServer

    def do_GET(self) -> None:  # noqa: N802
        self.server.paths.append(self.path)
        route = self.server.routes.get(self.path.split("?", 1)[0])
        status, headers, body = route(self) if route else (404, {}, b"not found")
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def file_route(path: Path, content_type: str = "video/mp2t") -> Route:
    return lambda _h: (200, {"Content-Type": content_type}, path.read_bytes())


def text_route(text: str, content_type: str = "application/vnd.apple.mpegurl") -> Route:
    return lambda _h: (200, {"Content-Type": content_type}, text.encode())


def redirect_route(location: str, status: int = 302) -> Route:
    return lambda _h: (status, {"Location": location}, b"")


@contextmanager
def serving(host: str, routes: dict[str, Route]) -> Iterator[CountingServer]:
    """Serve ``routes`` on ``host`` (a free port) for the duration of the block."""
    server = CountingServer(host, routes)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


class SilentListener:
    """Accepts TCP connections and never answers; :meth:`close` drops them all."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.sock = socket.socket()
        self.sock.bind((host, 0))
        self.sock.listen(128)
        self.port = int(self.sock.getsockname()[1])
        self.accepted: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted.append(conn)

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
        except OSError:
            pass
        self.sock.close()
        for conn in self.accepted:
            conn.close()
        self._thread.join(5)
