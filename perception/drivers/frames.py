"""What one segment's frames show: faces, objects, bodies and text on its key frames, faces on a few more.

:func:`perceive_keyframes` runs the face detector and the object detector on each key frame (a key
frame that copies the one looked at before it takes that frame's findings) and embeds every face
in one batch; :func:`add_bodies` adds the person box around each embedded face as body evidence;
:func:`read_text` runs OCR on the one key frame most likely to hold text; :func:`identity_faces`
looks for faces on a few more frames when the key frames alone do not identify everyone clearly.
Each takes the per-source :class:`~perception.drivers.analyzer.SegmentAnalyzer` as ``run``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol

import cv2
import numpy as np

from perception.detectors.backends import Perceivers
from perception.detectors.body import body_quality
from perception.detectors.faces import FaceDetector, FaceEmbedder
from perception.detectors.objects import ObjectDetection
from perception.detectors.ocr import text_lines_likely
from perception.identity.resolver import FaceInput, Resolver, face_turn
from perception.segmenting.keyframes import KeyframePick
from perception.segmenting.scheduler import frame_changed
from perception.segmenting.segment import Segment
from perception.settings import PerceptionConfig

__all__ = ["add_bodies", "identity_faces", "perceive_keyframes", "read_text"]


class FrameRun(Protocol):
    """What these functions read and keep of a :class:`~perception.drivers.analyzer.SegmentAnalyzer`."""

    settings: PerceptionConfig
    resolver: Resolver
    detector: FaceDetector | None
    embedder: FaceEmbedder | None
    perceivers: Perceivers | None
    #: the frame OCR read last and its lines
    _ocr_last: tuple[np.ndarray, list[str]] | None
    #: the key frame whose faces and objects were detected last, with them (faces embedded)
    _perceived: tuple[np.ndarray, list[FaceInput], list[ObjectDetection]] | None


#: mean grey difference under which a frame counts as a copy of one already analysed (OCR, identity frames)
OCR_SAME_FRAME = 0.01
#: mean grey difference under which a key frame takes the detections of the key frame looked at last
SAME_FRAME = 0.005
#: a key-frame face this far above the match threshold (and clear of the runner-up) needs no extra frames
CONFIDENT_MARGIN = 0.15
#: identity frames are searched for faces at this long side first (faces the resolver may use are ≥ 40 px at 640)
IDENTITY_DETECT_SIDE = 320


def _perceive_frame(run: FrameRun, image: np.ndarray, t: float, kf_id: str) -> tuple[
        list[FaceInput], list[ObjectDetection]]:
    """Faces (embedded later, in one batch per segment) and objects of one key frame."""
    models = run.perceivers or Perceivers()
    objects: list[ObjectDetection] = models.objects.detect(image) if models.objects is not None else []
    faces: list[FaceInput] = []
    if run.detector is not None and run.embedder is not None:
        faces = [FaceInput(det, None, t, kf_id, sharpness=_face_sharpness(image, det.box), frame_shape=image.shape[:2])
                 for det in run.detector.detect(image)]
    return faces, objects


def perceive_keyframes(run: FrameRun, images: list[np.ndarray], picks: list[KeyframePick],
                        kf_ids: list[str]) -> list[tuple[list[FaceInput], list[ObjectDetection]]]:
    """Faces (embedded in one batch) and objects of each key frame.

    A key frame that is a copy of the key frame looked at before it (a still picture, a pause; mean
    grey difference ≤ :data:`SAME_FRAME`) takes that frame's faces, embeddings and objects instead of
    running the detectors again: the models would find the same things.
    """
    previous = run._perceived
    reference = previous[0] if previous is not None else None
    origin: list[int] = []  # per key frame: itself, an earlier key frame of the segment, or -1 (previous segment)
    for k, image in enumerate(images):
        if reference is not None and not frame_changed(reference, image, SAME_FRAME):
            origin.append(origin[-1] if origin else -1)
        else:
            origin.append(k)
            reference = image
    fresh = [k for k, o in enumerate(origin) if o == k]
    detected = {k: _perceive_frame(run, images[k], picks[k].frame.t, kf_ids[k]) for k in fresh}
    embedded = iter(_embed_faces(run, [f for k in fresh for f in detected[k][0]],
                           [images[k] for k in fresh for _ in detected[k][0]]))
    for k in fresh:
        detected[k] = ([next(embedded) for _ in detected[k][0]], detected[k][1])
    found: list[tuple[list[FaceInput], list[ObjectDetection]]] = []
    for k, o in enumerate(origin):
        if o == k:
            found.append(detected[k])
            continue
        faces, objects = detected[o] if o >= 0 else (previous[1], previous[2])  # type: ignore[index]
        found.append(([replace(f, frame_t=picks[k].frame.t, keyframe_id=kf_ids[k]) for f in faces], list(objects)))
    if fresh:
        last = fresh[-1]
        run._perceived = (images[last], *detected[last])
    return found


def _embed_faces(run: FrameRun, faces: list[FaceInput], images: list[np.ndarray]) -> list[FaceInput]:
    """Embed the faces the resolver may use in one network call (the rest keep no embedding)."""
    todo = [i for i, f in enumerate(faces) if run.resolver.identifiable(f.detection)]
    if run.embedder is None or not todo:
        return faces
    vecs = run.embedder.embed_many([(images[i], faces[i].detection) for i in todo])
    out = list(faces)
    for i, vec in zip(todo, vecs):
        out[i] = replace(faces[i], embedding=vec)
    return out


def add_bodies(run: FrameRun, faces: list[FaceInput], image: np.ndarray,
                objects: list[ObjectDetection]) -> list[FaceInput]:
    """Body evidence (the person box around each embedded face) for the faces of one key frame."""
    models = run.perceivers or Perceivers()
    people = [o for o in objects if o.label == "person"]
    if models.body is None or not people:
        return faces
    out = []
    for face in faces:
        box = _person_box(face.detection.box, people) if face.embedding is not None else None
        if box is not None:
            face = replace(face, body=models.body.describe(image, box.box), body_quality=body_quality(box.box, box.score))
        out.append(face)
    return out


def read_text(run: FrameRun, images: list[np.ndarray]) -> list[str]:
    """OCR on the one key frame most likely to hold text; a near-copy of the frame read last reuses its lines."""
    models = run.perceivers or Perceivers()
    if models.ocr is None or not images:
        return []
    likely = [text_lines_likely(image) for image in images]
    best = int(np.argmax(likely))
    if likely[best] == 0:
        return []
    image = images[best]
    if run._ocr_last is not None and not frame_changed(run._ocr_last[0], image, OCR_SAME_FRAME):
        return list(run._ocr_last[1])
    lines = list(dict.fromkeys(line.text for line in models.ocr.read(image)))
    run._ocr_last = (image, lines)
    return lines


def _confident(run: FrameRun, faces: list[FaceInput]) -> bool:
    """Every embedded key-frame face already matches a known entity clearly (extra frames add nothing)."""
    embedded = [(f.embedding, face_turn(f.detection)) for f in faces if f.embedding is not None]
    if not embedded:
        return False
    for vec, turn in embedded:
        cands = run.resolver.faces.candidates(vec, top=2, turn=turn)
        if not cands or cands[0].score < run.resolver.match_threshold + CONFIDENT_MARGIN:
            return False
        if len(cands) > 1 and cands[0].score - cands[1].score < run.resolver.margin:
            return False
    return True


def identity_faces(run: FrameRun, segment: Segment, key_frames: list[np.ndarray],
                    key_faces: list[FaceInput]) -> list[FaceInput]:
    """Faces on up to ``identity_frames`` evenly spaced non-key frames (no key-frame id, no body).

    None when the key-frame faces already match confidently; a frame that barely differs from the
    last one looked at is passed over. Detection looks at :data:`IDENTITY_DETECT_SIDE` first, and every
    face is embedded in one batch.
    """
    n = run.settings.identity_frames
    if n == 0 or run.detector is None or run.embedder is None or _confident(run, key_faces):
        return []
    ids = {id(image) for image in key_frames}
    others = [f for f in segment.frames if id(f.image_bgr) not in ids]
    if len(others) > n:
        others = [others[round(i * (len(others) - 1) / max(n - 1, 1))] for i in range(n)]
    faces: list[FaceInput] = []
    images: list[np.ndarray] = []
    last = key_frames[0] if key_frames else None
    for frame in others:
        image = frame.image_bgr
        if last is not None and not frame_changed(last, image, OCR_SAME_FRAME):
            continue
        last = image
        for det in run.detector.detect(image, coarse_side=IDENTITY_DETECT_SIDE):
            if run.resolver.identifiable(det):
                faces.append(FaceInput(det, None, frame.t, None, sharpness=_face_sharpness(image, det.box),
                                       frame_shape=image.shape[:2]))
                images.append(image)
    return _embed_faces(run, faces, images)


def _person_box(face_box: tuple[int, int, int, int], people: list[ObjectDetection]) -> ObjectDetection | None:
    """The smallest person box that contains the face's centre."""
    cx, cy = face_box[0] + face_box[2] / 2, face_box[1] + face_box[3] / 2
    inside = [p for p in people if p.box[0] <= cx <= p.box[0] + p.box[2] and p.box[1] <= cy <= p.box[1] + p.box[3]]
    return min(inside, key=lambda p: p.box[2] * p.box[3], default=None)


def _face_sharpness(image: np.ndarray, box: tuple[int, int, int, int]) -> float | None:
    x, y, w, h = box
    crop = image[max(0, y):max(0, y + h), max(0, x):max(0, x + w)]
    if crop.size == 0:
        return None
    grey = cv2.cvtColor(cv2.resize(crop, (64, 64), interpolation=cv2.INTER_AREA), cv2.COLOR_BGR2GRAY)
    return float(cv2.Laplacian(grey, cv2.CV_64F).var())
