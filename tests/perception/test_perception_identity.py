"""Face → entity resolution against the face gallery."""

from __future__ import annotations

import numpy as np

from memory import GalleryFace
from perception.detectors.faces import FaceDetection
from perception.identity.resolver import FaceInput, Resolver


class _Ids:
    """Mimics the store: the next id after the highest one it has stored."""

    def __init__(self, stored: int = 0) -> None:
        self.stored = stored

    def next_entity_id(self, kind: str, key: str | None = None) -> str:
        return f"{kind}_{self.stored + 1:04d}"


def _unit(seed: int, dim: int = 128) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=dim).astype(np.float32)
    return v / np.linalg.norm(v)


def _near(v: np.ndarray, seed: int, noise: float) -> np.ndarray:
    w = v + noise * _unit(seed)
    return (w / np.linalg.norm(w)).astype(np.float32)


def _face(vec: np.ndarray | None, t: float = 0.0, size: int = 100, score: float = 0.9) -> FaceInput:
    det = FaceDetection(box=(10, 10, size, size), score=score, landmarks=((0.0, 0.0),) * 5, row=np.zeros(15))
    return FaceInput(detection=det, embedding=vec, frame_t=t, keyframe_id="kf_x")


def test_two_new_faces_in_one_segment_get_distinct_ids() -> None:
    r = Resolver([], _Ids())
    out = r.resolve([_face(_unit(1)), _face(_unit(2))], "src", 0, now=0.0)
    assert out.assignments == ["person_0001", "person_0002"]
    assert out.new_entity_ids == ["person_0001", "person_0002"]
    assert len(out.gallery_faces) == 2


def test_faces_of_the_same_new_person_collapse_into_one_entity() -> None:
    a = _unit(1)
    r = Resolver([], _Ids())
    out = r.resolve([_face(a, t=0.0), _face(_near(a, 5, 0.5), t=1.0)], "src", 0, now=0.0)
    assert out.assignments == ["person_0001", "person_0001"]
    assert out.entity_ids == ["person_0001"]


def test_a_known_face_matches_its_gallery_entity() -> None:
    a = _unit(1)
    gallery = [GalleryFace(id="gal_1", entity_id="person_0007", embedding=a.tolist(), quality=0.5)]
    r = Resolver(gallery, _Ids(stored=7))
    out = r.resolve([_face(_near(a, 3, 0.6)), _face(_unit(9))], "src", 3, now=0.0)
    assert out.assignments == ["person_0007", "person_0008"]
    assert out.similarity["person_0007"] > 0.363


def test_tiny_or_weak_faces_are_not_identified() -> None:
    r = Resolver([], _Ids())
    out = r.resolve([_face(_unit(1), size=20), _face(_unit(2), score=0.62), _face(None)], "src", 0, now=0.0)
    assert out.assignments == [None, None, None]
    assert out.gallery_faces == []


def test_the_gallery_keeps_diverse_slots_and_at_most_five_per_entity() -> None:
    a = _unit(1)
    r = Resolver([], _Ids(), max_slots=5)
    r.resolve([_face(a)], "src", 0, now=0.0)
    same = r.resolve([_face(a.copy())], "src", 1, now=0.0)  # similarity 1.0: not diverse
    assert same.gallery_faces == []
    for seg in range(2, 12):
        r.resolve([_face(_near(a, 100 + seg, 0.7), size=40 + seg * 10)], "src", seg, now=0.0)
    slots = [g for g in r.faces.entities["person_0001"]]
    assert len(slots) == 5
    assert sorted(r.faces.entities) == ["person_0001"]


def test_two_faces_on_one_frame_never_resolve_to_the_same_entity() -> None:
    a = _unit(1)
    r = Resolver([], _Ids())
    out = r.resolve([_face(a, t=0.0), _face(_near(a, 2, 0.3), t=0.0)], "src", 0, now=0.0)
    assert out.assignments[0] != out.assignments[1]
