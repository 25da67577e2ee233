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
    """Write an offline manifest (hash embedder, store under ``directory``, every tool group) and return its path."""
    from plugin.manifest import TOOL_GROUPS

    data: dict[str, object] = {
        "user_id": "tester",
        "log_level": "WARNING",
        "memory": {"uri": str(directory / "lancedb"), "embedder": {"type": "hash", "dim": 64}},
    }
    data.update(overrides)
    server = dict(data.get("server") or {})  # type: ignore[call-overload]
    server.setdefault("tools", list(TOOL_GROUPS))
    data["server"] = server
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "manifest.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def ingested(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A manifest whose store holds the ingested Hamilton clip (read-only for tests)."""
    from plugin.engine import Engine
    from plugin.manifest import load_manifest

    directory = tmp_path_factory.mktemp("ingested")
    clip = directory / "stage.mp4"
    shutil.copy(CLIP, clip)
    manifest_path = write_manifest(directory)
    with Engine.from_manifest(load_manifest(manifest_path)) as engine:
        report = engine.ingest_file(clip, "stage")
        assert report.segments_written > 0
    return manifest_path


@pytest.fixture
def clean_env() -> dict[str, str]:
    """Environment for child processes: this one, without proxies or test-unrelated secrets."""
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


#: a perception section with every model off (segments, key frames, the local describer only)
NO_MODELS: dict[str, object] = {"faces": {"type": "none"}, "objects": {"type": "none"}, "ocr": {"type": "none"},
                                "asr": {"type": "none"}, "body": {"type": "none"}}


def engine_for(directory: Path, overrides: object = None, **manifest: object):  # type: ignore[no-untyped-def]
    """An engine (not yet open; use it in a ``with``) over an offline manifest written to ``directory``."""
    from plugin.engine import Engine
    from plugin.manifest import load_manifest

    return Engine.from_manifest(load_manifest(write_manifest(directory, **manifest)), overrides)  # type: ignore[arg-type]
