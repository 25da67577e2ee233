"""Reading text in key frames with ``rapidocr`` (PP-OCRv6 ONNX models; extra ``ocr``).

Tuned for video frames (``Det.limit_type=max``, ``Det.limit_side_len=960``: the long side is
capped at 960 px, which keeps 720p frames at ~0.5 s on two cores). The three model files are
checked against pinned sha256 values before the engine is built; a missing package or file
disables OCR with one log line. OCR runs on key frames only.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from perception.detectors.backends import package_file, verified

__all__ = ["RapidTextReader", "TextLine"]

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
            self._engine = RapidOCR(params=dict(FRAME_PARAMS))
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
