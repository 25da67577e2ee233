"""Ingest throughput and memory flatness.

1. Media seconds per wall second for a generated 720p clip (hard cuts every 3 s, a tone) at the
   default sampling, for the ``light`` and ``full`` perception levels (settings derived from the
   manifest exactly as ``reflectworld serve`` derives them).
2. Resident memory while ingesting a long generated stream (through the gateway and the live
   driver, light level): RSS after the first minute of media versus at the end (default one hour).

Usage::

    .venv/bin/python bench/ingest_throughput.py [--clip-seconds 30] [--stream-minutes 60] [--skip-full]

Prints one JSON object. Nothing here is part of the test run.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

from memory import HashEmbedder
from perception.drivers.ingest import ingest_live
from perception.media.gateway import Gateway
from perception.media.sources import AudioIn, Source, VideoIn
from plugin.engine import Engine, Overrides
from plugin.manifest import Manifest

COLOURS = [(40, 40, 200), (200, 60, 30), (30, 180, 40), (200, 200, 40), (160, 40, 160)]


def rss_mb() -> tuple[float, float]:
    """(current RSS, peak RSS) of this process in MiB, from /proc."""
    values = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            key, value = line.split(":", 1)
            values[key] = int(value.split()[0]) / 1024
    return values["VmRSS"], values["VmHWM"]


def make_720p(path: Path, seconds: float, fps: int = 25) -> Path:
    """A 1280×720 H.264 clip with a hard cut every 3 s, a moving block and a 440 Hz tone."""
    w, h = 1280, 720
    with av.open(str(path), "w") as out:
        vs = out.add_stream("libx264", rate=fps)
        vs.width, vs.height, vs.pix_fmt = w, h, "yuv420p"
        vs.options = {"preset": "ultrafast", "crf": "28"}
        aus = out.add_stream("aac", rate=48000, layout="mono")
        a_pts = 0
        for i in range(int(seconds * fps)):
            img = np.empty((h, w, 3), np.uint8)
            img[:] = COLOURS[int(i / fps / 3) % len(COLOURS)]
            x = (i * 8) % (w - 160)
            img[280:440, x:x + 160] = 255
            frame = av.VideoFrame.from_ndarray(img, format="bgr24")
            frame.pts = i
            for p in vs.encode(frame):
                out.mux(p)
            while a_pts < (i + 1) * 48000 / fps:
                t = (a_pts + np.arange(1024)) / 48000
                af = av.AudioFrame.from_ndarray((0.1 * np.sin(2 * np.pi * 440 * t))[None, :].astype(np.float32),
                                                format="fltp", layout="mono")
                af.sample_rate, af.pts, af.time_base = 48000, a_pts, Fraction(1, 48000)
                for p in aus.encode(af):
                    out.mux(p)
                a_pts += 1024
        for stream in (vs, aus):
            for p in stream.encode():
                out.mux(p)
    return path


class GeneratedStream(Source):
    """A synthetic 720p stream (10 fps video + 16 kHz tone) of ``seconds`` media seconds, as fast as it decodes."""

    def __init__(self, seconds: float) -> None:
        super().__init__(uri="generated://bench", kind="generated", live=False)
        self.seconds = seconds

    def open_stream(self, stop: threading.Event, start_s: float = 0.0) -> Iterator[VideoIn | AudioIn]:
        fps = 10
        frames = [np.full((720, 1280, 3), c, np.uint8) for c in COLOURS]
        tone = (0.1 * np.sin(2 * np.pi * 440 * np.arange(1600) / 16000)).astype(np.float32)
        for i in range(int(self.seconds * fps)):
            if stop.is_set():
                return
            t = i / fps
            yield AudioIn(t, tone)
            yield VideoIn(t, frames[int(t / 7) % len(frames)])


def engine(tmp: str, level: str, **hooks: object) -> Engine:
    """The engine ``reflectworld ingest`` builds for the default manifest at ``level`` (hash embedder, temp store)."""
    manifest = Manifest.model_validate({"memory": {"uri": tmp}, "perception": {"level": level}})
    return Engine.from_manifest(manifest, Overrides(embedder=HashEmbedder(64), **hooks))  # type: ignore[arg-type]


def throughput(clip: Path, level: str, seconds: float, warm: Path) -> dict[str, float | int | str]:
    # light: gateway + segmentation + key frames + describer + store (no model); full: every model
    with tempfile.TemporaryDirectory() as tmp, engine(tmp, level) as eng:
        eng.ingest_file(warm)  # load the models outside the timed run
        started = time.perf_counter()
        report = eng.ingest_file(clip)
        wall = time.perf_counter() - started
    return {"level": level, "media_s": seconds, "wall_s": round(wall, 2), "segments": report.segments_written,
            "media_s_per_wall_s": round(seconds / wall, 2), "sample_fps": eng.settings.sample_fps}


def stream_rss(minutes: float) -> dict[str, float | int]:
    marks: dict[str, tuple[float, float]] = {}

    def on_commit(write: object) -> None:
        t_end = write.trace.t_end  # type: ignore[attr-defined]
        if "1min" not in marks and t_end >= 60:
            marks["1min"] = rss_mb()

    with tempfile.TemporaryDirectory() as tmp, engine(tmp, "light", on_commit=on_commit) as eng:
        gateway = Gateway(GeneratedStream(minutes * 60), eng.settings.sample_fps).start()
        started = time.perf_counter()
        written = ingest_live(gateway, eng.pipeline, "bench", final=True)
        wall = time.perf_counter() - started
        gateway.stop()
        end = rss_mb()
    one = marks.get("1min", end)
    return {"stream_media_min": minutes, "segments": written, "wall_s": round(wall, 1),
            "rss_after_1min_mb": round(one[0], 1), "rss_at_end_mb": round(end[0], 1),
            "peak_rss_after_1min_mb": round(one[1], 1), "peak_rss_at_end_mb": round(end[1], 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clip-seconds", type=float, default=30.0)
    parser.add_argument("--stream-minutes", type=float, default=60.0)
    parser.add_argument("--skip-full", action="store_true", help="only the light level")
    args = parser.parse_args()
    out: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        clip = make_720p(Path(tmp) / "bench720.mp4", args.clip_seconds)
        warm = make_720p(Path(tmp) / "warm720.mp4", 2.0)
        levels = ["light"] if args.skip_full else ["light", "full"]
        out["throughput"] = [throughput(clip, level, args.clip_seconds, warm) for level in levels]
    out["stream"] = stream_rss(args.stream_minutes)
    print(json.dumps(out, indent=2))  # noqa: T201 (a bench script's output)


if __name__ == "__main__":
    main()
