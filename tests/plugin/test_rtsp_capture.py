"""Live RTSP capture against a real GStreamer RTSP server on 127.0.0.1: segments, outage, reconnect."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from perception.media.sources import SourceError
from tests.conftest import engine_for

HELPER = Path(__file__).parent / "rtsp_server_gst.py"
SYSTEM_PYTHON = "/usr/bin/python3"


def _gst_available() -> bool:
    if not Path(SYSTEM_PYTHON).exists():
        return False
    probe = subprocess.run([SYSTEM_PYTHON, "-c", "import gi; gi.require_version('GstRtspServer', '1.0'); "
                            "from gi.repository import GstRtspServer"], capture_output=True)
    return probe.returncode == 0


pytestmark = pytest.mark.skipif(not _gst_available(), reason="GStreamer RTSP server not installed (see .ci/run)")


#: vision only, with short segments, so a few seconds of stream give several segments
LIGHT = {"sample_fps": 4, "min_segment_s": 0.5, "max_segment_s": 1.0, "max_still_segment_s": 1.0, "level": "light"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RTSPServer:
    """The GStreamer helper as a child process that can be stopped and restarted on the same port."""

    def __init__(self, port: int, user: str, password: str) -> None:
        self.port, self.user, self.password = port, user, password
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen([SYSTEM_PYTHON, str(HELPER), str(self.port), self.user, self.password],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == "ready"

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
            self.proc = None


@pytest.fixture
def rtsp() -> Iterator[RTSPServer]:
    server = RTSPServer(free_port(), "alice", "s3cret")
    server.start()
    yield server
    server.stop()


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def test_rtsp_capture_writes_segments_survives_a_server_restart_and_never_stores_the_password(
    tmp_path: Path, rtsp: RTSPServer
) -> None:
    url = f"rtsp://alice:s3cret@127.0.0.1:{rtsp.port}/live"
    with engine_for(tmp_path, perception=LIGHT) as engine:
        store, worker = engine.store, engine.worker

        def sent() -> list[str]:  # the offline/online notifications the engine's resolver sent
            return [d.rule_id for d in engine.notifications.procedural.decisions(0, "sent")]

        try:
            info = worker.start_capture(url, "door", {"read_timeout_s": 2, "open_timeout_s": 5, "backoff_s": 0.2,
                                                      "backoff_max_s": 1})
            assert info.source == f"rtsp://127.0.0.1:{rtsp.port}/live" and info.live
            key = info.source
            wait_for(lambda: (store.resume_point(key) or 0) >= 1, 30, "two segments from the live stream")
            before = store.resume_point(key)
            assert before is not None

            rtsp.stop()
            wait_for(lambda: "rule_source_offline" in sent(), 15, "the offline notification")
            status = worker.status("door")[0]
            assert status.state == "running" and status.stats["state"] == "reconnecting"
            assert status.error and "s3cret" not in status.error

            rtsp.start()
            wait_for(lambda: "rule_source_online" in sent(), 30, "the capture coming back after the server restarted")
            wait_for(lambda: (store.resume_point(key) or 0) >= before + 2, 30, "segments after the reconnect")
            assert worker.status("door")[0].stats["reconnects"] >= 1
            stopped = worker.stop_capture("door", timeout=60)
            assert stopped.state == "stopped"
        finally:
            worker.stop()

        traces = store.timeline(source=key, limit=500)
        indices = [t.segment_index for t in traces]
        assert indices == list(range(len(indices))), "segment indices are unique and contiguous"
        assert all(b.t_start >= a.t_end - 1e-6 for a, b in zip(traces, traces[1:]))
        assert all("s3cret" not in t.source and "alice" not in t.source for t in traces)
        assert all(t.wall_start > 1e9 for t in traces)  # live rows carry capture (wall-clock) time


def test_a_wrong_password_fails_fast_with_a_redacted_message(tmp_path: Path, rtsp: RTSPServer) -> None:
    with engine_for(tmp_path, perception=LIGHT) as engine:
        worker = engine.worker
        with pytest.raises(SourceError) as err:
            worker.start_capture(f"rtsp://alice:wrong@127.0.0.1:{rtsp.port}/live", "door", {"open_timeout_s": 5})
        assert "401" in str(err.value) or "Unauthorized" in str(err.value)
        assert "wrong" not in str(err.value)
        assert worker.status() == []


def test_a_silent_rtsp_host_times_out_instead_of_hanging(tmp_path: Path) -> None:
    with socket.socket() as hole, engine_for(tmp_path, perception=LIGHT) as engine:
        hole.bind(("127.0.0.1", 0))
        hole.listen(1)  # accepts TCP but never answers
        worker = engine.worker
        with pytest.raises(SourceError) as err:
            worker.start_capture(f"rtsp://127.0.0.1:{hole.getsockname()[1]}/x", "void",
                                 {"open_timeout_s": 1, "read_timeout_s": 1})
        assert "check that the camera is reachable" in str(err.value)


