"""File ingestion into the real store (LanceDB in tmp_path, hash embedder)."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import pytest

from memory import MemoryStore
from perception import IngestSettings, MediaError, ingest_file
from perception.detectors.faces import FaceDetector, FaceEmbedder


@pytest.fixture
def clip(tmp_path: Path, hamilton: Path) -> Path:
    """A private copy of the test clip (its mtime and size are the source's identity)."""
    dst = tmp_path / "hamilton.mp4"
    shutil.copy(hamilton, dst)
    return dst


def _snapshot(store: MemoryStore) -> dict[str, object]:
    traces = store.timeline()
    kf_ids = [k for t in traces for k in t.keyframe_ids]
    return {
        "counts": store.counts(),
        "traces": [t.model_dump() for t in traces],
        "keyframes": sorted((k.id, k.t, k.entity_ids) for k in store.keyframes(kf_ids)),
        "entities": [e.model_dump() for e in store.list_entities()],
        "gallery": sorted((g.id, g.entity_id) for g in store.face_gallery()),
    }


#: what these tests look at (segments, key frames, faces, identity, resume); OCR and speech are
#: covered by their own tests, except in the resume-equality test, which runs everything
FAST = IngestSettings(ocr=False, asr=False)


def _ingest(clip: Path, store: MemoryStore, det: FaceDetector, emb: FaceEmbedder,
            settings: IngestSettings = FAST, **kw: object):
    return ingest_file(clip, store, settings, detector=det, embedder=emb, **kw)  # type: ignore[arg-type]


@pytest.mark.slow
def test_ingesting_the_test_clip_writes_traces_keyframes_and_people(
    clip: Path, store: MemoryStore, face_detector: FaceDetector, face_embedder: FaceEmbedder
) -> None:
    seen: list[tuple[float, float, int]] = []
    report = _ingest(clip, store, face_detector, face_embedder, progress=lambda d, t, n: seen.append((d, t, n)))
    assert report.done and not report.interrupted
    assert report.source == str(clip.resolve())
    assert report.camera_id == "hamilton"
    assert 4 <= report.segments_written == report.segments_total <= 7
    assert [n for _, _, n in seen] == list(range(1, report.segments_total + 1))
    assert seen[-1][0] == pytest.approx(seen[-1][1], abs=0.1)

    traces = store.timeline(source=report.source)
    assert [t.segment_index for t in traces] == list(range(report.segments_total))
    assert all(t.id.startswith("trc_") and t.summary and t.keyframe_ids for t in traces)
    assert traces[0].wall_start == pytest.approx(clip.stat().st_mtime + traces[0].t_start)
    keyframes = store.keyframes([k for t in traces for k in t.keyframe_ids])
    assert keyframes and all(k.jpeg[:2] == b"\xff\xd8" for k in keyframes)

    people = store.list_entities(kind="person")
    assert people and set(report.entities) <= {p.id for p in people}
    # the performer appears in the wide shot and again in his close-up: one entity, two sightings
    close_up = next(t for t in traces if t.t_start <= 5.0 < t.t_end)
    assert "close-up of one person" in close_up.summary
    performer = store.get_entity(close_up.entity_ids[0])
    assert performer.sightings >= 2
    assert store.entity_observations(performer.id, limit=10)
    assert store.face_gallery()


@pytest.mark.slow
def test_an_interrupted_ingest_resumed_equals_one_uninterrupted_run(
    tmp_path: Path, clip: Path, face_detector: FaceDetector, face_embedder: FaceEmbedder
) -> None:
    with MemoryStore(str(tmp_path / "once"), _hash()) as once:
        _ingest(clip, once, face_detector, face_embedder, IngestSettings())
        expected = _snapshot(once)

    with MemoryStore(str(tmp_path / "twice"), _hash()) as twice:
        stop = threading.Event()

        def progress(done_s: float, total_s: float, segments: int) -> None:
            if segments == 2:
                stop.set()

        first = _ingest(clip, twice, face_detector, face_embedder, IngestSettings(), progress=progress, stop=stop)
        assert first.interrupted and not first.done and first.segments_written == 2
        assert twice.resume_point(first.source) == 1
        second = _ingest(clip, twice, face_detector, face_embedder, IngestSettings())
        assert second.done and second.segments_skipped == 2
        assert second.segments_total == first.segments_written + second.segments_written
        assert _snapshot(twice) == expected


@pytest.mark.slow
def test_rerunning_a_completed_ingest_writes_nothing_new(
    clip: Path, store: MemoryStore, face_detector: FaceDetector, face_embedder: FaceEmbedder
) -> None:
    _ingest(clip, store, face_detector, face_embedder)
    before = _snapshot(store)
    again = _ingest(clip, store, face_detector, face_embedder)
    assert again.segments_written == 0 and again.done
    assert again.segments_skipped == again.segments_total == len(before["traces"])  # type: ignore[arg-type]
    assert _snapshot(store) == before


@pytest.mark.slow
def test_a_changed_file_is_reingested_from_the_start_and_people_are_recognised(
    clip: Path, store: MemoryStore, face_detector: FaceDetector, face_embedder: FaceEmbedder
) -> None:
    first = _ingest(clip, store, face_detector, face_embedder)
    people = [e.id for e in store.list_entities()]
    st = clip.stat()
    os.utime(clip, (st.st_atime, st.st_mtime + 3600))
    second = _ingest(clip, store, face_detector, face_embedder)
    assert second.segments_written == first.segments_total and second.segments_skipped == 0
    assert store.counts()["traces"] == first.segments_total
    # identities are matched against the gallery instead of minting new people
    assert [e.id for e in store.list_entities()] == people


def test_ingest_without_faces_still_describes_segments(clip: Path, store: MemoryStore) -> None:
    settings = IngestSettings(faces=False, sample_fps=2.0)
    report = ingest_file(clip, store, settings, camera_id="stage")
    assert report.done and report.entities == []
    traces = store.timeline()
    assert all(t.camera_id == "stage" and "face detection off" in t.summary for t in traces)
    assert store.list_entities() == []


def test_ingest_of_a_missing_file_raises_media_error(tmp_path: Path, store: MemoryStore) -> None:
    with pytest.raises(MediaError, match="check the path"):
        ingest_file(tmp_path / "missing.mp4", store, IngestSettings())


def test_settings_reject_unknown_keys() -> None:
    with pytest.raises(ValueError, match="extra"):
        IngestSettings(sample_fsp=3)  # type: ignore[call-arg]


def _hash():  # noqa: ANN202
    from memory import HashEmbedder

    return HashEmbedder(64)
