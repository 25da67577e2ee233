"""The background worker and headless `reflectworld run`: kill -9 and resume, concurrent sources."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from memory import HashEmbedder, MemoryStore
from tests.conftest import engine_for
from tests.plugin.stream_media import make_clip

LIGHT = {"sample_fps": 4, "level": "light"}


def _contiguous(store: MemoryStore, source: str, duration: float) -> list[int]:
    traces = store.timeline(source=source, limit=1000)
    indices = [t.segment_index for t in traces]
    assert indices == list(range(len(indices))), f"segments not exactly once: {indices}"
    assert all(abs(b.t_start - a.t_end) < 1e-6 for a, b in zip(traces, traces[1:])), "a gap or an overlap"
    assert traces[0].t_start < 0.3 and abs(traces[-1].t_end - duration) < 0.3
    return indices


def test_kill_9_of_reflectworld_run_mid_file_then_restart_writes_every_segment_exactly_once(
    tmp_path: Path, clean_env: dict[str, str]
) -> None:
    clip = make_clip(tmp_path / "hall.mp4", seconds=30.0)  # long enough that the kill lands mid-file
    store_dir = tmp_path / "lancedb"
    manifest = tmp_path / "manifest.yaml"
    manifest.write_text(yaml.safe_dump({
        "user_id": "tester", "log_level": "WARNING",
        "memory": {"uri": str(store_dir), "embedder": {"type": "hash", "dim": 64}},
        "perception": {"level": "light"},
        "sources": [{"uri": str(clip), "camera_id": "hall"}],
    }), encoding="utf-8")
    cmd = [sys.executable, "-m", "plugin", "run", "--manifest", str(manifest)]
    source = str(clip.resolve())

    proc = subprocess.Popen(cmd, env=clean_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        committed = None
        while time.monotonic() < deadline and proc.poll() is None:
            with MemoryStore(str(store_dir), HashEmbedder(64), user_id="tester") as probe:
                committed = probe.resume_point(source)
            if committed is not None and committed >= 1:
                break
            time.sleep(0.2)
        assert proc.poll() is None, "the run finished before it could be killed; use a longer clip"
        assert committed is not None and committed >= 1
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    with MemoryStore(str(store_dir), HashEmbedder(64), user_id="tester") as store:
        killed_at = store.resume_point(source)
        assert killed_at is not None and not store.ingest_state(source).done  # type: ignore[union-attr]

    done = subprocess.run(cmd, env=clean_env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "hall: done" in done.stdout
    with MemoryStore(str(store_dir), HashEmbedder(64), user_id="tester") as store:
        indices = _contiguous(store, source, 30.0)
        assert len(indices) > killed_at + 1
        assert store.counts()["traces"] == len(indices)
        assert store.ingest_state(source).done  # type: ignore[union-attr]


def test_two_sources_ingest_concurrently_into_one_store(tmp_path: Path) -> None:
    a = make_clip(tmp_path / "a.mp4", seconds=4.0)
    b = make_clip(tmp_path / "b.mp4", seconds=3.0, shot_s=0.75)
    with engine_for(tmp_path, perception=LIGHT) as engine:
        store, worker = engine.store, engine.worker
        try:
            worker.start_capture(str(a), "cam_a")
            worker.start_capture(str(b), "cam_b")
            running = {i.camera_id for i in worker.status() if i.state == "running"}
            deadline = time.monotonic() + 60
            while not worker.idle() and time.monotonic() < deadline:
                time.sleep(0.1)
            assert worker.idle()
        finally:
            worker.stop()
        states = {i.camera_id: (i.state, i.segments_written) for i in worker.status()}
        assert running == {"cam_a", "cam_b"} or set(states) == {"cam_a", "cam_b"}
        a_idx = _contiguous(store, str(a.resolve()), 4.0)
        b_idx = _contiguous(store, str(b.resolve()), 3.0)
        assert states == {"cam_a": ("done", len(a_idx)), "cam_b": ("done", len(b_idx))}
        assert {t.camera_id for t in store.timeline(limit=100)} == {"cam_a", "cam_b"}


def test_an_image_folder_is_ingested_as_a_finite_source(tmp_path: Path) -> None:
    import cv2
    import numpy as np

    folder = tmp_path / "shots"
    folder.mkdir()
    for i, colour in enumerate([(0, 0, 200), (0, 0, 200), (200, 0, 0), (200, 0, 0), (0, 200, 0)]):
        img = np.zeros((90, 120, 3), np.uint8)
        img[:] = colour
        cv2.imwrite(str(folder / f"{i:03d}.png"), img)
    with engine_for(tmp_path, perception=LIGHT) as engine:
        store, worker = engine.store, engine.worker
        try:
            info = worker.start_capture(str(folder), options={"image_interval_s": 1.0})
            assert info.kind == "images" and info.camera_id == "shots"
            deadline = time.monotonic() + 30
            while not worker.idle() and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            worker.stop()
        traces = store.timeline(source=str(folder.resolve()))
        assert [(t.t_start, t.t_end) for t in traces] == [(0.0, 2.0), (2.0, 4.0), (4.0, 4.0)]
        assert store.ingest_state(str(folder.resolve())).done  # type: ignore[union-attr]


def test_a_stop_that_cannot_wait_reports_stopping_and_a_restart_finishes_the_file_exactly_once(tmp_path: Path) -> None:
    clip = make_clip(tmp_path / "yard.mp4", seconds=6.0, shot_s=0.75)
    with engine_for(tmp_path, perception=LIGHT) as engine:
        store, worker = engine.store, engine.worker
        try:
            worker.start_capture(str(clip), "yard")
            stopping = worker.stop_capture("yard", timeout=0.0)
            assert stopping.state == "stopping"  # still finishing its segment in progress
            deadline = time.monotonic() + 60
            while not worker.idle() and time.monotonic() < deadline:
                time.sleep(0.05)
            stopped = worker.status("yard")[0]
            assert stopped.state == "stopped", stopped
            state = store.ingest_state(str(clip.resolve()))
            assert state is None or not state.done
            worker.start_capture(str(clip), "yard")
            deadline = time.monotonic() + 60
            while not worker.idle() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert worker.status("yard")[0].state == "done"
        finally:
            worker.stop()
        _contiguous(store, str(clip.resolve()), 6.0)
