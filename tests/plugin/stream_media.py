"""Media for stream tests: synthetic clips encoded with PyAV, MPEG-TS remuxes, a tiny HTTP server."""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from tests.media import write_clip

COLOURS = [(40, 40, 200), (200, 60, 30), (30, 180, 40), (200, 200, 40), (160, 40, 160), (40, 160, 160)]


def make_clip(path: Path, seconds: float = 6.0, fps: int = 10, size: tuple[int, int] = (160, 120),
              shot_s: float = 1.0, audio: bool = False, fmt: str | None = None) -> Path:
    """Encode a clip whose background colour changes every ``shot_s`` (a hard cut), with a moving square.

    With ``audio`` a quiet 440 Hz tone is added; ``fmt`` forces a container (e.g. ``mpegts``).
    """
    w, h = size

    def draw(i: int) -> np.ndarray:
        img = np.zeros((h, w, 3), np.uint8)
        img[:] = COLOURS[int(i / fps / shot_s) % len(COLOURS)]
        x = (i * 3) % (w - 20)
        img[h // 2 - 10:h // 2 + 10, x:x + 20] = 255
        return img

    return write_clip(path, draw, int(seconds * fps), fps, size, tone=0.1 if audio else 0.0, fmt=fmt,
                      options={"preset": "ultrafast", "tune": "zerolatency", "g": str(fps)})


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def http_server(directory: Path, handler: type[http.server.BaseHTTPRequestHandler] | None = None) -> Iterator[int]:
    """Serve ``directory`` on 127.0.0.1 (a free port) for the duration of the block; yields the port."""
    factory = handler or functools.partial(_Quiet, directory=str(directory))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), factory)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(httpd.server_address[1])
    finally:
        httpd.shutdown()
        httpd.server_close()
