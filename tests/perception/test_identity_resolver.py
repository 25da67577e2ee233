"""The resolver: match / new / ambiguous, pending weak evidence, unsafe evidence, decisions."""

from __future__ import annotations

import json

import numpy as np
import pytest

from memory import GalleryFace
from perception.detectors.faces import FaceDetection
from perception.identity.resolver import FaceInput, Resolver


class _Ids:
    def __init__(self, stored: int = 0) -> None:
        self.stored = stored

    def next_entity_id(self, kind: str, key: str | None = None) -> str:
        return f"{kind}_{self.stored + 1:04d}"


def _unit(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=128).astype(np.float32)
    return v / np.linalg.norm(v)


def _mix(a: np.ndarray, b: np.ndarray, w: float) -> np.ndarray:
    v = w * a + (1 - w) * b
    return (v / np.linalg.norm(v)).astype(np.float32)


def _face(vec: np.ndarray | None, t: float = 0.0, size: int = 100, score: float = 0.9,
          sharpness: float | None = 200.0) -> FaceInput:
    det = FaceDetection(box=(10, 10, size, size), score=score, landmarks=((20.0, 20.0),) * 5, row=np.zeros(15))
    return FaceInput(detection=det, embedding=vec, frame_t=t, keyframe_id=f"kf_{t}", sharpness=sharpness)


def test_unsafe_evidence_is_never_identified_nor_written() -> None:
    r = Resolver([], _Ids())
    out = r.resolve([_face(_unit(1), size=20), _face(_unit(2), score=0.6), _face(_unit(3), sharpness=2.0),
                     _face(None)], "src", 0, now=0.0)
    assert out.assignments == [None, None, None, None]
    assert out.gallery_faces == [] and out.decisions == [] and not r.faces.entities
    assert out.outcomes[0].startswith("unsafe:tiny") and "blurred" in out.outcomes[2]


def test_a_weak_unknown_face_stays_pending_until_a_second_frame_confirms_it() -> None:
    a = _unit(1)
    r = Resolver([], _Ids())
    first = r.resolve([_face(a, t=0.0, score=0.8)], "src", 0, now=0.0)
    assert first.assignments == [None] and first.outcomes == ["pending"] and len(r.pending) == 1
    second = r.resolve([_face(_mix(a, _unit(7), 0.8), t=2.0, score=0.8)], "src", 1, now=0.0)
    assert second.assignments == ["person_0001"] and second.new_entity_ids == ["person_0001"]
    decision = second.decisions[0]
    assert decision.action == "confirm_pending" and json.loads(decision.evidence_json)[0]["pending_support"] == 2
    assert not r.pending


def test_a_strong_unknown_face_is_a_new_entity_and_a_known_one_matches() -> None:
    a = _unit(1)
    gallery = [GalleryFace(id="gal_1", entity_id="person_0003", embedding=a.tolist(), quality=0.5)]
    r = Resolver(gallery, _Ids(stored=3))
    out = r.resolve([_face(_mix(a, _unit(5), 0.7), t=0.0), _face(_unit(9), t=0.0)], "src", 4, now=1.0)
    assert out.assignments == ["person_0003", "person_0004"]
    actions = {d.entity_id: d.action for d in out.decisions}
    assert actions == {"person_0003": "match", "person_0004": "new"}
    match = next(d for d in out.decisions if d.action == "match")
    assert match.score >= 0.363 and "matched the gallery" in match.reason


def test_a_face_between_two_similar_entities_is_ambiguous_and_not_assigned() -> None:
    a, b = _unit(1), _unit(2)
    gallery = [GalleryFace(id="g1", entity_id="person_0001", embedding=a.tolist(), quality=0.5),
               GalleryFace(id="g2", entity_id="person_0002", embedding=b.tolist(), quality=0.5)]
    r = Resolver(gallery, _Ids(stored=2))
    out = r.resolve([_face(_mix(a, b, 0.5))], "src", 0, now=0.0)
    assert out.assignments == [None] and out.outcomes == ["ambiguous"] and out.gallery_faces == []


def test_weak_matches_do_not_update_the_gallery() -> None:
    a = _unit(1)
    gallery = [GalleryFace(id="g1", entity_id="person_0001", embedding=a.tolist(), quality=0.5)]
    r = Resolver(gallery, _Ids(stored=1))
    out = r.resolve([_face(_mix(a, _unit(3), 0.6), score=0.8)], "src", 0, now=0.0)
    assert out.assignments == ["person_0001"] and out.gallery_faces == []
    strong = r.resolve([_face(_mix(a, _unit(4), 0.6), size=120)], "src", 1, now=0.0)
    assert [g.entity_id for g in strong.gallery_faces] == ["person_0001"]


def test_confirming_pending_sightings_behind_an_unrelated_one_does_not_crash() -> None:
    # An unrelated weak sighting sits first in the pending queue, so removing the confirmed
    # group has to step past it (this compared the numpy vectors and raised before).
    r = Resolver([], _Ids())
    r.resolve([_face(_unit(40), t=0.0, score=0.8)], "src", 0, now=0.0)
    a = _unit(1)
    r.resolve([_face(a, t=1.0, score=0.8)], "src", 1, now=0.0)
    out = r.resolve([_face(_mix(a, _unit(7), 0.8), t=2.0, score=0.8)], "src", 2, now=0.0)
    assert out.assignments == ["person_0001"] and out.outcomes == ["confirm_pending"]
    assert len(r.pending) == 1 and float(np.dot(r.pending[0].vec, _unit(40))) > 0.99


def test_a_frontal_face_needs_much_stronger_evidence_to_match_a_profile_gallery() -> None:
    """Real YuNet landmarks: the Hamilton pianist in profile (≈0.8–1.2 s) and the frontal performer
    (≈4.9–5.3 s) fall on either side of PROFILE_TURN; a frontal face against profile slots is
    discounted below the match threshold at a cosine that matches within a pose."""
    from pathlib import Path

    import av

    from perception.detectors.faces import FaceDetector
    from perception.identity.reid import CROSS_POSE_DISCOUNT, PROFILE_TURN
    from perception.identity.resolver import face_turn

    detector, turns = FaceDetector(), {}
    clip = Path(__file__).resolve().parents[1] / "data" / "short_hamilton_clip.mp4"
    with av.open(str(clip)) as container:
        start = None
        for frame in container.decode(video=0):
            start = float(frame.time) if start is None else start
            t = float(frame.time) - start
            if 0.8 <= t <= 1.2 or 4.9 <= t <= 5.3:
                faces = detector.detect(frame.to_ndarray(format="bgr24"))
                big = max(faces, key=lambda d: d.size)
                turns.setdefault("profile" if t < 2 else "frontal", []).append(face_turn(big))
    assert min(turns["profile"]) > PROFILE_TURN and max(turns["frontal"]) < 0.5

    def face(vec: np.ndarray, profile: bool, t: float) -> FaceInput:
        marks = ((60.0, 50.0), (70.0, 50.0), (40.0, 80.0)) if profile else ((40.0, 50.0), (90.0, 50.0), (65.0, 80.0))
        det = FaceDetection(box=(10, 10, 150, 150), score=0.95, landmarks=(*marks, (50.0, 110.0), (80.0, 110.0)),
                            row=np.zeros(15))
        return FaceInput(detection=det, embedding=vec, frame_t=t, keyframe_id=f"kf_{t}", sharpness=200.0)

    a = _unit(1)
    other = _unit(9) - float(np.dot(_unit(9), a)) * a
    probe = (0.40 * a + np.sqrt(1 - 0.40**2) * other / np.linalg.norm(other)).astype(np.float32)  # cosine 0.40
    cos = float(np.dot(a, probe))
    assert Resolver([], _Ids()).match_threshold < cos < Resolver([], _Ids()).match_threshold + CROSS_POSE_DISCOUNT
    for first_profile, then_profile, same in ((False, False, True), (True, True, True), (True, False, False),
                                              (False, True, True)):
        r = Resolver([], _Ids())
        r.resolve([face(a, first_profile, 0.0)], "src", 0, now=0.0)
        out = r.resolve([face(probe, then_profile, 5.0)], "src", 1, now=0.0)
        assert (out.assignments == ["person_0001"]) is same, (first_profile, then_profile)
        assert out.gallery_faces == [] or out.gallery_faces[0].turn == pytest.approx(
            face_turn(face(probe, then_profile, 5.0).detection), abs=1e-3)
