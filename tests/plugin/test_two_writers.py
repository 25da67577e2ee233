"""Two `reflectworld ingest` processes writing one store at once: ids stay unique, people stay apart."""

from __future__ import annotations

import shutil
import subprocess
from collections import Counter
from pathlib import Path

import yaml

from memory import HashEmbedder, MemoryStore
from tests.plugin.test_transports import cli

DATA = Path(__file__).parents[1] / "data"


def test_two_processes_ingesting_different_clips_never_share_an_entity_id(tmp_path: Path,
                                                                         clean_env: dict[str, str]) -> None:
    store_dir = tmp_path / "lancedb"
    manifest = tmp_path / "manifest.yaml"
    manifest.write_text(yaml.safe_dump({
        "user_id": "tester", "log_level": "WARNING",
        "memory": {"uri": str(store_dir), "embedder": {"type": "hash", "dim": 64}},
        "perception": {"level": "full", "objects": {"type": "none"}, "ocr": {"type": "none"},
                       "asr": {"type": "none"}, "body": {"type": "none"}},
        "semantic": {"enabled": False},
    }), encoding="utf-8")
    clips = []
    for name in ("grid_bbaf2n.mpg", "grid_lrwp9a.mpg", "short_hamilton_clip.mp4"):  # different people
        clips.append(tmp_path / name)
        shutil.copy(DATA / name, clips[-1])
    # The store exists before the race (both would otherwise race on creating the tables too).
    with MemoryStore(str(store_dir), HashEmbedder(64), user_id="tester"):
        pass
    procs = [subprocess.Popen([*cli(), "ingest", "--manifest", str(manifest), str(clip)], env=clean_env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for clip in clips]
    outs = [p.communicate(timeout=300) for p in procs]
    for proc, (out, err) in zip(procs, outs):
        assert proc.returncode == 0, err[-3000:]
        assert "complete" in out
        assert "Traceback" not in err, err[-3000:]
    with MemoryStore(str(store_dir), HashEmbedder(64), user_id="tester") as store:
        rows = store.scan_rows("entities")
        observations = store.scan_rows("observations")
    ids = Counter(r["id"] for r in rows)
    assert ids and all(n == 1 for n in ids.values()), ids
    sources: dict[str, set[str]] = {}
    for o in observations:
        sources.setdefault(o["entity_id"], set()).add(Path(o["source"]).name)
    assert {name for s in sources.values() for name in s} == {c.name for c in clips}
    mixed = {e: s for e, s in sources.items() if len(s) > 1}
    assert not mixed, f"entities holding people from both clips: {mixed}"
