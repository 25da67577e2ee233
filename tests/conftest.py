"""Shared fixtures: test media, manifests on temp stores, and one ingested store per session."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import yaml

DATA = Path(__file__).parent / "data"
CLIP = DATA / "short_hamilton_clip.mp4"


@pytest.fixture(autouse=True)
def _isolated_data_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test ever touches the user's real data directory."""
    monkeypatch.setenv("REFLECTWORLD_DATA_DIR", str(tmp_path_factory.mktemp("userdata")))


def write_manifest(directory: Path, **overrides: object) -> Path:
    """Write an offline manifest (hash embedder, store under ``directory``) and return its path."""
    data: dict[str, object] = {
        "user_id": "tester",
        "log_level": "WARNING",
        "memory": {"uri": str(directory / "lancedb"), "embedder": {"type": "hash", "dim": 64}},
    }
    data.update(overrides)
    path = directory / "manifest.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def ingested(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A manifest whose store holds the ingested Hamilton clip (read-only for tests)."""
    from perception import ingest_file
    from plugin.manifest import load_manifest
    from plugin.server import ingest_settings, open_store

    directory = tmp_path_factory.mktemp("ingested")
    clip = directory / "stage.mp4"
    shutil.copy(CLIP, clip)
    manifest_path = write_manifest(directory)
    manifest = load_manifest(manifest_path)
    store = open_store(manifest)
    try:
        report = ingest_file(clip, store, ingest_settings(manifest), camera_id="stage")
        assert report.segments_written > 0
    finally:
        store.close()
    return manifest_path


@pytest.fixture
def clean_env() -> dict[str, str]:
    """Environment for child processes: this one, without proxies or test-unrelated secrets."""
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env["PYTHONUNBUFFERED"] = "1"
    return env
