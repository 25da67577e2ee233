"""Clips of what real cameras do to a still scene, encoded like a cheap camera (H.264 crf 23, GOP 20, 10 fps).

Each condition draws a photograph from ``tests/data/images`` and changes it the way exposure,
compression or the sensor would, without changing what the scene shows:

* ``flicker``: the whole frame's brightness jumps by up to ±``amount`` grey levels from frame to frame
  (auto-exposure hunting, mains-frequency lighting);
* ``dark_flicker``: the same on a dim scene (a room at dusk), where hue and saturation of nearly black
  pixels swing with every grey level;
* ``framed_flicker``: the same on the photograph shown in a 16:9 frame with black borders (a photograph
  on a screen or held up to the camera): the borders stay clipped at black while the picture flickers;
* ``gop``: key-frame pulsing: the encoder spends far more bits on key frames than on the frames between
  them and the sensor adds noise (σ = ``amount``), so every 2 s the whole picture snaps back: sharper,
  with more contrast, then softening over the GOP;
* ``drift``: daylight: gain and offset ramp slowly over the clip (the scene brightens by ~40 %);
* ``noise``: sensor noise (σ = ``amount`` grey levels per pixel, new every frame);
* ``appear``: an empty grey room (with flicker) until half-way, then the photograph (a real change);
* ``enter``: an empty grey room (with flicker); at ``event_s`` a person walks in from the left and
  stops in the middle of the room.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from tests.media import write_clip

IMAGES = Path(__file__).resolve().parents[1] / "data" / "images"
#: how a cheap camera encodes: constant quality 23, a key frame every 20 frames (2 s), no scene-cut key frames
CAMERA_OPTIONS = {"crf": "23", "g": "20", "keyint_min": "20", "sc_threshold": "0", "preset": "veryfast"}
FPS = 10


def photograph(name: str = "chelsea.png", width: int = 240) -> np.ndarray:
    """A repository photograph resized to ``width`` (even height), BGR uint8."""
    image = cv2.imread(str(IMAGES / name))
    height = int(round(image.shape[0] * width / image.shape[1] / 2)) * 2
    return cv2.resize(image, (width, height), interpolation=cv2.INTER_AREA)


def room(shape: tuple[int, ...]) -> np.ndarray:
    """An empty grey room: a wall with a soft gradient and a darker floor."""
    h, w = shape[:2]
    wall = np.linspace(120, 140, w, dtype=np.float32)[None, :, None] * np.ones((h, 1, 3), np.float32)
    wall[h * 2 // 3:] -= 30
    return wall


def camera_clip(path: Path, condition: str, seconds: float = 20.0, amount: float = 1.0, event_s: float = 6.0,
                name: str = "chelsea.png", seed: int = 0) -> Path:
    """Encode ``seconds`` of ``condition`` (see the module docstring) to ``path``."""
    base = photograph(name).astype(np.float32)
    if condition == "framed_flicker":  # centred in a 960×540 frame, black around it (decoded at 640×360)
        photo = photograph(name, 810).astype(np.float32)
        base = np.zeros((540, 960, 3), np.float32)
        base[1:539, 75:885] = photo
    h, w = base.shape[:2]
    rng = np.random.default_rng(seed)
    frames = int(round(seconds * FPS))
    jumps = rng.integers(-int(amount), int(amount) + 1, frames).astype(np.float32)
    options = dict(CAMERA_OPTIONS)
    if condition == "gop":
        options["x264-params"] = "ipratio=4:qcomp=0"  # key frames far sharper than the frames after them
    empty = room(base.shape)
    person = cv2.resize(photograph("astronaut.png", 120), (70, 90)).astype(np.float32)

    def draw(i: int) -> np.ndarray:
        t = i / FPS
        if condition in ("flicker", "framed_flicker"):
            image = base + jumps[i]
        elif condition == "dark_flicker":
            image = base * 0.12 + jumps[i]
        elif condition == "gop":
            k = (i % 20) / 19.0  # 0 on a key frame, 1 just before the next
            image = cv2.GaussianBlur(base, (0, 0), 0.3 + 1.5 * k) if k else base
            image = (image - 128.0) * (1.14 - 0.14 * k) + 128.0 + rng.normal(0.0, amount, base.shape)
        elif condition == "drift":
            image = base * (0.75 + 0.3 * t / seconds) + 12.0 * t / seconds
        elif condition == "noise":
            image = base + rng.normal(0.0, amount, base.shape)
        elif condition == "appear":
            image = (empty if t < seconds / 2 else base) + jumps[i]
        elif condition == "enter":
            image = empty + jumps[i]
            if t >= event_s:
                x = int(min((w - 70) / 2, (t - event_s) * 60))
                image = image.copy()
                image[h - 100:h - 10, x:x + 70] = person
        else:
            raise ValueError(f"unknown condition {condition!r}")
        return np.clip(image, 0, 255).astype(np.uint8)

    return write_clip(path, draw, frames, FPS, (w, h), options=options)
