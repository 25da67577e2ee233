"""A real local Ray cluster (2 CPUs) and an S3 server (moto) on loopback, one of each per module."""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

try:
    import ray  # noqa: F401
    import moto  # noqa: F401
except ImportError as exc:  # a failure, not a skip: CI installs the extra and must run these
    raise ImportError("tests/cluster need the `cluster` extra: pip install -e '.[test,asr,ocr,cluster]'") from exc

BUCKET = "memory"
KEY_ID, SECRET = "cluster-test", "cluster-test-secret"


def storage_options(endpoint: str) -> dict[str, str]:
    """LanceDB's options for the test bucket at ``endpoint``."""
    return {"aws_endpoint": endpoint, "aws_region": "us-east-1", "aws_access_key_id": KEY_ID,
            "aws_secret_access_key": SECRET, "allow_http": "true"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    """An S3-compatible server on loopback with one empty bucket; the only thing not real here."""
    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    try:
        boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=KEY_ID, aws_secret_access_key=SECRET,
                     region_name="us-east-1").create_bucket(Bucket=BUCKET)
        yield endpoint
    finally:
        server.stop()


@pytest.fixture(scope="module")
def s3_env(s3_endpoint: str) -> dict[str, str]:
    """The environment a manifest's ``${S3_ENDPOINT}`` and credentials are read from."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "RAY_"))}
    env.update({"S3_ENDPOINT": s3_endpoint, "S3_KEY_ID": KEY_ID, "S3_SECRET": SECRET,
                "OPENCV_LOG_LEVEL": "ERROR", "ORT_DISABLE_TELEMETRY": "1"})
    return env


@dataclass(frozen=True)
class RayCluster:
    """The test cluster: its address (``HOST:PORT``, as on a node of a real cluster) and auth settings."""

    gcs: str
    #: Ray's token authentication, for every process that joins the cluster
    env: dict[str, str]


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[RayCluster]:
    """``ray start --head`` with 2 CPUs and token authentication; every process it started is ended afterwards."""
    ray_bin = Path(sys.executable).with_name("ray")
    port = free_port()
    # Ray's socket paths must stay short: a temp dir of its own under /tmp, not pytest's deep one.
    temp = tempfile.mkdtemp(prefix="rwray")
    log = Path(temp) / "start.log"
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}  # nothing written to ~/.ray
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(ray_bin), "start", "--head", "--block", f"--port={port}", "--num-cpus=2",
             "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={temp}"],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=temp,
            env={"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/root"), "LANG": "C.UTF-8",
                 **auth})
    try:
        deadline = time.monotonic() + 120
        while b"block forever" not in log.read_bytes():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"ray start failed: {log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.2)
        yield RayCluster(gcs=f"127.0.0.1:{port}", env=auth)
    finally:
        _end_group(proc)
        shutil.rmtree(temp, ignore_errors=True)


def _end_group(proc: subprocess.Popen[bytes]) -> None:
    """End ``ray start`` and everything it started (they share its session and process group)."""
    for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            continue
        if sig == signal.SIGTERM:  # the head is gone; its children may linger a moment longer
            time.sleep(1.0)
