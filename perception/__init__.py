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

from perception.describe.local import LocalDescriber
from perception.detectors.faces import FaceDetection, FaceDetector, FaceEmbedder
from perception.drivers.analyzer import Pipeline, SegmentAnalyzer
from perception.drivers.ingest import IngestReport, ingest_file
from perception.errors import MediaError, PerceptionError
from perception.media.video import Frame, MediaInfo, iter_frames, probe
from perception.segmenting.keyframes import encode_jpeg, quality, select_keyframes
from perception.segmenting.segment import Segment, Segmenter
from perception.settings import PerceptionConfig

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
