"""A generated clip with scripted event windows (a real face on screen), for rule/notification tests."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import cv2
import numpy as np

from tests.media import write_clip

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

    def draw(i: int) -> np.ndarray:
        img = room.copy()
        if any(a <= i / fps < b for a, b in windows):
            img[60:300, 120:360] = face
        return img

    write_clip(path, draw, int(seconds * fps), fps, (w, h), options={"preset": "ultrafast", "crf": "20"})
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


FACES = Path(__file__).resolve().parents[1] / "data" / "faces"


def make_people_clip(path: Path, appearances: Sequence[tuple[float, float, str]], seconds: float, fps: int = 5,
                     mtime: float | None = None) -> Path:
    """An empty room that real people walk into and out of.

    Each appearance ``(start, end, still)`` slides the portrait ``tests/data/faces/<still>`` in from
    the left edge over 0.6 s from ``start``, holds it, and slides it out to the right until ``end``.
    Several people may be in the room at once (each keeps its own spot).
    """
    w, h = 640, 360
    room = np.full((h, w, 3), 95, np.uint8)
    cv2.rectangle(room, (0, 280), (w, h), (60, 70, 80), -1)
    cv2.rectangle(room, (470, 60), (600, 280), (120, 100, 70), -1)  # a door
    stills = {name: cv2.resize(cv2.imread(str(FACES / name), cv2.IMREAD_COLOR), (200, 200),
                               interpolation=cv2.INTER_AREA) for _, _, name in appearances}
    spots = {name: 60 + 240 * (i % 2) for i, name in enumerate(stills)}
    walk = 0.6

    def draw(i: int) -> np.ndarray:
        t = i / fps
        img = room.copy()
        for start, end, name in appearances:
            if not start <= t < end:
                continue
            spot = spots[name]
            if t < start + walk:  # walking in from the left
                x = int(-200 + (spot + 200) * (t - start) / walk)
            elif t > end - walk:  # walking out to the right
                x = int(spot + (w - spot) * (t - (end - walk)) / walk)
            else:
                x = spot
            x0, x1 = max(0, x), min(w, x + 200)
            if x1 > x0:
                img[60:260, x0:x1] = stills[name][:, x0 - x:x1 - x]
        return img

    write_clip(path, draw, int(seconds * fps), fps, (w, h), options={"preset": "ultrafast", "crf": "20"})
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path
