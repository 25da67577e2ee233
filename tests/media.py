"""Encoding test clips with PyAV: frames from a drawing function plus an optional tone, or given frames and samples."""

from __future__ import annotations

import itertools

from collections.abc import Callable, Iterable
from fractions import Fraction
from pathlib import Path

import av
import numpy as np


def write_clip(path: Path, draw: Callable[[int], np.ndarray], frames: int, fps: int, size: tuple[int, int], *,
               options: dict[str, str], tone: float = 0.0, fmt: str | None = None) -> Path:
    """Encode ``frames`` BGR images ``draw(i)`` as H.264 at ``fps``; ``tone`` > 0 adds a 440 Hz AAC track."""
    w, h = size
    with av.open(str(path), mode="w", format=fmt) as out:
        vs = out.add_stream("libx264", rate=fps)
        vs.width, vs.height, vs.pix_fmt = w, h, "yuv420p"
        vs.options = options
        aus = out.add_stream("aac", rate=48000, layout="mono") if tone > 0 else None
        a_pts = 0
        for i in range(frames):
            frame = av.VideoFrame.from_ndarray(draw(i), format="bgr24")
            frame.pts = i
            for p in vs.encode(frame):
                out.mux(p)
            while aus is not None and a_pts < (i + 1) * 48000 / fps:
                t = (a_pts + np.arange(1024)) / 48000
                af = av.AudioFrame.from_ndarray((tone * np.sin(2 * np.pi * 440 * t))[None, :].astype(np.float32),
                                                format="fltp", layout="mono")
                af.sample_rate, af.pts, af.time_base = 48000, a_pts, Fraction(1, 48000)
                for p in aus.encode(af):
                    out.mux(p)
                a_pts += 1024
        for p in vs.encode():
            out.mux(p)
        if aus is not None:
            for p in aus.encode():
                out.mux(p)
    return path


def write_av(path: Path, frames: Iterable[np.ndarray], audio: np.ndarray, fps: int, rate: int,
             options: dict[str, str] | None = None) -> Path:
    """Encode BGR ``frames`` as H.264 at ``fps`` (size from the first frame) and mono float ``audio``
    at ``rate`` Hz as AAC."""
    images = iter(frames)
    first = next(images)
    with av.open(str(path), mode="w") as out:
        vs = out.add_stream("libx264", rate=fps)
        vs.height, vs.width = first.shape[:2]
        vs.pix_fmt = "yuv420p"
        vs.options = options or {}
        aus = out.add_stream("aac", rate=rate, layout="mono")
        for i, image in enumerate(itertools.chain([first], images)):
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="bgr24")
            frame.pts = i
            for p in vs.encode(frame):
                out.mux(p)
        samples = np.asarray(audio, dtype=np.float32)
        for start in range(0, len(samples), 1024):
            af = av.AudioFrame.from_ndarray(samples[None, start:start + 1024], format="fltp", layout="mono")
            af.sample_rate, af.pts, af.time_base = rate, start, Fraction(1, rate)
            for p in aus.encode(af):
                out.mux(p)
        for stream in (vs, aus):
            for p in stream.encode():
                out.mux(p)
    return path
