"""Real-world media: MPEG-PS with MP2 audio, a damaged packet, a truncated file."""

from __future__ import annotations

import shutil
from pathlib import Path

import av
import pytest

from perception.media.audio import AudioTrack, decode_audio
from tests.conftest import NO_MODELS, engine_for
from tests.plugin.stream_media import make_clip

DATA = Path(__file__).parents[1] / "data"


def _damage_one_audio_packet(src: Path, dst: Path) -> None:
    """Copy ``src`` and break the MPEG audio frame headers inside three of its middle audio packets."""
    with av.open(str(src)) as c:
        packets = [(p.pos, p.size) for p in c.demux(c.streams.audio[0]) if p.pos is not None and p.size]
    data = bytearray(src.read_bytes())
    for start, _size in packets[18:21]:
        for j in range(start, min(start + 2048 + 64, len(data) - 1)):
            if data[j] == 0xFF and data[j + 1] in (0xFC, 0xFD):  # MPEG-1 Layer II sync word
                data[j:j + 3] = b"\0\0\0"
    dst.write_bytes(bytes(data))


@pytest.mark.parametrize("clip", sorted(DATA.glob("*.mpg")), ids=lambda p: p.name)
def test_every_mpeg_ps_clip_ingests_completely(tmp_path: Path, clip: Path) -> None:
    copy = tmp_path / clip.name
    shutil.copy(clip, copy)
    with engine_for(tmp_path, perception=NO_MODELS) as engine:
        report = engine.ingest_file(copy)
        traces = engine.store.timeline()
    assert report.done and not report.partial and report.bad_packets == 0
    assert traces[-1].t_end >= 2.9  # the 3-second clip to its end, not just its first segment
    assert report.segments_written == len(traces) >= 2


def test_audio_is_sliced_from_one_pass_and_matches_a_direct_decode() -> None:
    clip = DATA / "grid_bbaf2n.mpg"
    track = AudioTrack(clip)
    parts = [track.slice(0.0, 1.2), track.slice(1.2, 2.0), track.slice(2.0, 3.0)]
    track.close()
    whole = decode_audio(clip, 0.0, 3.0)
    assert sum(len(p) for p in parts) == len(whole)
    assert track.bad_packets == 0


def test_a_damaged_audio_packet_is_skipped_and_counted(tmp_path: Path) -> None:
    damaged = tmp_path / "damaged.mpg"
    _damage_one_audio_packet(DATA / "grid_bbaf2n.mpg", damaged)
    with engine_for(tmp_path, perception=NO_MODELS) as engine:
        report = engine.ingest_file(damaged)
        traces = engine.store.timeline()
    assert report.done and not report.partial
    assert report.bad_packets >= 1
    assert traces[-1].t_end >= 2.9


def test_a_truncated_file_is_ingested_up_to_where_it_is_readable_and_reported_partial(tmp_path: Path) -> None:
    whole = make_clip(tmp_path / "whole.mkv", seconds=8.0, fmt="matroska")
    cut = tmp_path / "cut.mkv"
    data = whole.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    with engine_for(tmp_path, perception=NO_MODELS) as engine:
        report = engine.ingest_file(cut)
        traces = engine.store.timeline()
        complete = engine.ingest_file(whole)
    assert report.partial and report.readable_s is not None and 2.0 < report.readable_s < 6.0
    assert traces and traces[-1].t_end <= report.readable_s + 1.0
    assert not complete.partial and complete.readable_s is None


def test_capture_status_counts_the_skipped_packets_of_a_damaged_file(tmp_path: Path) -> None:
    import time

    damaged = tmp_path / "damaged.mpg"
    _damage_one_audio_packet(DATA / "grid_bbaf2n.mpg", damaged)
    with engine_for(tmp_path, perception=NO_MODELS) as engine:
        worker = engine.worker
        try:
            worker.start_capture(str(damaged), "grid")
            deadline = time.monotonic() + 60
            while not worker.idle() and time.monotonic() < deadline:
                time.sleep(0.1)
            info = worker.status("grid")[0]
        finally:
            worker.stop()
    assert info.state == "done" and info.stats["bad_packets"] >= 1 and info.stats["partial"] is False


def test_an_ingest_that_stops_on_damage_says_how_many_segments_it_kept(tmp_path: Path) -> None:
    import numpy as np

    from perception.media.sources import SourceError
    from tests.plugin.stream_media import COLOURS

    path = tmp_path / "broken.mkv"
    rng = np.random.default_rng(3)
    with av.open(str(path), "w", format="matroska") as out:  # 15 s of MJPEG, then 25 s of undecodable frames
        vs = out.add_stream("mjpeg", rate=10)
        vs.width, vs.height, vs.pix_fmt = 160, 120, "yuvj420p"
        for i in range(400):
            image = np.zeros((120, 160, 3), np.uint8)
            image[:] = COLOURS[(i // 10) % len(COLOURS)]
            frame = av.VideoFrame.from_ndarray(image, format="bgr24")
            frame.pts = i
            for packet in vs.encode(frame):
                if i >= 150:
                    junk = av.Packet(b"\xff\xd8\xff\xc0" + bytes(rng.integers(0, 255, 400, dtype=np.uint8)))
                    junk.pts, junk.dts, junk.time_base, junk.stream = packet.pts, packet.dts, packet.time_base, vs
                    packet = junk
                out.mux(packet)
    with engine_for(tmp_path, perception=NO_MODELS) as engine:
        with pytest.raises(SourceError) as info:
            engine.ingest_file(path)
        kept = len(engine.store.timeline())
    assert kept >= 5 and f"{kept} segment(s) before it were kept" in str(info.value)
