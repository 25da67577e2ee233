"""A blocking byte pipe between the phone upload endpoint and FFmpeg."""

from __future__ import annotations

import queue
import time

__all__ = ["ByteFeed"]


class ByteFeed:
    """A blocking byte pipe: the phone upload endpoint writes, FFmpeg reads (non-seekable).

    :meth:`restart` ends the current stream (the reader sees EOF) so a new recording, with its own
    container header, starts a fresh decode.
    """

    def __init__(self, max_chunks: int = 256, read_timeout_s: float = 10.0) -> None:
        self._q: queue.Queue[bytes | None] = queue.Queue(max_chunks)
        self._buf = b""
        self.read_timeout_s = read_timeout_s
        self.bytes_in = 0
        self.closed = False
        self._eof = False

    def begin(self) -> None:
        """Start reading the next stream (after the previous one reached its end)."""
        self._eof = False

    def write(self, data: bytes) -> bool:
        """Queue a chunk; returns False (chunk dropped) when the reader is too far behind."""
        try:
            self._q.put_nowait(data)
        except queue.Full:
            return False
        self.bytes_in += len(data)
        return True

    def restart(self) -> None:
        """End the current stream; the next bytes start a new one."""
        try:
            self._q.put_nowait(None)
        except queue.Full:
            pass

    def close(self) -> None:
        """End the feed for good."""
        self.closed = True
        self.restart()

    def read(self, n: int = -1) -> bytes:
        """FFmpeg's read callback: block until data arrives; ``b""`` at the end of a stream."""
        deadline = time.monotonic() + self.read_timeout_s
        if self._eof:
            return b""
        while not self._buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no data from the phone for {self.read_timeout_s:.0f}s")
            try:
                chunk = self._q.get(timeout=min(remaining, 0.5))
            except queue.Empty:
                continue
            if chunk is None:
                self._eof = True
                return b""
            self._buf = chunk
        size = len(self._buf) if n is None or n < 0 else n
        out, self._buf = self._buf[:size], self._buf[size:]
        return out
