"""A small RTSP server on loopback for the relay tests: MPEG-TS over RTP (payload 33), interleaved in
the TCP connection, or a redirect (``302`` answer, or a server ``REDIRECT`` request after PLAY)."""

from __future__ import annotations

import socket
import ssl
import threading
from pathlib import Path

TS = 188


class FakeRtsp:
    """Serves ``ts`` at ``rtsp://HOST:PORT/live``; ``redirect`` (a URL) answers DESCRIBE with 302 to it, or
    with ``redirect_after_play`` sends a REDIRECT request once playing. Counts accepted connections."""

    def __init__(self, host: str, ts: Path | None = None, redirect: str | None = None,
                 redirect_after_play: bool = False, tls: ssl.SSLContext | None = None) -> None:
        self.ts = ts.read_bytes() if ts is not None else b""
        self.tls = tls
        self.redirect, self.redirect_after_play = redirect, redirect_after_play
        self.connections = 0
        self.requests: list[str] = []
        self.sock = socket.socket()
        self.sock.bind((host, 0))
        self.sock.listen(8)
        self.port = int(self.sock.getsockname()[1])
        self._open: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        for s in [self.sock, *self._open]:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            self._open.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        buf = b""
        try:
            if self.tls is not None:
                conn = self.tls.wrap_socket(conn, server_side=True)
            while True:
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(4096)
                    if not data:
                        return
                    buf += data
                head, _, buf = buf.partition(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method = lines[0].split()[0]
                self.requests.append(method)
                cseq = next((ln.split(":", 1)[1].strip() for ln in lines if ln.lower().startswith("cseq")), "1")
                if method == "DESCRIBE" and self.redirect and not self.redirect_after_play:
                    conn.sendall(f"RTSP/1.0 302 Moved\r\nCSeq: {cseq}\r\nLocation: {self.redirect}\r\n\r\n".encode())
                    continue
                extra, body = "", b""
                if method == "OPTIONS":
                    extra = "Public: OPTIONS, DESCRIBE, SETUP, PLAY, TEARDOWN\r\n"
                elif method == "DESCRIBE":
                    body = (b"v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=test\r\nc=IN IP4 0.0.0.0\r\nt=0 0\r\n"
                            b"m=video 0 RTP/AVP 33\r\na=rtpmap:33 MP2T/90000\r\na=control:track0\r\n")
                    extra = f"Content-Type: application/sdp\r\nContent-Length: {len(body)}\r\n"
                elif method == "SETUP":
                    extra = "Transport: RTP/AVP/TCP;unicast;interleaved=0-1\r\nSession: 12345678\r\n"
                elif method == "PLAY":
                    extra = "Session: 12345678\r\n"
                conn.sendall(f"RTSP/1.0 200 OK\r\nCSeq: {cseq}\r\n{extra}\r\n".encode() + body)
                if method == "PLAY":
                    if self.redirect_after_play:
                        conn.sendall(f"REDIRECT rtsp://127.0.0.1/live RTSP/1.0\r\nCSeq: 1\r\n"
                                     f"Location: {self.redirect}\r\n\r\n".encode())
                    else:
                        self._play(conn)
        except OSError:
            return

    def _play(self, conn: socket.socket) -> None:
        seq = 0
        for i in range(0, len(self.ts) - len(self.ts) % TS, 7 * TS):
            payload = self.ts[i:i + 7 * TS]
            rtp = bytes([0x80, 33]) + seq.to_bytes(2, "big") + (seq * 90).to_bytes(4, "big") + b"\0\0\0\1" + payload
            conn.sendall(b"$\x00" + len(rtp).to_bytes(2, "big") + rtp)
            seq = (seq + 1) & 0xFFFF
