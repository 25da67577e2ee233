"""Body appearance descriptors for person boxes (what people wear), for ``gallery_body``.

:class:`ColourTextureDescriptor` needs no weights: the box is split into an upper and a lower
half (torso / legs, the head strip excluded), and each half contributes an HSV colour histogram
(8 hue × 4 saturation bins plus 4 grey levels for unsaturated pixels) and an 8-bin gradient
orientation histogram (texture: stripes vs plain). The result is square-rooted (Hellinger) and
L2-normalised, so a dot product is a similarity in [0, 1]. It is weak evidence: it can support
a face match or keep a pending sighting alive, never create an identity by itself.

:class:`OnnxBodyDescriptor` runs a user-supplied person re-ID ONNX model (input ``1×3×H×W``,
ImageNet normalisation, output one vector) when the manifest names one.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Protocol

import cv2
import numpy as np

from perception.detectors.model_files import ort_options, verified

__all__ = ["BodyDescriptor", "ColourTextureDescriptor", "OnnxBodyDescriptor", "body_quality"]

logger = logging.getLogger(__name__)

MIN_BODY_PX = 48


class BodyDescriptor(Protocol):
    """Turns a person box of a BGR image into a unit vector."""

    name: str

    def describe(self, image_bgr: np.ndarray, box: tuple[int, int, int, int]) -> np.ndarray | None: ...


def _crop(image_bgr: np.ndarray, box: tuple[int, int, int, int]) -> np.ndarray | None:
    x, y, w, h = box
    H, W = image_bgr.shape[:2]
    x0, y0, x1, y1 = max(0, x), max(0, y), min(W, x + w), min(H, y + h)
    if x1 - x0 < 8 or y1 - y0 < 16:
        return None
    return image_bgr[y0:y1, x0:x1]


def body_quality(box: tuple[int, int, int, int], score: float) -> float:
    """Slot quality of a person box: detector score weighted by height (saturating at 240 px)."""
    return float(score) * min(1.0, box[3] / 240.0)


def _half_features(part: np.ndarray) -> np.ndarray:
    hsv = cv2.cvtColor(part, cv2.COLOR_BGR2HSV)
    h, s, v = hsv[..., 0].ravel(), hsv[..., 1].ravel(), hsv[..., 2].ravel()
    coloured = s >= 40
    colour = np.histogram2d(h[coloured], s[coloured], bins=[8, 4], range=[[0, 180], [40, 256]])[0].ravel()
    grey = np.histogram(v[~coloured], bins=4, range=(0, 256))[0]
    hist = np.concatenate([colour, grey]).astype(np.float32)
    hist /= max(float(hist.sum()), 1.0)
    gray = cv2.cvtColor(part, cv2.COLOR_BGR2GRAY).astype(np.float32)
    gx, gy = cv2.Sobel(gray, cv2.CV_32F, 1, 0), cv2.Sobel(gray, cv2.CV_32F, 0, 1)
    mag, ang = cv2.cartToPolar(gx, gy)
    tex = np.histogram((ang.ravel() % np.pi), bins=8, range=(0, np.pi), weights=mag.ravel())[0].astype(np.float32)
    tex /= max(float(tex.sum()), 1e-6)
    return np.concatenate([hist, 0.5 * tex])


class ColourTextureDescriptor:
    """Weight-free colour + texture descriptor of a person box (see the module docstring)."""

    name = "colour-texture-v1"

    def describe(self, image_bgr: np.ndarray, box: tuple[int, int, int, int]) -> np.ndarray | None:
        """The descriptor of ``box`` (``None`` when the box is too small to describe)."""
        if box[3] < MIN_BODY_PX:
            return None
        crop = _crop(image_bgr, box)
        if crop is None:
            return None
        crop = cv2.resize(crop, (64, 128), interpolation=cv2.INTER_AREA)
        upper, lower = crop[20:74], crop[74:128]  # skip the head strip: faces are matched separately
        vec = np.sqrt(np.concatenate([_half_features(upper), _half_features(lower)]))
        norm = float(np.linalg.norm(vec))
        return (vec / norm).astype(np.float32) if norm > 0 else None


class OnnxBodyDescriptor:
    """A user-supplied person re-ID ONNX model (e.g. OSNet), loaded lazily."""

    def __init__(self, model_path: str | Path, input_size: tuple[int, int] = (256, 128),
                 sha256: str | None = None) -> None:
        self.name = f"onnx:{Path(model_path).name}"
        self._path, self._sha, self.input_size = Path(model_path), sha256, input_size
        self._session: object | None = None
        self._loaded = False

    def describe(self, image_bgr: np.ndarray, box: tuple[int, int, int, int]) -> np.ndarray | None:
        """The model's unit vector for ``box`` (``None`` when too small or the model is unusable)."""
        if not self._loaded:
            self._loaded = True
            path = verified(self._path, self._sha, "body re-ID model", "fix perception.body in the manifest")
            if path is not None:
                import onnxruntime as ort

                self._session = ort.InferenceSession(str(path), ort_options(), providers=["CPUExecutionProvider"])
        crop = _crop(image_bgr, box) if box[3] >= MIN_BODY_PX else None
        if self._session is None or crop is None:
            return None
        h, w = self.input_size
        rgb = cv2.cvtColor(cv2.resize(crop, (w, h)), cv2.COLOR_BGR2RGB).astype(np.float32) / 255.0
        x = ((rgb - [0.485, 0.456, 0.406]) / [0.229, 0.224, 0.225]).astype(np.float32).transpose(2, 0, 1)[None]
        name = self._session.get_inputs()[0].name  # type: ignore[attr-defined]
        vec = np.asarray(self._session.run(None, {name: x})[0], dtype=np.float32).ravel()  # type: ignore[attr-defined]
        norm = float(np.linalg.norm(vec))
        return vec / norm if norm > 0 else None
