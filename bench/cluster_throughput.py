"""Cameras a Ray cluster carries versus the number of source workers, on loopback.

For each worker count ``w`` the bench ingests ``w`` copies of the real-media bench clip
(:func:`bench.media.real_720p`, ~91 s of 1280×720 with faces, cuts, speech and captions) at once,
each as its own source actor, through the same path as ``reflectworld run --cluster``
(:func:`plugin.cluster.run_cluster` with this process's engine as the user's post-commit side),
into a fresh store. "Cameras carried" is media seconds ingested per wall second: how many
real-time cameras of that content the cluster keeps up with. Wall time includes each actor's
start and model loading (a few seconds per run), so short clips understate it.

Ray is started in this process with ``--cpus`` CPUs (default: all of this machine's), one CPU per
source actor. With ``--s3`` the memory lives in a moto S3 server on loopback instead of a local
directory (moto is a single Python process, so it is the bottleneck before the workers are).

Usage::

    .venv/bin/python bench/cluster_throughput.py [--workers 1 2 3] [--level full|light] [--s3] [--dir DIR]

Prints one JSON line per worker count, then a Markdown table. Nothing here is part of the test run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import secrets
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from media import real_720p  # noqa: E402

from plugin.cluster import connect, disconnect, run_cluster  # noqa: E402
from plugin.engine import Engine  # noqa: E402
from plugin.manifest import Manifest, SourceConfig, parse_manifest  # noqa: E402


def driver_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def manifest(uri: str, level: str, storage: dict[str, object] | None) -> Manifest:
    memory: dict[str, object] = {"uri": uri}
    if storage:
        memory["storage"] = storage
    return parse_manifest({"user_id": "bench", "memory": memory, "perception": {"level": level}})


def one(clip: Path, length_s: float, workers: int, level: str, root: Path, storage: dict[str, object] | None,
        uri: str) -> dict[str, object]:
    """Ingest ``workers`` copies of ``clip`` at once as source actors; throughput and CPU cost."""
    folder = root / f"w{workers}"
    folder.mkdir(parents=True, exist_ok=True)
    sources = []
    for i in range(workers):
        copy = folder / f"cam{i}.mp4"
        if not copy.exists():
            shutil.copy(clip, copy)
        sources.append(SourceConfig(uri=str(copy), camera_id=f"cam{i}"))
    engine = Engine.from_manifest(manifest(uri, level, storage)).open()
    try:
        cpu0, t0 = driver_cpu_s(), time.monotonic()
        run = run_cluster(engine, sources, threading.Event())
        wall = time.monotonic() - t0
        driver = driver_cpu_s() - cpu0
    finally:
        engine.close(drain_s=120)
    assert not run.failed, [p.error for p in run.sources]
    assert all(p.relayed for p in run.sources), "a source wrote nothing: is the store fresh?"
    media = length_s * workers
    actors = sum(p.cpu_s for p in run.sources)
    return {"workers": workers, "level": level, "media_s": round(media, 1), "wall_s": round(wall, 1),
            "cameras_carried": round(media / wall, 2), "segments": sum(p.relayed + p.replayed for p in run.sources),
            "actor_cpu_s_per_media_s": round(actors / media, 3), "driver_cpu_s_per_media_s": round(driver / media, 3),
            "load_avg_1m": round(os.getloadavg()[0], 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--level", choices=["full", "light"], default="full")
    parser.add_argument("--cpus", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--s3", action="store_true", help="memory in a moto S3 server on loopback")
    parser.add_argument("--dir", type=Path, help="work folder (clip, copies, stores); default: a temporary one")
    args = parser.parse_args()
    root = args.dir or Path(tempfile.mkdtemp(prefix="rw-cluster-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    clip = root / "real720.mp4"
    if not clip.exists():
        real_720p(clip)
    from perception.media.video import probe

    length_s = probe(clip).duration_s
    server = None
    storage: dict[str, object] | None = None
    if args.s3:
        import boto3
        from moto.server import ThreadedMotoServer

        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        os.environ.update({"BENCH_S3_KEY": "bench", "BENCH_S3_SECRET": "bench"})
        boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="bench", aws_secret_access_key="bench",
                     region_name="us-east-1").create_bucket(Bucket="bench")
        storage = {"endpoint": endpoint, "region": "us-east-1", "access_key_id": "bench",
                   "secret_access_key": "${BENCH_S3_SECRET}", "allow_http": True}
    # Ray's token authentication with a token of this run's own (a local cluster would otherwise save one
    # under ~/.ray for good)
    os.environ.setdefault("RAY_AUTH_MODE", "token")
    os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))
    connect("auto", num_cpus=args.cpus)
    results = []
    try:
        stamp = time.strftime("%Y%m%d-%H%M%S")  # every run ingests into fresh stores (a done source is skipped)
        for workers in args.workers:
            name = f"{stamp}-{args.level}-w{workers}"
            uri = f"s3://bench/{name}" if args.s3 else str(root / "stores" / name)
            result = one(clip, length_s, workers, args.level, root, storage, uri)
            results.append(result)
            print(json.dumps(result), flush=True)
    finally:
        disconnect()
        if server is not None:
            server.stop()
    base = results[0]["cameras_carried"] / results[0]["workers"] if results else 1.0
    print("\n| workers | media s | wall s | cameras carried | per worker vs 1 | actor CPU-s / media s "
          "| driver CPU-s / media s |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        per = r["cameras_carried"] / r["workers"] / base  # type: ignore[operator]
        print(f"| {r['workers']} | {r['media_s']} | {r['wall_s']} | {r['cameras_carried']} | {per:.2f} | "
              f"{r['actor_cpu_s_per_media_s']} | {r['driver_cpu_s_per_media_s']} |")


if __name__ == "__main__":
    main()
