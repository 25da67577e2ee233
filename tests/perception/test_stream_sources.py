"""Sources behind one interface: HTTP streams from a local server, image folders, phone chunks, redaction."""

from __future__ import annotations

import threading
from pathlib import Path

import av
import cv2
import numpy as np
import pytest

from perception.media.gateway import AudioChunk, Gateway
from perception.media.sources import AudioIn, PhoneSource, SourceError, VideoIn, make_source, redact_uri
from perception.media.video import Frame
from tests.plugin.stream_media import http_server, make_clip


def test_credentials_are_removed_from_source_keys() -> None:
    assert redact_uri("rtsp://admin:hunter2@10.0.0.5:554/stream1") == "rtsp://10.0.0.5:554/stream1"
    assert redact_uri("https://cam.example/live.m3u8?token=abc&x=1") == "https://cam.example/live.m3u8?token=***&x=1"
    assert redact_uri("/videos/a.mp4") == "/videos/a.mp4"
    src = make_source("rtsps://u:p@127.0.0.1:322/a/b")
    assert (src.kind, src.live, src.key, src.default_camera) == ("rtsp", True, "rtsps://127.0.0.1:322/a/b",
                                                                  "127.0.0.1_a_b")


def test_bad_uris_are_refused_with_a_fix(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="check the path"):
        make_source(str(tmp_path / "missing.mp4"))
    with pytest.raises(SourceError, match="unsupported source 'ftp://host/x.mp4'"):
        make_source("ftp://user:secret@host/x.mp4")
    assert make_source("/dev/video7").kind == "v4l2"
    assert make_source("phone:kitchen").default_camera == "kitchen"


def test_an_mpegts_stream_over_http_delivers_video_and_16k_audio(tmp_path: Path) -> None:
    make_clip(tmp_path / "cam.ts", seconds=3.0, audio=True, fmt="mpegts")
    with http_server(tmp_path) as port:
        source = make_source(f"http://127.0.0.1:{port}/cam.ts", {"live": False})
        items = list(Gateway(source, 4.0).start().items())
    frames = [i for i in items if isinstance(i, Frame)]
    audio = [i for i in items if isinstance(i, AudioChunk)]
    assert len(frames) == 12 and frames[0].image_bgr.shape == (120, 160, 3)
    samples = sum(len(a.pcm) for a in audio)
    assert abs(samples - 3 * 16000) < 3000 and audio[0].pcm.dtype == np.float32


def test_an_image_folder_yields_its_images_in_name_order(tmp_path: Path) -> None:
    for i in range(3):
        cv2.imwrite(str(tmp_path / f"{i}.png"), np.full((40, 60, 3), i * 80, np.uint8))
    (tmp_path / "notes.txt").write_text("not an image")
    src = make_source(str(tmp_path), {"image_interval_s": 2.0})
    items = list(src.open_stream(threading.Event(), start_s=1.0))
    assert [(i.t, int(i.to_bgr()[0, 0, 0])) for i in items if isinstance(i, VideoIn)] == [(2.0, 80), (4.0, 160)]


def _webm(path: Path, seconds: float = 2.0) -> bytes:
    """A WebM (VP8 + Opus) recording like a browser's MediaRecorder makes."""
    with av.open(str(path), "w", format="webm") as out:
        vs = out.add_stream("libvpx", rate=10)
        vs.width, vs.height, vs.pix_fmt = 160, 120, "yuv420p"
        aus = out.add_stream("libopus", rate=48000, layout="mono")
        for i in range(int(seconds * 10)):
            frame = av.VideoFrame.from_ndarray(np.full((120, 160, 3), (i * 12) % 255, np.uint8), format="bgr24")
            frame.pts = i
            for p in vs.encode(frame):
                out.mux(p)
        pts = 0
        while pts < seconds * 48000:
            af = av.AudioFrame.from_ndarray(np.zeros((1, 960), np.float32), format="flt", layout="mono")
            af.sample_rate, af.pts = 48000, pts
            for p in aus.encode(af):
                out.mux(p)
            pts += 960
        for stream in (vs, aus):
            for p in stream.encode():
                out.mux(p)
    return path.read_bytes()


def test_phone_chunks_written_to_the_feed_are_decoded_like_a_stream(tmp_path: Path) -> None:
    data = _webm(tmp_path / "rec.webm")
    source = make_source("phone:pocket", {"read_timeout_s": 5})
    assert isinstance(source, PhoneSource)
    for i in range(0, len(data), 4096):  # MediaRecorder-sized pieces
        assert source.feed.write(data[i:i + 4096])
    source.feed.restart()  # the recording ended
    items = list(source.open_stream(threading.Event()))
    assert sum(isinstance(i, VideoIn) for i in items) == 20
    assert any(isinstance(i, AudioIn) for i in items)


def test_large_frames_are_downscaled_before_their_colour_conversion_and_match_the_full_conversion(tmp_path: Path) -> None:
    """A BT.601 4:2:0 frame is area-averaged in YUV, then converted (a third of the cost): within a couple
    of grey levels of converting the whole frame and downscaling it, and a BT.709 frame converts as before."""
    import av
    import numpy as np

    from perception.media.sources import VideoIn, _small_bgr
    from perception.media.video import resize_long_side
    from tests.plugin.stream_media import make_clip

    clip = make_clip(tmp_path / "c.mp4", seconds=1.0, size=(320, 240))
    with av.open(str(clip)) as container:
        frames = list(container.decode(video=0))
    for frame in frames:
        full = resize_long_side(frame.to_ndarray(format="bgr24"), 160)
        assert _small_bgr(frame, 160) is not None  # untagged: BT.601
        fast = VideoIn(0.0, frame).to_bgr(160)
        assert fast.shape == full.shape == (120, 160, 3)
        assert float(np.abs(fast.astype(int) - full.astype(int)).mean()) < 2.5
        frame.colorspace = 1  # BT.709: FFmpeg's conversion, then the resize
        assert np.array_equal(VideoIn(0.0, frame).to_bgr(160), full_709 := resize_long_side(
            frame.to_ndarray(format="bgr24"), 160)) and not np.array_equal(full_709, full)
