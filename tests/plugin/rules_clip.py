"""A generated clip with scripted event windows (a real face on screen), for rule/notification tests."""

from __future__ import annotations

import os
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np

FACE = Path(__file__).resolve().parents[1] / "data" / "images" / "astronaut.png"


def make_event_clip(path: Path, windows: Sequence[tuple[float, float]], seconds: float, fps: int = 5,
                    mtime: float | None = None) -> Path:
    """Encode ``seconds`` of an empty grey room; the astronaut's face is on screen during ``windows``.

    ``mtime`` sets the file's modification time, which file ingestion uses as the wall clock of t=0.
    """
    w, h = 480, 360
    room = np.full((h, w, 3), 90, np.uint8)
    cv2.rectangle(room, (20, 260), (460, 340), (60, 70, 80), -1)  # a "floor", so the room has some structure
    face = cv2.resize(cv2.imread(str(FACE), cv2.IMREAD_COLOR), (240, 240), interpolation=cv2.INTER_AREA)
    with av.open(str(path), mode="w") as out:
        stream = out.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        stream.options = {"preset": "ultrafast", "crf": "20"}
        for i in range(int(seconds * fps)):
            t = i / fps
            img = room.copy()
            if any(a <= t < b for a, b in windows):
                img[60:300, 120:360] = face
            frame = av.VideoFrame.from_ndarray(img, format="bgr24")
            frame.pts, frame.time_base = i, Fraction(1, fps)
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path
