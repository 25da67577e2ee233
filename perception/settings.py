"""The perception settings: one model, used both as the manifest's ``perception:`` section and at run time.

:class:`PerceptionConfig` is validated once, when the manifest loads; the pipeline reads the same
object (there is no second, hand-mapped settings model). Backends are chosen by a ``type:``
discriminator per capability; the ``*_on`` properties say which models actually run, folding in
``level`` (``light`` runs none). Cross-field checks live on the model itself.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "ASRConfig",
    "BodyConfig",
    "COCOObjectsConfig",
    "ColorBodyConfig",
    "DEFAULT_MOTION_THRESHOLD",
    "DEFAULT_SCENE_THRESHOLD",
    "FacesConfig",
    "NoBackendConfig",
    "OCRConfig",
    "ObjectsConfig",
    "OnnxBodyConfig",
    "PerceptionConfig",
    "RapidOCRConfig",
    "SFACE_MATCH_THRESHOLD",
    "SpeakersConfig",
    "SSDObjectsConfig",
    "OBJECT_ENTITY_CLASSES",
    "ObjectEntitiesConfig",
    "Strict",
    "WhisperASRConfig",
    "YOLOObjectsConfig",
    "YuNetFacesConfig",
]

#: SFace cosine at or above which two faces are the same person (the model card's operating point)
SFACE_MATCH_THRESHOLD = 0.363
#: HSV histogram Bhattacharyya distance between sampled frames that counts as a scene cut (scaled down when
#: the frames' gain/offset-normalised structure did not change: see perception/segmenting/change.py). In-shot
#: motion and camera pans in the test clip stay below 0.25; its hard cuts measure 0.39–0.51.
DEFAULT_SCENE_THRESHOLD = 0.3
#: mean absolute grey-level difference (0–1) of consecutive sampled frames at 64×36, after fitting one
#: gain and offset (brightness moving as a whole is not motion), that counts as motion; motion starts when
#: the difference exceeds it by the frame's noise floor. Sensor noise of a static camera measures below
#: 0.005; a person walking through a room at 4 fps measures 0.02–0.06.
DEFAULT_MOTION_THRESHOLD = 0.02


class Strict(BaseModel):
    """Base of every manifest section: unknown keys are errors, not silently ignored."""

    model_config = ConfigDict(extra="forbid", validate_default=True)


class YuNetFacesConfig(Strict):
    """YuNet face detection + SFace embeddings (packaged ONNX files)."""

    type: Literal["yunet"] = "yunet"
    match_threshold: float = Field(SFACE_MATCH_THRESHOLD, ge=0.0, le=1.0, description="SFace cosine to match")


class NoBackendConfig(Strict):
    """Capability disabled."""

    type: Literal["none"] = "none"


FacesConfig = Annotated[YuNetFacesConfig | NoBackendConfig, Field(discriminator="type")]


class COCOObjectsConfig(Strict):
    """A vendored COCO-80 detector (perception/models/): CenterNet (default) or NanoDet."""

    type: Literal["coco"] = "coco"
    model: Literal["centernet", "nanodet"] = Field(
        "centernet", description="centernet: better hit rate on the repository's images; nanodet: ~2x faster")
    threshold: float | None = Field(None, ge=0.0, le=1.0, description="minimum detection score (null = the "
                                    "model's default: 0.25 centernet, 0.35 nanodet)")


class SSDObjectsConfig(Strict):
    """The vendored SSD-MobileNetV2 household detector (24 classes, perception/models/)."""

    type: Literal["ssd"] = "ssd"
    threshold: float = Field(0.5, ge=0.0, le=1.0, description="minimum detection score")


class YOLOObjectsConfig(Strict):
    """A user-supplied YOLO-style ONNX detector with its label file."""

    type: Literal["yolo"] = "yolo"
    model: str = Field(description="path of the .onnx file")
    labels: str = Field(description="label file, one class name per line")
    threshold: float = Field(0.5, ge=0.0, le=1.0)


ObjectsConfig = Annotated[COCOObjectsConfig | SSDObjectsConfig | YOLOObjectsConfig | NoBackendConfig,
                          Field(discriminator="type")]

#: detector classes that become remembered object entities by default (pets, vehicles, bags, bikes)
OBJECT_ENTITY_CLASSES: tuple[str, ...] = (
    "cat", "dog", "bird", "horse", "bicycle", "motorcycle", "car", "bus", "truck", "boat", "backpack", "handbag",
    "suitcase", "umbrella", "laptop", "teddy bear")


class ObjectEntitiesConfig(Strict):
    """Which detected objects become entities (re-identified by appearance within a camera)."""

    classes: list[str] = Field(default_factory=lambda: list(OBJECT_ENTITY_CLASSES),
                               description="detector labels that become object entities; [] = none")
    match_threshold: float = Field(0.8, gt=0.0, le=1.0, description="appearance cosine at which an object on "
                                   "the same camera is the same entity")
    min_box_px: int = Field(48, ge=8, le=2048, description="smaller boxes never create or update an entity")


class SpeakersConfig(Strict):
    """Speaker diarization (pyannote segmentation-3.0) + voice embeddings (CAM++), vendored ONNX."""

    type: Literal["pyannote"] = "pyannote"
    match_threshold: float = Field(0.65, gt=0.0, le=1.0, description="CAM++ cosine at which two voices are the "
                                   "same speaker")


SpeakersChoice = Annotated[SpeakersConfig | NoBackendConfig, Field(discriminator="type")]


class RapidOCRConfig(Strict):
    """rapidocr (PP-OCR ONNX) on key frames; needs the `ocr` extra."""

    type: Literal["rapidocr"] = "rapidocr"


OCRConfig = Annotated[RapidOCRConfig | NoBackendConfig, Field(discriminator="type")]


class WhisperASRConfig(Strict):
    """faster-whisper with the packaged tiny.en model; needs the `asr` extra."""

    type: Literal["whisper"] = "whisper"
    model_dir: str | None = Field(None, description="a CTranslate2 Whisper folder instead of tiny.en")


ASRConfig = Annotated[WhisperASRConfig | NoBackendConfig, Field(discriminator="type")]


class ColorBodyConfig(Strict):
    """Colour/texture appearance descriptor of person boxes."""

    type: Literal["color"] = "color"


class OnnxBodyConfig(Strict):
    """A person re-identification ONNX model."""

    type: Literal["onnx"] = "onnx"
    model: str = Field(description="path of the .onnx re-ID model")


BodyConfig = Annotated[ColorBodyConfig | OnnxBodyConfig | NoBackendConfig, Field(discriminator="type")]


class PerceptionConfig(Strict):
    """How a stream is cut into segments and what is analysed in each."""

    level: Literal["light", "full"] = Field(
        "full", description="light = segments, key frames and descriptions only; full = + faces, objects, bodies, "
        "OCR and speech")
    mode: Literal["offline_quality", "live_latency"] = Field(
        "offline_quality",
        description="offline_quality = every segment, deterministic order; live_latency = gate static/silent "
        "segments, commit identity first, enrich with the VLM afterwards",
    )
    sample_fps: float = Field(4.0, gt=0, le=30, description="frames analysed per media second")
    min_segment_s: float = Field(0.5, ge=0, le=600, description="shortest segment a cut may end")
    max_segment_s: float = Field(10.0, gt=0, le=3600, description="longest segment; longer shots are split")
    max_still_segment_s: float = Field(
        300.0, gt=0, le=3600, description="longest segment in which nothing moved and nobody spoke (a still, "
        "quiet camera writes one segment per this many seconds instead of one per max_segment_s)")
    scene_threshold: float = Field(DEFAULT_SCENE_THRESHOLD, gt=0, le=1, description="histogram distance that cuts (when the "
                                 "picture's structure changed too)")
    motion_threshold: float | None = Field(
        DEFAULT_MOTION_THRESHOLD, gt=0, le=1, description="mean grey-level frame difference, after a gain/offset fit, "
        "that counts as motion; motion starting in a still scene (above this plus the frame's noise floor), or stopping "
        "for motion_hold_s, is a segment boundary; null = no motion cuts")
    motion_hold_s: float = Field(1.0, gt=0, le=60, description="how long motion must have stopped to cut")
    keyframes_per_segment: int = Field(2, ge=1, le=16)
    keyframe_min_gap_s: float = Field(1.0, ge=0, le=60, description="minimum time between two key frames")
    identity_frames: int = Field(
        8, ge=0, le=32, description="sampled frames per segment, besides key frames, searched for faces (identity "
        "evidence only)")
    model_threads: int = Field(
        1, ge=1, le=4, description="threads of one model call (ONNX Runtime, OpenCV, Whisper, the text embedder), per "
        "process; 1 costs the least CPU per media second on a box that runs several cameras, more finish one file "
        "sooner")
    jpeg_max_side: int = Field(640, ge=64, le=4096, description="longest side of a stored key frame")
    jpeg_quality: int = Field(75, ge=10, le=100, description="JPEG quality of stored key frames (75: ~18 KB at 640 px)")
    faces: FacesConfig = Field(default_factory=YuNetFacesConfig)
    objects: ObjectsConfig = Field(default_factory=COCOObjectsConfig)
    object_entities: ObjectEntitiesConfig = Field(default_factory=ObjectEntitiesConfig)
    speakers: SpeakersChoice = Field(default_factory=SpeakersConfig)
    ocr: OCRConfig = Field(default_factory=RapidOCRConfig)
    asr: ASRConfig = Field(default_factory=WhisperASRConfig)
    body: BodyConfig = Field(default_factory=ColorBodyConfig)

    @model_validator(mode="after")
    def _segment_bounds(self) -> PerceptionConfig:
        if self.min_segment_s > self.max_segment_s:
            raise ValueError(f"min_segment_s ({self.min_segment_s}) is larger than max_segment_s "
                             f"({self.max_segment_s}); make min_segment_s ≤ max_segment_s")
        return self

    # ------------------------------------------------------------------ what runs

    def _on(self, backend: BaseModel) -> bool:
        return self.level == "full" and getattr(backend, "type", "none") != "none"

    @property
    def faces_on(self) -> bool:
        """Faces are detected, embedded and identified."""
        return self._on(self.faces)

    @property
    def objects_on(self) -> bool:
        """Objects are detected on key frames."""
        return self._on(self.objects)

    @property
    def ocr_on(self) -> bool:
        """Text is read on key frames."""
        return self._on(self.ocr)

    @property
    def asr_on(self) -> bool:
        """Speech is transcribed."""
        return self._on(self.asr)

    @property
    def body_on(self) -> bool:
        """Person boxes are described for the body gallery."""
        return self._on(self.body)

    @property
    def speakers_on(self) -> bool:
        """Speech is diarized and voices are matched to people."""
        return self._on(self.speakers)

    @property
    def face_match_threshold(self) -> float:
        return getattr(self.faces, "match_threshold", SFACE_MATCH_THRESHOLD)

    @property
    def object_type(self) -> str:
        return self.objects.type

    @property
    def object_model(self) -> str | None:
        """The user model path (``yolo``), the vendored model name (``coco``), else ``None``."""
        return getattr(self.objects, "model", None)

    @property
    def object_labels(self) -> str | None:
        return getattr(self.objects, "labels", None)

    @property
    def object_threshold(self) -> float | None:
        return getattr(self.objects, "threshold", 0.5)

    @property
    def asr_model_dir(self) -> str | None:
        return getattr(self.asr, "model_dir", None)

    @property
    def body_model(self) -> str | None:
        return getattr(self.body, "model", None)
