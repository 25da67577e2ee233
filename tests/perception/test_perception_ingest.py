"""File ingestion into the real store (LanceDB in tmp_path, hash embedder)."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import pytest

from memory import MemoryStore
from memory.models import IngestState
from perception import MediaError, PerceptionConfig
from plugin.engine import Engine
from tests.conftest import engine_for


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
FAST = {"ocr": {"type": "none"}, "asr": {"type": "none"}}


def _engine(directory: Path, perception: dict[str, object] | None = None) -> Engine:
    """An engine on its own store under ``directory`` (semantic memory off: these tests compare perception rows)."""
    return engine_for(directory, perception=FAST if perception is None else perception,
                      semantic={"enabled": False})


@pytest.mark.slow
def test_ingesting_the_test_clip_writes_traces_keyframes_and_people(tmp_path: Path, clip: Path) -> None:
    seen: list[tuple[float, float, int]] = []
    with _engine(tmp_path) as engine:
        store = engine.store
        report = engine.ingest_file(clip, progress=lambda d, t, n: seen.append((d, t, n)))
        assert report.done and not report.interrupted
        assert report.source == str(clip.resolve())
        assert report.camera_id == "hamilton"
        assert 4 <= report.segments_written == report.segments_total <= 8
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
def test_an_interrupted_ingest_resumed_equals_one_uninterrupted_run(tmp_path: Path, clip: Path) -> None:
    with _engine(tmp_path / "once", {}) as once:
        once.ingest_file(clip)
        expected = _snapshot(once.store)

    with _engine(tmp_path / "twice", {}) as twice:
        stop = threading.Event()

        def progress(done_s: float, total_s: float, segments: int) -> None:
            if segments == 2:
                stop.set()

        first = twice.ingest_file(clip, progress=progress, stop=stop)
        assert first.interrupted and not first.done and first.segments_written == 2
        assert twice.store.resume_point(first.source) == 1
    with _engine(tmp_path / "twice", {}) as twice:
        second = twice.ingest_file(clip)
        assert second.done and second.segments_skipped == 2
        assert second.segments_total == first.segments_written + second.segments_written
        assert _snapshot(twice.store) == expected


def _decisions(store: MemoryStore) -> list[tuple[object, ...]]:
    return sorted((r["segment_index"], r["entity_id"], r["action"], r["score"], r["evidence_json"])
                  for r in store.scan_rows("identity_decisions"))


@pytest.mark.slow
def test_a_process_killed_between_a_segments_gallery_and_its_resume_point_resumes_exactly(
        tmp_path: Path, clip: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with _engine(tmp_path / "once") as once:
        once.ingest_file(clip)
        expected, decisions = _snapshot(once.store), _decisions(once.store)
    # the last segment that creates people (after one that is committed): its faces must be new again on resume
    crashed_at = max(i for i, _, action, _, _ in decisions if action == "new" and i >= 1)

    with _engine(tmp_path / "twice") as twice:
        original = twice.store._write_state

        def killed_before_resume_point(state: IngestState) -> None:
            if state.last_segment_index == crashed_at:
                raise OSError("killed")  # every other table of the segment is written by now
            original(state)

        monkeypatch.setattr(twice.store, "_write_state", killed_before_resume_point)
        with pytest.raises(OSError, match="killed"):
            twice.ingest_file(clip)
        written = {r["id"] for r in twice.store.scan_rows("gallery_face", f"segment_index = {crashed_at}")}
        assert written and not written & {g.id for g in twice.store.face_gallery()}
    with _engine(tmp_path / "twice") as resumed:
        report = resumed.ingest_file(clip)
        assert report.done and report.segments_skipped == crashed_at
        assert _snapshot(resumed.store) == expected
        assert _decisions(resumed.store) == decisions


@pytest.mark.slow
def test_rerunning_a_completed_ingest_writes_nothing_new(tmp_path: Path, clip: Path) -> None:
    with _engine(tmp_path) as engine:
        engine.ingest_file(clip)
        before = _snapshot(engine.store)
        again = engine.ingest_file(clip)
        assert again.segments_written == 0 and again.done
        assert again.segments_skipped == again.segments_total == len(before["traces"])  # type: ignore[arg-type]
        assert _snapshot(engine.store) == before


@pytest.mark.slow
def test_a_changed_file_is_reingested_from_the_start_and_people_are_recognised(tmp_path: Path, clip: Path) -> None:
    with _engine(tmp_path) as engine:
        first = engine.ingest_file(clip)
        people = [e.id for e in engine.store.list_entities()]
        st = clip.stat()
        os.utime(clip, (st.st_atime, st.st_mtime + 3600))
        second = engine.ingest_file(clip)
        assert second.segments_written == first.segments_total and second.segments_skipped == 0
        assert engine.store.counts()["traces"] == first.segments_total
        # identities are matched against the gallery instead of minting new people
        assert [e.id for e in engine.store.list_entities()] == people


def test_ingest_without_faces_still_describes_segments(tmp_path: Path, clip: Path) -> None:
    with _engine(tmp_path, {**FAST, "faces": {"type": "none"}, "sample_fps": 2.0}) as engine:
        report = engine.ingest_file(clip, "stage")
        assert report.done and report.entities == []
        traces = engine.store.timeline()
        assert all(t.camera_id == "stage" and "face detection off" in t.summary for t in traces)
        assert engine.store.list_entities() == []


def test_ingest_of_a_missing_file_raises_media_error(tmp_path: Path) -> None:
    with _engine(tmp_path) as engine, pytest.raises(MediaError, match="check the path"):
        engine.ingest_file(tmp_path / "missing.mp4")


def test_settings_reject_unknown_keys() -> None:
    with pytest.raises(ValueError, match="extra"):
        PerceptionConfig(sample_fsp=3)  # type: ignore[call-arg]
