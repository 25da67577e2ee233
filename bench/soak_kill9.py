"""Soak: several `reflectworld ingest` processes on one store, killed with SIGKILL and restarted.

Usage::

    python bench/soak_kill9.py [--rounds 20] [--clips a.mpg b.mpg c.mp4] [--seed 1] [--keep DIR]

Each clip (default: the test clips in ``tests/data``, one person or cast per clip) gets its own
``reflectworld ingest`` process, all on one store with faces on. Every round starts the processes
that have not finished, waits a random 0.5–6 s and kills one of them with SIGKILL; the others keep
running into the next round. When every clip is done (or ``--rounds`` is spent, after which the
rest run to completion), the store is checked:

* **duplicate ids** — entity rows sharing an id (must be 0);
* **mixed entities** — an entity whose observations come from two different clips (0: the clips
  show different people), split into **id collisions** (the id was created in two clips: an
  allocation bug) and **cross-clip matches** (created in one clip, matched by the resolver in
  another: a recognition false match, which a single-process run makes just the same);
* **segments** — each clip's traces must be the contiguous indices 0..n-1, each once;
* **tracebacks** — stderr of every process must hold none (compaction conflicts are retried quietly).

Prints one summary line (or JSON with ``--json``); exits 1 on any violation.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from memory import HashEmbedder, MemoryStore  # noqa: E402

DEFAULT_CLIPS = [ROOT / "tests" / "data" / n for n in ("grid_bbaf2n.mpg", "grid_lrwp9a.mpg", "short_hamilton_clip.mp4")]


def _cli() -> list[str]:
    script = Path(sys.executable).with_name("reflectworld")
    return [str(script)] if script.exists() else [sys.executable, "-m", "plugin"]


def soak(clips: list[Path], rounds: int, seed: int, work: Path) -> dict[str, Any]:
    """Run the kill/restart rounds in ``work`` and return the checks' results."""
    rng = random.Random(seed)
    store_dir = work / "lancedb"
    manifest = work / "manifest.yaml"
    manifest.write_text(yaml.safe_dump({
        "user_id": "soak", "log_level": "WARNING",
        "memory": {"uri": str(store_dir), "embedder": {"type": "hash", "dim": 64}},
        "perception": {"level": "full", "objects": {"type": "none"}, "ocr": {"type": "none"},
                       "asr": {"type": "none"}, "body": {"type": "none"}},
        "semantic": {"enabled": False},
    }))
    copies = []
    for clip in clips:
        copies.append(work / clip.name)
        shutil.copy(clip, copies[-1])
    with MemoryStore(str(store_dir), HashEmbedder(64), user_id="soak"):
        pass
    procs: dict[Path, subprocess.Popen[bytes]] = {}
    done: set[Path] = set()
    kills = 0
    logs = {c: (work / f"{c.stem}.err").open("ab") for c in copies}

    def start_missing() -> None:
        for clip in copies:
            if clip not in done and (clip not in procs or procs[clip].poll() is not None):
                if clip in procs and procs[clip].returncode == 0:
                    done.add(clip)
                    continue
                procs[clip] = subprocess.Popen([*_cli(), "ingest", "--manifest", str(manifest), str(clip)],
                                               stdout=subprocess.DEVNULL, stderr=logs[clip])

    try:
        for _ in range(rounds):
            start_missing()
            if len(done) == len(copies):
                break
            time.sleep(rng.uniform(0.5, 6.0))
            running = [c for c, p in procs.items() if p.poll() is None]
            if running:
                victim = rng.choice(running)
                procs[victim].send_signal(signal.SIGKILL)
                procs[victim].wait()
                kills += 1
        failures: Counter[Path] = Counter()
        while len(done) < len(copies):
            start_missing()
            for clip, proc in list(procs.items()):
                if clip in done:
                    continue
                if proc.wait(timeout=600) == 0:
                    done.add(clip)
                else:
                    failures[clip] += 1
                    if failures[clip] > 3:
                        raise RuntimeError(f"ingest of {clip.name} keeps failing; see {work / (clip.stem + '.err')}")
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
        for log in logs.values():
            log.close()

    with MemoryStore(str(store_dir), HashEmbedder(64), user_id="soak") as store:
        entities = store.scan_rows("entities")
        observations = store.scan_rows("observations")
        traces = store.scan_rows("traces")
        decisions = store.scan_rows("identity_decisions")
    duplicates = sum(n - 1 for n in Counter(r["id"] for r in entities).values() if n > 1)
    sources: dict[str, set[str]] = {}
    for o in observations:
        sources.setdefault(o["entity_id"], set()).add(Path(o["source"]).name)
    mixed = sorted(e for e, s in sources.items() if len(s) > 1)
    # An id created in two clips is an allocation collision; an id created in one clip and matched
    # in another is the resolver's judgement (a recognition false match), reported apart.
    created: dict[str, set[str]] = {}
    for d in decisions:
        if d["action"] in ("new", "confirm_pending") and d["source"]:
            created.setdefault(d["entity_id"], set()).add(Path(d["source"]).name)
    collisions = sorted(e for e in mixed if len(created.get(e, set())) > 1)
    per_clip = {c.name: sorted(t["segment_index"] for t in traces if Path(t["source"]).name == c.name) for c in copies}
    bad_segments = {name: idx for name, idx in per_clip.items() if idx != list(range(len(idx))) or not idx}
    tracebacks = sum((work / f"{c.stem}.err").read_text(errors="replace").count("Traceback") for c in copies)
    return {"clips": len(copies), "kills": kills, "entities": len(entities), "duplicate_ids": duplicates,
            "mixed_entities": len(mixed), "id_collisions": len(collisions),
            "cross_clip_matches": len(mixed) - len(collisions), "segments": {k: len(v) for k, v in per_clip.items()},
            "segment_errors": len(bad_segments), "tracebacks": tracebacks}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--clips", nargs="*", type=Path, default=DEFAULT_CLIPS)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", type=Path, help="work in this directory and keep it")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        result = soak(args.clips, args.rounds, args.seed, args.keep)
    else:
        with tempfile.TemporaryDirectory(prefix="soak-kill9-") as tmp:
            result = soak(args.clips, args.rounds, args.seed, Path(tmp))
    sys.stdout.write((json.dumps(result) if args.json else " ".join(f"{k}={v}" for k, v in result.items())) + "\n")
    bad = result["duplicate_ids"] or result["mixed_entities"] or result["segment_errors"] or result["tracebacks"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
