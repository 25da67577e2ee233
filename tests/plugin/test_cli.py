"""The `reflectworld` command line, run as a real process."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

from tests.conftest import CLIP, write_manifest
from tests.plugin.test_transports import cli

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, env: dict[str, str], timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*cli(), *args], capture_output=True, text=True, env=env, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def make_long_clip(path: Path, scenes: int = 24, scene_s: float = 1.5, fps: int = 10) -> Path:
    """A clip of ``scenes`` visually distinct shots (one segment each)."""
    rng = np.random.default_rng(7)
    with av.open(str(path), mode="w") as out:
        stream = out.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = 320, 240, "yuv420p"
        stream.options = {"preset": "ultrafast"}
        n = 0
        for scene in range(scenes):
            base = np.zeros((240, 320, 3), np.uint8)
            base[:] = rng.integers(0, 255, 3, dtype=np.uint8)
            base[40 * (scene % 5):40 * (scene % 5) + 60, :, :] = 255 - base[0, 0]
            for _ in range(int(scene_s * fps)):
                frame = av.VideoFrame.from_ndarray(base, format="bgr24")
                frame.pts, frame.time_base = n, Fraction(1, fps)
                n += 1
                for packet in stream.encode(frame):
                    out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path


def test_validate_accepts_the_example_and_lists_problems_of_a_bad_manifest(clean_env: dict[str, str],
                                                                           tmp_path: Path) -> None:
    good = run("validate", str(ROOT / "manifests" / "example.yaml"), env=clean_env)
    assert good.returncode == 0 and "valid" in good.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("memory:\n  urii: /x\nperception:\n  sample_fps: -2\n")
    result = run("validate", str(bad), env=clean_env)
    assert result.returncode == 2
    assert "memory.urii: unknown key — did you mean 'uri'?" in result.stderr
    assert "perception.sample_fps" in result.stderr and "2 problem(s)" in result.stderr


def test_ingest_reports_progress_on_stderr_and_a_rerun_writes_nothing_new(clean_env: dict[str, str],
                                                                          tmp_path: Path) -> None:
    manifest = write_manifest(tmp_path, log_level="INFO", perception={"level": "light"})
    clip = tmp_path / "stage.mp4"
    shutil.copy(CLIP, clip)
    first = run("ingest", str(clip), "--manifest", str(manifest), env=clean_env)
    assert first.returncode == 0, first.stderr
    assert "ingest stage.mp4:" in first.stderr and "(100%)" in first.stderr
    written = re.search(r"complete; (\d+) segment\(s\) written, 0 already in memory", first.stdout)
    assert written and int(written[1]) >= 4
    again = run("ingest", str(clip), "--manifest", str(manifest), env=clean_env)
    assert again.returncode == 0
    assert f"complete; 0 segment(s) written, {written[1]} already in memory" in again.stdout


def test_ctrl_c_stops_between_segments_and_the_rerun_resumes_without_duplicates(clean_env: dict[str, str],
                                                                                tmp_path: Path) -> None:
    manifest = write_manifest(tmp_path, log_level="INFO", perception={"level": "light"})
    clip = make_long_clip(tmp_path / "long.mp4")
    proc = subprocess.Popen([*cli(), "ingest", str(clip), "--manifest", str(manifest)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=clean_env, stdin=subprocess.DEVNULL)
    assert proc.stderr is not None
    for line in proc.stderr:
        if "ingest long.mp4:" in line:  # the first segment is committed: interrupt now
            proc.send_signal(signal.SIGINT)
            break
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted — run the same command again to resume" in out
    written_first = int(out.split("; ")[1].split()[0])
    assert written_first >= 1

    rerun = run("ingest", str(clip), "--manifest", str(manifest), env=clean_env)
    assert rerun.returncode == 0, rerun.stderr
    resumed = re.search(r"(\d+) segment\(s\) written, (\d+) already in memory", rerun.stdout)
    assert resumed and int(resumed[2]) == written_first and int(resumed[1]) >= 1
    total = written_first + int(resumed[1])

    from plugin.manifest import load_manifest
    from plugin.engine import open_store

    store = open_store(load_manifest(manifest))
    try:
        traces = store.timeline(limit=100)
    finally:
        store.close()
    assert len(traces) == total == len({t.id for t in traces}) >= 20
    assert [t.segment_index for t in traces] == list(range(total))


def network_calls(strace_log: Path) -> list[str]:
    """``connect``/``send*`` system calls of any thread that reach past this machine (DNS included)."""
    calls = []
    for line in strace_log.read_text(errors="replace").splitlines():
        if ("AF_INET" in line and "127.0.0.1" not in line and "::1" not in line) or "htons(53)" in line:
            calls.append(line)
    return calls


@pytest.mark.slow
def test_demo_prints_only_its_output_and_makes_no_network_lookup(clean_env: dict[str, str], tmp_path: Path) -> None:
    """Quiet by default: stdout holds the timeline and searches, stderr stays empty; and no thread of the
    process (native libraries included, which a Python socket guard cannot see) resolves or connects to
    any host: the demo runs under strace and every connect/send system call is checked."""
    env = {k: v for k, v in clean_env.items() if "API_KEY" not in k}
    env["REFLECTWORLD_DATA_DIR"] = str(tmp_path / "data")
    strace = shutil.which("strace")
    if strace is None:
        message = "strace not found; apt-get install strace (the demo's network check needs it)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    log = tmp_path / "strace.log"
    result = subprocess.run([strace, "-f", "-qq", "-o", str(log), "-e", "trace=connect,sendto,sendmsg,sendmmsg",
                             *cli(), "demo"], capture_output=True, text=True, env=env, timeout=300,
                            stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert network_calls(log) == []
    out = result.stdout
    assert out.startswith("ReflectWorld demo: ingesting short_hamilton_clip.mp4")
    timeline = re.search(r"Timeline \((\d+) new, 0 already remembered\)", out)
    assert timeline and int(timeline[1]) >= 4
    assert out.count("trc_") >= int(timeline[1]) + 2  # the timeline rows plus search hits
    # the performer, before and after the cut, and heard rapping over the audience shots that follow
    performer = re.search(r"person_0001: person, seen in (\d+) segment\(s\)", out)
    assert performer and 2 <= int(performer[1]) <= 4
    assert "Search: 'close-up of a person'" in out and "Search: 'wide shot with several people'" in out
    assert (tmp_path / "data" / "demo" / "lancedb").is_dir()


def test_run_shows_progress_per_source_and_logs_info_only_with_v(clean_env: dict[str, str], tmp_path: Path) -> None:
    manifest = write_manifest(tmp_path, perception={"level": "light"})
    clip = tmp_path / "porch.mp4"
    shutil.copy(CLIP, clip)
    result = run("run", "--manifest", str(manifest), "--source", str(clip), env=clean_env)
    assert result.returncode == 0, result.stderr
    assert re.search(r"^porch: done, (\d+) segment\(s\) written from ", result.stdout, re.M)
    progress = [line for line in result.stderr.splitlines() if line.startswith("porch: ")]
    line = re.compile(r"porch: (running|done), \d+ segment\(s\), [\d.]+ s in")  # a short clip may be done at once
    assert progress and all(line.fullmatch(p) for p in progress)
    assert " INFO " not in result.stderr and "INFO " not in result.stderr

    quiet = run("search", "person", "--manifest", str(manifest), env=clean_env)
    verbose = run("-v", "search", "person", "--manifest", str(manifest), env=clean_env)
    assert quiet.returncode == verbose.returncode == 0
    assert "INFO" not in quiet.stderr
    assert "INFO memory.store.facade: opened memory store" in verbose.stderr
    assert quiet.stdout == verbose.stdout
