"""ReflectWorld perception: decode, segment, key frames, faces, identity, description, ingestion.

Public API (blocking code; run it in a worker thread from async code):

* :func:`ingest_file` with :class:`IngestSettings` → :class:`IngestReport`
* :func:`probe` → :class:`MediaInfo`, :func:`iter_frames` → :class:`Frame`
* :class:`Segmenter` / :class:`Segment`, :func:`select_keyframes`, :func:`encode_jpeg`
* :class:`SegmentAnalyzer`: one segment → one idempotent `SegmentWrite` (shared by every driver)
* :class:`FaceDetector`, :class:`FaceEmbedder`, :class:`IdentityResolver`, :class:`LocalDescriber`
* errors: :class:`PerceptionError`, :class:`MediaError`
"""

from perception.describe.local import LocalDescriber
from perception.errors import MediaError, PerceptionError
from perception.detectors.faces import FaceDetection, FaceDetector, FaceEmbedder
from perception.identity.reference import IdentityResolver
from perception.drivers.analyzer import SegmentAnalyzer
from perception.drivers.ingest import IngestReport, IngestSettings, ingest_file
from perception.segmenting.keyframes import encode_jpeg, quality, select_keyframes
from perception.segmenting.segment import Segment, Segmenter
from perception.media.video import Frame, MediaInfo, iter_frames, probe

__all__ = [
    "FaceDetection",
    "FaceDetector",
    "FaceEmbedder",
    "Frame",
    "IdentityResolver",
    "IngestReport",
    "IngestSettings",
    "LocalDescriber",
    "MediaError",
    "MediaInfo",
    "PerceptionError",
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
