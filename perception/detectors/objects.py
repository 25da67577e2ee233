"""Object detection: the vendored SSD household detector, or a user-supplied YOLO-style ONNX model.

:class:`SSDObjectDetector` runs SSD-MobileNetV2 trained on 24 Open Images classes (person, cup,
mug, laptop, chair, dog, …), converted from MediaPipe's TFLite file to ONNX (see
``perception/models/NOTICE.md``). Decoding follows MediaPipe's SSD calculators: 1917 anchors
over six feature maps, box scales 10/10/5/5, sigmoid class scores, input in [-1, 1].

:class:`YoloObjectDetector` accepts any ONNX detector with YOLOv5/v8-style output (one row per
candidate: cx, cy, w, h[, objectness], class scores) plus a label file with one name per line.

Both return :class:`ObjectDetection` values and load their model lazily; a missing model logs one
line and turns :meth:`detect` into a no-op.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import cv2
import numpy as np

from perception.detectors.labels import SSD_LABELS, detector_labels
from perception.detectors.model_files import MODELS_DIR, ort_options, verified

__all__ = ["ObjectDetection", "ObjectDetector", "SSDObjectDetector", "YoloObjectDetector", "detector_labels",
           "ssd_anchors"]

logger = logging.getLogger(__name__)

SSD_FILE = MODELS_DIR / "ssd_mobilenetv2_oidv4.onnx"
SSD_SHA256 = "2bb3d1214c083dc492183b45365ff3ab90ae910ac3bc0b867232044eff0997ae"
SSD_LABELS_SHA256 = "c148336a65f673013609a923fdcbdeec0f49df935045029c3746a3828a0e80e0"


@dataclass(frozen=True)
class ObjectDetection:
    """One detected object: lower-case label, score and box ``(x, y, w, h)`` in pixels."""

    label: str
    score: float
    box: tuple[int, int, int, int]


class ObjectDetector(Protocol):
    """Finds labelled boxes in a BGR image."""

    @property
    def available(self) -> bool: ...

    def detect(self, image_bgr: np.ndarray) -> list[ObjectDetection]: ...


def ssd_anchors() -> np.ndarray:
    """The 1917 SSD anchors ``(cx, cy, w, h)`` of MediaPipe's 300×300 MobileNetV2 SSD."""
    layers, smin, smax = 6, 0.2, 0.95
    strides, ratios = [16, 32, 64, 128, 256, 512], [1.0, 2.0, 0.5, 3.0, 1 / 3]

    def scale(i: int) -> float:
        return smin + (smax - smin) * i / (layers - 1)

    out: list[tuple[float, float, float, float]] = []
    for i, stride in enumerate(strides):
        fm = int(np.ceil(300 / stride))
        if i == 0:
            shapes = [(0.1, 1.0), (scale(0), 2.0), (scale(0), 0.5)]
        else:
            shapes = [(scale(i), a) for a in ratios]
            nxt = 1.0 if i == layers - 1 else scale(i + 1)
            shapes.append((float(np.sqrt(scale(i) * nxt)), 1.0))
        for y in range(fm):
            for x in range(fm):
                for s, ar in shapes:
                    out.append(((x + 0.5) / fm, (y + 0.5) / fm, s * float(np.sqrt(ar)), s / float(np.sqrt(ar))))
    return np.asarray(out, dtype=np.float32)


def _nms(boxes: np.ndarray, scores: np.ndarray, labels: np.ndarray, score_threshold: float,
         iou: float) -> list[int]:
    """Per-class non-maximum suppression; returns kept indices, best score first."""
    keep: list[int] = []
    for cls in np.unique(labels):
        idx = np.flatnonzero(labels == cls)
        picked = cv2.dnn.NMSBoxes(boxes[idx].tolist(), scores[idx].tolist(), score_threshold, iou)
        keep.extend(int(idx[i]) for i in np.asarray(picked).ravel())
    return sorted(keep, key=lambda i: -scores[i])


class _OnnxModel:
    """Lazy, thread-safe onnxruntime session around one verified file; ``build`` turns the verified
    path into the session (default: the file as it is)."""

    def __init__(self, path: Path, sha256: str | None, capability: str, hint: str,
                 build: Callable[[Path], object] | None = None) -> None:
        self._path, self._sha, self._capability, self._hint = path, sha256, capability, hint
        self._build = build or _plain_session
        self._session: object | None = None
        self._loaded = False
        self._lock = threading.Lock()

    def session(self) -> object | None:
        with self._lock:
            if not self._loaded:
                self._loaded = True
                path = verified(self._path, self._sha, self._capability, self._hint)
                if path is not None:
                    self._session = self._build(path)
            return self._session


def _plain_session(path: Path) -> object:
    import onnxruntime as ort

    return ort.InferenceSession(str(path), ort_options(), providers=["CPUExecutionProvider"])


class SSDObjectDetector:
    """The vendored 24-class household SSD (``perception/models``), loaded on first use.

    Args:
        score_threshold: minimum class score (sigmoid) of a detection.
        iou_threshold: NMS overlap above which the weaker box of a class is dropped.
    """

    def __init__(self, score_threshold: float = 0.5, iou_threshold: float = 0.45) -> None:
        self.score_threshold = score_threshold
        self.iou_threshold = iou_threshold
        self._model = _OnnxModel(SSD_FILE, SSD_SHA256, "object detection",
                                 "restore perception/models/ from the repository")
        self._anchors: np.ndarray | None = None
        self._labels: list[str] = []

    @property
    def available(self) -> bool:
        """Whether the model loaded (loads it on first call)."""
        return self._ready()

    def _ready(self) -> bool:
        if self._model.session() is None:
            return False
        if self._anchors is None:
            labels = verified(SSD_LABELS, SSD_LABELS_SHA256, "object detection", "restore perception/models/")
            if labels is None:
                return False
            self._labels = [line.strip().lower() for line in labels.read_text(encoding="utf-8").splitlines()]
            self._anchors = ssd_anchors()
        return True

    def detect(self, image_bgr: np.ndarray) -> list[ObjectDetection]:
        """Labelled boxes in a BGR image, best first (empty when the model is unavailable)."""
        if not self._ready():
            return []
        session = self._model.session()
        anchors = self._anchors
        assert session is not None and anchors is not None
        h, w = image_bgr.shape[:2]
        rgb = cv2.cvtColor(cv2.resize(image_bgr, (300, 300), interpolation=cv2.INTER_AREA), cv2.COLOR_BGR2RGB)
        x = (rgb.astype(np.float32) / 127.5 - 1.0).transpose(2, 0, 1)[None]
        raw_boxes, raw_scores = session.run(None, {"normalized_input_image_tensor": x})  # type: ignore[attr-defined]
        b = raw_boxes[0]
        scores = 1.0 / (1.0 + np.exp(-raw_scores[0]))
        scores[:, 0] = 0.0  # class 0 is the background
        cls = scores.argmax(1)
        best = scores.max(1)
        cx = b[:, 1] / 10 * anchors[:, 2] + anchors[:, 0]
        cy = b[:, 0] / 10 * anchors[:, 3] + anchors[:, 1]
        bw = np.exp(b[:, 3] / 5) * anchors[:, 2]
        bh = np.exp(b[:, 2] / 5) * anchors[:, 3]
        boxes = np.stack([(cx - bw / 2) * w, (cy - bh / 2) * h, bw * w, bh * h], 1)
        keep = np.flatnonzero(best >= self.score_threshold)
        if keep.size == 0:
            return []
        kept = _nms(boxes[keep], best[keep], cls[keep], self.score_threshold, self.iou_threshold)
        return [_clip(self._labels[int(cls[keep][i])], float(best[keep][i]), boxes[keep][i], w, h) for i in kept]


class YoloObjectDetector:
    """A user-supplied YOLO-style ONNX detector (output ``[1, N, 4+C]``/``[1, 4+C, N]`` or with objectness).

    Args:
        model_path: the ONNX file; labels_path: one class name per line.
        input_size: square input side the model expects (letterboxed, RGB, 0–1).
        sha256: optional pinned digest of ``model_path``.
    """

    def __init__(self, model_path: str | Path, labels_path: str | Path, input_size: int = 640,
                 score_threshold: float = 0.4, iou_threshold: float = 0.45, sha256: str | None = None) -> None:
        self.input_size = input_size
        self.score_threshold = score_threshold
        self.iou_threshold = iou_threshold
        self._labels_path = Path(labels_path)
        self._model = _OnnxModel(Path(model_path), sha256, "object detection", "fix perception.objects in the manifest")
        self._labels: list[str] | None = None

    @property
    def available(self) -> bool:
        """Whether the model and its label file loaded."""
        return self._ready()

    def _ready(self) -> bool:
        if self._model.session() is None:
            return False
        if self._labels is None:
            if not self._labels_path.is_file():
                logger.warning("object detection disabled: label file %s not found", self._labels_path)
                return False
            self._labels = [s.strip().lower() for s in self._labels_path.read_text(encoding="utf-8").splitlines()
                            if s.strip()]
        return True

    def detect(self, image_bgr: np.ndarray) -> list[ObjectDetection]:
        """Labelled boxes in a BGR image, best first."""
        if not self._ready():
            return []
        session, labels, size = self._model.session(), self._labels or [], self.input_size
        h, w = image_bgr.shape[:2]
        r = min(size / w, size / h)
        canvas = np.full((size, size, 3), 114, np.uint8)
        canvas[: int(h * r), : int(w * r)] = cv2.resize(image_bgr, (int(w * r), int(h * r)))
        x = cv2.cvtColor(canvas, cv2.COLOR_BGR2RGB).astype(np.float32).transpose(2, 0, 1)[None] / 255.0
        name = session.get_inputs()[0].name  # type: ignore[attr-defined]
        out = np.asarray(session.run(None, {name: x})[0])[0]  # type: ignore[attr-defined]
        if out.shape[0] < out.shape[1] and out.shape[0] in (4 + len(labels), 5 + len(labels)):
            out = out.T
        cls_scores = out[:, 5:] * out[:, 4:5] if out.shape[1] == 5 + len(labels) else out[:, 4:]
        cls, best = cls_scores.argmax(1), cls_scores.max(1)
        keep = np.flatnonzero(best >= self.score_threshold)
        if keep.size == 0:
            return []
        c = out[keep, :4] / r
        boxes = np.stack([c[:, 0] - c[:, 2] / 2, c[:, 1] - c[:, 3] / 2, c[:, 2], c[:, 3]], 1)
        kept = _nms(boxes, best[keep], cls[keep], self.score_threshold, self.iou_threshold)
        return [_clip(labels[int(cls[keep][i])] if int(cls[keep][i]) < len(labels) else str(int(cls[keep][i])),
                      float(best[keep][i]), boxes[i], w, h) for i in kept]


def _clip(label: str, score: float, box: np.ndarray, w: int, h: int) -> ObjectDetection:
    x0, y0 = max(0.0, float(box[0])), max(0.0, float(box[1]))
    x1, y1 = min(float(w), float(box[0] + box[2])), min(float(h), float(box[1] + box[3]))
    return ObjectDetection(label=label, score=round(score, 4),
                           box=(int(round(x0)), int(round(y0)), int(round(x1 - x0)), int(round(y1 - y0))))
