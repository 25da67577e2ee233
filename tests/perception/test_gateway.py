"""The stream gateway: no drops for files in offline_quality, drops counted for live, reconnect on stall."""

from __future__ import annotations

import http.server
import threading
import time
from pathlib import Path

import cv2
import numpy as np
import pytest

from perception import MediaError
from tests.conftest import NO_MODELS, engine_for
from perception.media.gateway import AudioChunk, Gateway
from perception.media.sources import AVSource, SourceError, make_source
from perception.media.video import Frame, iter_frames
from memory import MemoryStore
from tests.plugin.stream_media import http_server, make_clip


def _wait(predicate, timeout: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_a_file_in_offline_quality_mode_never_drops_even_with_a_tiny_queue(tmp_path: Path) -> None:
    clip = make_clip(tmp_path / "c.mp4", seconds=3.0, audio=True)
    gw = Gateway(make_source(str(clip)), 4.0, mode="offline_quality", queue_size=2).start()
    assert _wait(lambda: gw._queue.full(), 10)  # the decoder is blocked on the full queue, not dropping
    items = list(gw.items())
    frames = [i for i in items if isinstance(i, Frame)]
    assert [f.index for f in frames] == [f.index for f in iter_frames(clip, 4.0)]
    assert any(isinstance(i, AudioChunk) for i in items)
    assert gw.stats.dropped == 0 and gw.stats.state == "done" and gw.finished


def test_live_latency_mode_drops_and_counts_frames_when_the_consumer_falls_behind(tmp_path: Path) -> None:
    clip = make_clip(tmp_path / "c.mp4", seconds=4.0)
    gw = Gateway(AVSource(uri=str(clip), kind="file", live=False, options={"audio": False}), 4.0,
                 mode="live_latency", queue_size=3).start()
    assert _wait(lambda: gw.stats.state == "done", 20)  # decoded to the end without waiting for us
    delivered = [i for i in gw.items() if isinstance(i, Frame)]
    assert len(delivered) == 3
    assert gw.stats.dropped == 16 - 3
    assert gw.stats.as_dict()["dropped"] == 13


def test_a_corrupt_file_gives_the_documented_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"\x00\x00\x00\x18ftypmp42" + b"\x13" * 4000)
    with pytest.raises(SourceError, match="corrupt or not an audio/video format"):
        list(Gateway(make_source(str(bad)), 4.0).start().items())
    with engine_for(tmp_path, perception=NO_MODELS) as engine, pytest.raises(MediaError, match="corrupt"):
        engine.ingest_file(bad)


class _StallingHandler(http.server.BaseHTTPRequestHandler):
    """First request: half the stream, then silence with the connection held open. Later: the whole stream."""

    payload = b""
    requests = 0
    release = threading.Event()

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        cls = type(self)
        cls.requests += 1
        self.send_response(200)
        self.send_header("Content-Type", "video/mp2t")
        self.end_headers()
        if cls.requests == 1:
            self.wfile.write(cls.payload[: len(cls.payload) // 2])
            self.wfile.flush()
            cls.release.wait(30)  # stall: no bytes, no close
            return
        self.wfile.write(cls.payload)

    def log_message(self, *args: object) -> None:
        pass


def test_a_stalled_http_stream_triggers_a_reconnect(tmp_path: Path) -> None:
    ts = make_clip(tmp_path / "s.ts", seconds=6.0, fmt="mpegts")
    _StallingHandler.payload = ts.read_bytes()
    events: list[str] = []
    with http_server(tmp_path, _StallingHandler) as port:
        source = make_source(f"http://user:pw@127.0.0.1:{port}/live.ts?token=abc",
                             {"read_timeout_s": 1.0, "open_timeout_s": 5.0})
        assert source.key == f"http://127.0.0.1:{port}/live.ts?token=***"
        gw = Gateway(source, 4.0, backoff_s=0.1, on_event=lambda e, d: events.append(e)).start()
        try:
            assert _wait(lambda: gw.stats.reconnects >= 1, 20), gw.stats.as_dict()
            assert _wait(lambda: "online" in events, 20), events
            assert events[:2] == ["offline", "online"]
            assert "pw" not in (gw.stats.last_error or "") and "abc" not in (gw.stats.last_error or "")
            assert gw.stats.frames_in > 0
        finally:
            _StallingHandler.release.set()
            gw.stop()
    assert _StallingHandler.requests >= 2


def test_a_still_stream_decodes_key_frames_only_and_wakes_at_the_key_frame_that_changes(tmp_path: Path) -> None:
    """Still and silent for ``keyframes_after_s``: key frames only (each one handed out at once, though
    the stream reorders B-frames), and of those only the ones whose size differs once the still stretches
    are known; the key frame that differs brings full decoding back at the next one."""
    from tests.media import write_clip

    def draw(i: int) -> np.ndarray:
        img = np.full((120, 160, 3), 90, np.uint8)
        if i >= 200:  # at 20 s something appears
            img[30:90, 40:120] = 250
        return img

    clip = write_clip(tmp_path / "still.mp4", draw, 300, 10, (160, 120),
                      options={"preset": "veryfast", "g": "10", "bf": "2", "scenecut": "0"})
    source = AVSource(uri=str(clip), kind="file", live=False, options={"audio": False})
    gw = Gateway(source, 4.0, keyframes_after_s=3.0).start()
    times = [round(i.t, 2) for i in gw.items() if isinstance(i, Frame)]
    # still since 0 s: the key frames at 1, 2 and 3 s closed still stretches, the identical ones after are skipped
    assert [t for t in times if 4.0 <= t < 20.0] == [] and source.key_gate.skipped >= 16
    assert len([t for t in times if t < 3.0]) == 12  # every 4 fps slot before it went still
    assert 20.0 in times  # the key frame that shows the change, at its own time
    assert len([t for t in times if 21.0 <= t < 23.0]) == 8  # every slot again from the next key frame


def test_a_still_camera_skips_key_frames_until_the_packets_show_a_change(tmp_path: Path) -> None:
    """A room with sensor noise, still for 45 s: after two still stretches the key frames are skipped,
    save one per KEYFRAME_GAP_S. Someone crossing between two key frames gets the next one decoded
    though it shows the room as before (the inter frames grew); someone who walks in and stays is seen
    at the first key frame after, and full decoding comes back at the one after that."""
    from perception.media.keygate import KEYFRAME_GAP_S
    from tests.media import write_clip

    images = Path(__file__).resolve().parents[1] / "data" / "images"
    w, h = 320, 180
    room = cv2.resize(cv2.imread(str(images / "coffee.png")), (w, h), interpolation=cv2.INTER_AREA).astype(np.int16)
    person = cv2.resize(cv2.imread(str(images / "astronaut.png")), (90, 120), interpolation=cv2.INTER_AREA)
    rng = np.random.default_rng(0)

    def draw(i: int) -> np.ndarray:
        img = np.clip(room + rng.integers(-2, 3, room.shape), 0, 255).astype(np.uint8)
        t = i / 10
        x = None
        if 45.1 <= t < 45.8:  # a passer-by, gone before the key frame at 46 s
            x = int(w - (t - 45.1) / 0.7 * (w + 90))
        elif t >= 53.1:  # someone walks in and stays
            x = max(160, int(w - (t - 53.1) / 0.5 * 160))
        if x is not None and min(w, x + 90) > max(0, x):
            img[40:160, max(0, x):min(w, x + 90)] = person[:, max(0, x) - x:min(w, x + 90) - x]
        return img

    clip = write_clip(tmp_path / "room.mp4", draw, 600, 10, (w, h),
                      options={"preset": "veryfast", "g": "20", "bf": "2", "scenecut": "0"})
    source = AVSource(uri=str(clip), kind="file", live=False, options={"audio": False})
    gw = Gateway(source, 4.0, keyframes_after_s=3.0).start()
    times = [round(i.t, 2) for i in gw.items() if isinstance(i, Frame)]
    looked = [t for t in times if 4.0 <= t < 45.0]  # key frames decoded while the room was still
    assert 1 <= len([t for t in looked if t >= 8.0]) <= 2, looked  # of 19 there
    assert all(b - a <= KEYFRAME_GAP_S + 2.0 for a, b in zip([*looked, 46.0], [*looked, 46.0][1:])), looked
    assert 46.0 in times and [t for t in times if 46.0 < t < 54.0] == []  # the passer-by raised no threshold
    assert 54.0 in times  # the one who stays, at the first key frame after
    assert len([t for t in times if 56.0 <= t < 57.0]) == 4  # every slot again from the next key frame
    assert source.key_gate.skipped >= 20 and source.bad_packets == 0
    assert gw.stats.as_dict()["keyframes_skipped"] >= 20  # capture_status shows it


def test_a_still_stream_without_inter_frames_decodes_every_key_frame(tmp_path: Path) -> None:
    """All-intra video (as MJPEG cameras send) has no inter frames to tell a change by: nothing is skipped."""
    from tests.media import write_clip

    clip = write_clip(tmp_path / "intra.mp4", lambda i: np.full((120, 160, 3), 90, np.uint8), 150, 10, (160, 120),
                      options={"preset": "veryfast", "g": "1"})
    source = AVSource(uri=str(clip), kind="file", live=False, options={"audio": False})
    times = [i.t for i in Gateway(source, 4.0, keyframes_after_s=3.0).start().items() if isinstance(i, Frame)]
    assert len(times) == 60 and source.keyframes_only and source.key_gate.skipped == 0


def test_repeated_packets_of_digital_silence_are_passed_on_as_zeros_without_decoding(tmp_path: Path) -> None:
    """A muted stretch encodes to the same packet over and over: its repeats are not decoded, yet the
    audio handed on is the stream's own (silence as zeros, then the speech at its time, sample-exact)."""
    from perception.media.audio import SAMPLE_RATE, decode_audio
    from tests.media import write_av

    speech = decode_audio(Path(__file__).resolve().parents[1] / "data" / "jfk.flac", 0.0, 3.0)
    gap = np.zeros(6 * SAMPLE_RATE, np.float32)
    audio = np.concatenate([gap, speech, gap, speech[:SAMPLE_RATE]])
    picture = np.full((120, 160, 3), 90, np.uint8)
    clip = write_av(tmp_path / "muted.mp4", [picture] * int(len(audio) / SAMPLE_RATE * 10), audio, 10, SAMPLE_RATE)
    source = AVSource(uri=str(clip), kind="file", live=False)
    chunks = [i for i in Gateway(source, 4.0).start().items() if isinstance(i, AudioChunk)]

    reference = decode_audio(clip)
    heard = np.concatenate([c.pcm for c in chunks])
    assert abs(len(heard) - len(reference)) <= 2 * 1024  # every packet's samples, decoded or not
    assert source.silent_packets > 0.8 * 12 * SAMPLE_RATE / 1024  # most of the 12 s of silence was not decoded
    for c in chunks:  # each chunk sits at its stream time, with the samples decoding gives there
        start = round(c.t * SAMPLE_RATE)
        ref = reference[start:start + len(c.pcm)]
        assert np.abs(c.pcm[:len(ref)] - ref).max() < 0.02, c.t
    loud = [c.t for c in chunks if np.abs(c.pcm).max() > 0.05]
    assert 6.0 <= loud[0] <= 6.5 and any(15.0 <= t <= 15.5 for t in loud)  # the speech, where it was said


@pytest.mark.parametrize("condition", ["drift", "flicker"])
def test_a_still_camera_whose_brightness_drifts_or_flickers_drops_to_key_frames(tmp_path: Path, condition: str) -> None:
    """Daylight ramping the whole picture up by ~40 % over 20 s, or exposure flickering by ±3 grey levels,
    is not a change of what the camera sees: the capture still decodes key frames only."""
    from tests.perception.camera_clips import camera_clip

    clip = camera_clip(tmp_path / f"{condition}.mp4", condition, seconds=20.0, amount=3.0)
    source = AVSource(uri=str(clip), kind="file", live=False, options={"audio": False})
    times = [i.t for i in Gateway(source, 4.0, keyframes_after_s=3.0).start().items() if isinstance(i, Frame)]
    late = [t for t in times if t >= 6.0]  # 56 grid slots; key frames every 2 s
    assert len(late) <= 8, late
    assert source.keyframes_only
