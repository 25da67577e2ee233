"""`reflectworld run --cluster` for real: three sources as Ray actors, memory on S3, a worker killed mid-run.

Everything is real (Ray cluster, LanceDB on an object store, PyAV, ONNX models, the CLI, the MCP
server over stdio) except the object store's server, which is moto on loopback.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import lancedb
import pytest
import yaml
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.cluster.conftest import BUCKET, RayCluster, storage_options

DATA = Path(__file__).resolve().parents[1] / "data"
LONG = DATA / "short_hamilton_clip.mp4"  # the source whose worker is killed: 10 s, several people
SOURCES = [LONG, DATA / "grid_bbaf2n.mpg", DATA / "grid_lbax4n.mpg"]
TABLES = ("traces", "observations", "keyframes", "ingest_log", "entities", "schemas")


def cli() -> list[str]:
    script = Path(sys.executable).with_name("reflectworld")
    return [str(script)] if script.exists() else [sys.executable, "-m", "plugin"]


#: faces and identities at the full level; no objects, bodies, text or speech, to keep the CPU down
FACES = {"level": "full", "max_segment_s": 2.0, "objects": {"type": "none"}, "body": {"type": "none"},
         "ocr": {"type": "none"}, "asr": {"type": "none"}}


def write_manifest(directory: Path, prefix: str, perception: dict[str, Any] = FACES) -> Path:
    """A manifest whose memory is ``s3://BUCKET/prefix``, endpoint and credentials from the environment."""
    data = {
        "user_id": "site",
        "memory": {
            "uri": f"s3://{BUCKET}/{prefix}",
            "storage": {"endpoint": "${S3_ENDPOINT}", "region": "us-east-1", "access_key_id": "${S3_KEY_ID}",
                        "secret_access_key": "${S3_SECRET}", "allow_http": True},
            "embedder": {"type": "hash", "dim": 64},
        },
        "perception": perception,
        "server": {"tools": ["memory", "entities"]},
    }
    path = directory / f"{prefix}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def connect(endpoint: str, prefix: str) -> Any:
    return lancedb.connect(f"s3://{BUCKET}/{prefix}", storage_options=storage_options(endpoint))


def rows(db: Any, table: str) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k not in ("vector", "jpeg", "user_id", "updated_at", "created_at")}
            for r in db.open_table(table).search().limit(None).to_list()]


def memory_of(endpoint: str, prefix: str) -> dict[str, Any]:
    """The episodic memory of a store, entity ids renamed by first appearance within each source.

    Which number a person gets, and whether a face on one clip is (wrongly) taken for someone first
    seen on another clip, depends on which source's segment committed first, in one process as in a
    cluster; what each source remembers must not.
    """
    db = connect(endpoint, prefix)
    data = {name: rows(db, name) for name in TABLES}
    for name in ("traces", "observations", "keyframes", "schemas", "entities"):
        ids = [r["id"] for r in data[name]]
        assert len(ids) == len(set(ids)), f"{prefix}: duplicate rows in {name}"
    canon: dict[tuple[str, str], str] = {}
    for t in sorted(data["traces"], key=lambda r: (r["source"], r["segment_index"])):
        seen = sum(1 for source, _ in canon if source == t["source"])
        for e in t["entity_ids"]:
            if (t["source"], e) not in canon:
                canon[(t["source"], e)] = f"{Path(t['source']).stem}#{seen}"
                seen += 1

    def norm(value: Any, source: str) -> Any:
        if isinstance(value, str):
            return re.sub(r"(person|object)_\d{4}", lambda m: canon.get((source, m.group(0)), "?"), value)
        if isinstance(value, list):
            return [norm(v, source) for v in value]
        if isinstance(value, float):
            return round(value, 3)
        return value

    def keyed(table: str, key: tuple[str, ...], fields: tuple[str, ...]) -> dict[tuple[Any, ...], dict[str, Any]]:
        return {tuple(norm(r[k], r["source"]) for k in key): {f: norm(r[f], r["source"]) for f in fields}
                for r in data[table]}

    return {
        "traces": keyed("traces", ("id",), ("camera_id", "t_start", "t_end", "summary", "entity_ids", "objects",
                                           "keyframe_ids", "level")),
        "observations": keyed("observations", ("source", "segment_index", "entity_id"), ("text", "keyframe_ids")),
        "keyframes": keyed("keyframes", ("id",), ("source", "segment_index", "entity_ids")),
        "ingest_log": {r["source"]: (r["last_segment_index"], r["done"]) for r in data["ingest_log"]},
        "chapters": sorted((r["source"], round(r["t_start"], 3), round(r["t_end"], 3), tuple(r["trace_ids"]))
                           for r in data["schemas"]),
        "entities": len(data["entities"]),
    }


#: asks the cluster where the long source's actor runs (a Ray driver of its own, so that this process never joins)
WHERE = """
import sys, ray
ray.init(address=sys.argv[1], namespace="reflectworld", log_to_driver=False, logging_level="ERROR")
print(ray.get(ray.get_actor(sys.argv[2]).where.remote())["pid"])
"""


def kill_worker_mid_run(cluster: RayCluster, endpoint: str, prefix: str, proc: subprocess.Popen[bytes],
                        log: Path, env: dict[str, str]) -> int:
    """SIGKILL the long source's actor process once it committed two segments; returns the killed pid."""
    db = connect(endpoint, prefix)
    deadline = time.monotonic() + 240
    while True:
        assert proc.poll() is None, f"the run ended before a worker could be killed: {log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, "the long source committed no second segment in time"
        if "ingest_log" in db.list_tables().tables:
            state = [r for r in rows(db, "ingest_log") if r["source"] == str(LONG)]
            if state and state[0]["last_segment_index"] >= 1:
                break
        time.sleep(0.1)
    where = subprocess.run([sys.executable, "-c", WHERE, cluster.gcs, f"site/{LONG.stem}"], env=env,
                           capture_output=True, text=True, timeout=120)
    assert where.returncode == 0, where.stderr[-3000:]
    pid = int(where.stdout.split()[-1])
    os.kill(pid, signal.SIGKILL)
    return pid


def test_a_killed_worker_loses_and_duplicates_nothing(ray_cluster: RayCluster, s3_env: dict[str, str],
                                                      tmp_path: Path, s3_endpoint: str) -> None:
    env = {**s3_env, **ray_cluster.env}
    sources = [a for s in SOURCES for a in ("--source", str(s))]
    single = subprocess.run([*cli(), "run", "-m", str(write_manifest(tmp_path, "single")), *sources],
                            env=s3_env, capture_output=True, text=True, timeout=300)
    assert single.returncode == 0, single.stderr[-3000:]

    err = tmp_path / "cluster.err"
    with err.open("wb") as errfile:
        proc = subprocess.Popen([*cli(), "run", "-m", str(write_manifest(tmp_path, "cluster")), "--cluster",
                                 ray_cluster.gcs, "--cpus-per-source", "0.5", *sources],
                                env=env, stdout=subprocess.PIPE, stderr=errfile,
                                stdin=subprocess.DEVNULL)
    try:
        killed = kill_worker_mid_run(ray_cluster, s3_endpoint, "cluster", proc, err, env)
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    log = err.read_text(errors="replace")
    assert proc.returncode == 0, log[-3000:]
    lines = out.decode().splitlines()
    assert any(line.startswith(f"{LONG.stem}: done") and "worker restarted 1×" in line for line in lines), (lines, log)
    assert f"{LONG.stem} was restarted" in log and "Traceback" not in log, log[-3000:]
    assert killed > 0

    expected, got = memory_of(s3_endpoint, "single"), memory_of(s3_endpoint, "cluster")
    assert len(expected["traces"]) >= 10 and expected["entities"] >= 3
    assert all(done for _, done in got["ingest_log"].values()) and len(got["ingest_log"]) == 3
    for part in ("traces", "observations", "keyframes", "ingest_log", "chapters"):
        assert got[part] == expected[part], part


@pytest.mark.anyio
async def test_serve_on_the_object_store_sees_another_process_write_within_seconds(
        s3_env: dict[str, str], tmp_path: Path) -> None:
    manifest = write_manifest(tmp_path, "served", {"level": "light"})
    cmd = cli()
    params = StdioServerParameters(command=cmd[0], args=[*cmd[1:], "serve", "--manifest", str(manifest)], env=s3_env)
    clip = DATA / "grid_lrwp9a.mpg"
    with anyio.fail_after(240), (tmp_path / "serve.log").open("w") as errlog:
        async with Client(stdio_client(params, errlog=errlog)) as client:
            async def hits() -> list[dict[str, Any]]:
                result = await client.call_tool("memory_search", {"query": "lighting", "camera": clip.stem})
                return list(result.structured_content["hits"])

            assert await hits() == []
            written = threading.Event()

            def ingest() -> None:
                done = subprocess.run([*cli(), "ingest", str(clip), "-m", str(manifest)], env=s3_env,
                                      capture_output=True, text=True, timeout=200)
                assert done.returncode == 0, done.stderr[-3000:]
                written.set()

            await anyio.to_thread.run_sync(ingest)
            assert written.is_set()
            finished = time.monotonic()
            while not await hits():
                assert time.monotonic() - finished < 5.0, "serve did not see the new segments within 5 s"
                await anyio.sleep(0.2)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
