"""Key-frame quality, selection and JPEG encoding.

Quality is sharpness (variance of the Laplacian, squashed into [0, 1)) times colour entropy
(entropy of the hue/saturation histogram, normalised to [0, 1]): a sharp, colourful frame beats
a blurred or flat one, and a uniform grey frame scores 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import cv2
import numpy as np

from perception.media.video import Frame, resize_long_side

# Laplacian variance at which sharpness reaches 0.5; typical in-focus 640-px video frames give
# a few hundred, heavily blurred ones under 20.
_SHARPNESS_HALF = 100.0
_HIST_BINS = (16, 8)


@dataclass(frozen=True)
class KeyframePick:
    """A selected key frame and its quality."""

    frame: Frame
    quality: float


def sharpness(image_bgr: np.ndarray) -> float:
    """Return the variance of the Laplacian mapped to [0, 1) by ``v / (v + 100)``."""
    grey = cv2.cvtColor(resize_long_side(image_bgr, 640), cv2.COLOR_BGR2GRAY)
    # The Laplacian of 8-bit grey is an integer in [-1020, 1020]: exact in 16 bits, and one
    # meanStdDev pass costs a fraction of a float64 image and numpy's var.
    _, std = cv2.meanStdDev(cv2.Laplacian(grey, cv2.CV_16S))
    var = float(std[0, 0]) ** 2
    return var / (var + _SHARPNESS_HALF)


def colour_entropy(image_bgr: np.ndarray) -> float:
    """Return the hue/saturation histogram entropy divided by its maximum (0 for flat grey)."""
    small = resize_long_side(image_bgr, 320)
    hsv = cv2.cvtColor(small, cv2.COLOR_BGR2HSV)
    hist = cv2.calcHist([hsv], [0, 1], None, list(_HIST_BINS), [0, 180, 0, 256]).ravel()
    total = float(hist.sum())
    if total <= 0:
        return 0.0
    p = hist[hist > 0] / total
    entropy = float(-(p * np.log2(p)).sum())
    return entropy / float(np.log2(_HIST_BINS[0] * _HIST_BINS[1]))


def quality(image_bgr: np.ndarray) -> float:
    """Key-frame quality in [0, 1): :func:`sharpness` × :func:`colour_entropy`."""
    return sharpness(image_bgr) * colour_entropy(image_bgr)


def select_keyframes(frames: Sequence[Frame], k: int = 2, min_gap_s: float = 1.0) -> list[KeyframePick]:
    """Pick up to ``k`` best-quality frames at least ``min_gap_s`` apart, in time order.

    The best frame is always picked, so a non-empty segment yields at least one key frame.
    Ties keep the earlier frame, so the choice is deterministic.
    """
    if not frames or k <= 0:
        return []
    scored = sorted(
        ((quality(f.image_bgr), f) for f in frames), key=lambda qf: (-qf[0], qf[1].t)
    )
    picks: list[KeyframePick] = []
    for q, frame in scored:
        if all(abs(frame.t - p.frame.t) >= min_gap_s - 1e-9 for p in picks):
            picks.append(KeyframePick(frame=frame, quality=q))
            if len(picks) == k:
                break
    return sorted(picks, key=lambda p: p.frame.t)


def encode_jpeg(image_bgr: np.ndarray, max_side: int = 640, quality: int = 85) -> bytes:
    """Encode a BGR image as JPEG bytes, downscaled so its long side is at most ``max_side``.

    Raises:
        ValueError: OpenCV could not encode the image (empty or wrong dtype).
    """
    ok, buf = cv2.imencode(".jpg", resize_long_side(image_bgr, max_side), [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise ValueError(f"JPEG encoding failed for an image of shape {image_bgr.shape}")
    return buf.tobytes()
