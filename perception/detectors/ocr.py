"""Reading text in key frames with ``rapidocr`` (PP-OCRv6 ONNX models; extra ``ocr``).

Tuned for video frames (``Det.limit_type=max``, ``Det.limit_side_len=960``: the long side is
capped at 960 px, which keeps 720p frames at ~0.5 s on two cores). The three model files are
checked against pinned sha256 values before the engine is built; a missing package or file
disables OCR with one log line.

OCR costs about 0.4 CPU-s a frame, and most video frames hold no text, so the analyzer reads at
most one key frame per segment, and only one that :func:`text_lines_likely` finds line-shaped
high-contrast strokes in (about 2 ms at 640 px); a frame nearly identical to the one read last
reuses its lines.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np

from perception.detectors.model_files import ort_threads, package_file, verified

__all__ = ["RapidTextReader", "TextLine", "text_lines_likely"]

logger = logging.getLogger(__name__)

_HINT = "pip install 'reflectworld-mm[ocr]'"
MODEL_SHA256 = {
    "PP-OCRv6_det_small.onnx": "090f04abcd9d9a7498bc4ebf677e4cb9bdce1fe4197ddb7e529f1ef44e1ff94f",
    "PP-OCRv6_rec_small.onnx": "6f327246b50388f3c176ae304bd95767ea6dc0c9ae92153ef8cbe210b3c14884",
    "ch_ppocr_mobile_v2.0_cls_mobile.onnx": "e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c",
}
#: video-frame tuning; rapidocr logs on its own (coloured) stderr handler, every model path at INFO and
#: a WARNING for each frame without text, so only its errors are let through
FRAME_PARAMS = {"Det.limit_type": "max", "Det.limit_side_len": 960, "Global.log_level": "error"}


def text_lines_likely(image_bgr: np.ndarray) -> int:
    """How many text-line-shaped regions a frame has (0: OCR would very likely read nothing).

    Morphological gradient → Otsu threshold → horizontal closing joins the strokes of a word or
    line into one component; a component counts when it is 8–60 px tall (at 640 px), at least 2.5
    times as wide as tall and mostly filled, the shape of printed text lines and captions.
    """
    h, w = image_bgr.shape[:2]
    scale = 640 / max(h, w)
    small = cv2.resize(image_bgr, (round(w * scale), round(h * scale)), interpolation=cv2.INTER_AREA) \
        if scale < 1 else image_bgr
    grey = cv2.cvtColor(small, cv2.COLOR_BGR2GRAY) if small.ndim == 3 else small
    grad = cv2.morphologyEx(grey, cv2.MORPH_GRADIENT, _ELLIPSE3)
    _, mask = cv2.threshold(grad, 0, 255, cv2.THRESH_BINARY | cv2.THRESH_OTSU)
    mask = cv2.morphologyEx(mask, cv2.MORPH_CLOSE, _LINE9)
    _, _, stats, _ = cv2.connectedComponentsWithStats(mask, connectivity=8)
    return sum(1 for _, _, bw, bh, area in stats[1:]
               if 8 <= bh <= 60 and bw >= 2.5 * bh and bw >= 24 and area >= 0.4 * bw * bh)


_ELLIPSE3 = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (3, 3))
_LINE9 = cv2.getStructuringElement(cv2.MORPH_RECT, (9, 1))


@dataclass(frozen=True)
class TextLine:
    """One line of text read in an image, with its recognition score."""

    text: str
    score: float


class RapidTextReader:
    """rapidocr engine built on first use (thread-safe).

    Args:
        min_score: lines recognised with a lower score are dropped.
        min_chars: lines shorter than this (after stripping) are dropped.
    """

    def __init__(self, min_score: float = 0.7, min_chars: int = 2) -> None:
        self.min_score = min_score
        self.min_chars = min_chars
        self._engine: Any = None
        self._loaded = False
        self._lock = threading.Lock()

    @property
    def available(self) -> bool:
        """Whether rapidocr and its verified models loaded."""
        return self._load() is not None

    def _load(self) -> Any:
        with self._lock:
            if self._loaded:
                return self._engine
            self._loaded = True
            for name, digest in MODEL_SHA256.items():
                if verified(package_file("rapidocr", "models", name), digest, "OCR", _HINT) is None:
                    return None
            try:
                from rapidocr import RapidOCR
            except ImportError:
                logger.warning("OCR disabled: rapidocr is not importable; %s", _HINT)
                return None
            threads = {"EngineConfig.onnxruntime.intra_op_num_threads": ort_threads(),
                       "EngineConfig.onnxruntime.inter_op_num_threads": 1}
            self._engine = RapidOCR(params={**FRAME_PARAMS, **threads})
            return self._engine

    def read(self, image_bgr: np.ndarray) -> list[TextLine]:
        """Lines of text in a BGR image, top to bottom (empty when OCR is unavailable)."""
        engine = self._load()
        if engine is None:
            return []
        result = engine(image_bgr)
        texts = list(getattr(result, "txts", None) or [])
        scores = list(getattr(result, "scores", None) or [])
        return [TextLine(t.strip(), round(float(s), 3)) for t, s in zip(texts, scores)
                if float(s) >= self.min_score and len(t.strip()) >= self.min_chars]
