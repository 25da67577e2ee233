"""ReflectWorld perception: decode, segment, detect, identify, describe, match rules.

Sub-packages by stage (dependencies point one way, towards ``settings`` and ``errors``):

* ``media``: bytes → timestamped frames and audio (decoding, sources, the gateway, voice activity)
* ``segmenting``: frames → segments (scene, motion and speech cuts), key frames, the scheduler gate
* ``detectors``: faces, objects, text, speech, body descriptors and their lazy, sha256-checked loading
* ``identity``: galleries, the resolver (the only identity writer), reference stills, the per-user service
* ``describe``: the local describer, the VLM client and stage, anchoring, context layers, steering
* ``rules``: the plain-language rule compiler and the rule matcher
* ``drivers``: the per-segment analyzer, the :class:`~perception.drivers.analyzer.Pipeline` bundle,
  and the file and live drivers

Public API (blocking code; run it in a worker thread from async code):

* :class:`PerceptionConfig` (the manifest's ``perception:`` section, used as is at run time)
* :func:`ingest_file` → :class:`IngestReport`, driven by a pipeline that ``plugin.engine.Engine`` builds
* :func:`probe` → :class:`MediaInfo`, :func:`iter_frames` → :class:`Frame`
* :class:`Segmenter` / :class:`Segment`, :func:`select_keyframes`, :func:`encode_jpeg`
* :class:`FaceDetector`, :class:`FaceEmbedder`, :class:`LocalDescriber`
* errors: :class:`PerceptionError`, :class:`MediaError`
"""

from importlib import import_module
from typing import Any

#: public name → the module that defines it (imported on first use: ``import perception.settings``
#: stays light, and OpenCV/ONNX load only when a caller needs them)
_EXPORTS = {
    "LocalDescriber": "perception.describe.local",
    "FaceDetection": "perception.detectors.faces",
    "FaceDetector": "perception.detectors.faces",
    "FaceEmbedder": "perception.detectors.faces",
    "Pipeline": "perception.drivers.analyzer",
    "SegmentAnalyzer": "perception.drivers.analyzer",
    "IngestReport": "perception.drivers.ingest",
    "ingest_file": "perception.drivers.ingest",
    "MediaError": "perception.errors",
    "PerceptionError": "perception.errors",
    "Frame": "perception.media.video",
    "MediaInfo": "perception.media.video",
    "iter_frames": "perception.media.video",
    "probe": "perception.media.video",
    "encode_jpeg": "perception.segmenting.keyframes",
    "quality": "perception.segmenting.keyframes",
    "select_keyframes": "perception.segmenting.keyframes",
    "Segment": "perception.segmenting.segment",
    "Segmenter": "perception.segmenting.segment",
    "PerceptionConfig": "perception.settings",
}


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'perception' has no attribute {name!r}")
    return getattr(import_module(_EXPORTS[name]), name)


__all__ = [
    "FaceDetection",
    "FaceDetector",
    "FaceEmbedder",
    "Frame",
    "IngestReport",
    "LocalDescriber",
    "MediaError",
    "MediaInfo",
    "PerceptionConfig",
    "PerceptionError",
    "Pipeline",
    "Segment",
    "SegmentAnalyzer",
    "Segmenter",
    "encode_jpeg",
    "ingest_file",
    "iter_frames",
    "probe",
    "quality",
    "select_keyframes",
]
