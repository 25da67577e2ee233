"""One engine for every entry point: same memory whichever path ingests, shared live identities,
context layers in real prompts, plain-language rules that fire, one owner per store."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import anyio
import cv2
import pytest
import yaml
from mcp import Client

from memory.identity.identity_ops import forget_entity
from memory.models import SegmentWrite
from perception.detectors.model_files import ort_options, ort_threads, set_model_threads
from plugin.engine import Engine, Overrides, build_embedder, open_store
from plugin.manifest import MiniLMEmbedderConfig, load_manifest
from plugin.server import create_server
from tests.conftest import CLIP, engine_for, write_manifest
from tests.perception.fake_vlm_server import FakeVLMServer, prompt_text
from tests.plugin.rules_clip import make_event_clip, make_people_clip
from tests.plugin.test_transports import cli

#: 2023-11-14 22:13:20 UTC: the wall clock of a generated clip's first frame (its mtime)
T0 = 1_700_000_000.0
#: people walking into and out of an empty room: (start, end, portrait); the last two overlap (one event)
APPEARANCES = [(2.0, 6.0, "lin-manuel-miranda.png"), (10.0, 14.0, "alex-lacamoire.png"),
               (18.0, 23.0, "lin-manuel-miranda.png"), (19.0, 23.0, "alex-lacamoire.png")]
EVENTS = [(2.0, 6.0), (10.0, 14.0), (18.0, 23.0)]
QUICK = {"ocr": {"type": "none"}, "asr": {"type": "none"}}
RULE = "tell me when someone comes into view"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _run(args: list[str], env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*cli(), *args], capture_output=True, text=True, env=env, timeout=timeout,
                          stdin=subprocess.DEVNULL)


#: columns that record when a row was written, not what was remembered
VOLATILE = {"created_at", "updated_at", "seq", "vector", "revised_at", "decided_at", "last_delivery_at"}


def _memory(manifest: Path) -> dict[str, list[dict[str, Any]]]:
    """Every remembered row that perception, semantic memory and rules produce, without write times."""
    store = open_store(load_manifest(manifest))
    try:
        out = {}
        for table in ("traces", "observations", "keyframes", "entities", "schemas", "facts", "notifications",
                      "identity_decisions", "gallery_face"):
            rows = [{k: v for k, v in r.items() if k not in VOLATILE and not k.endswith("_json")}
                    for r in store.scan_rows(table)]
            out[table] = sorted(rows, key=lambda r: str(r.get("id")))
        return out
    finally:
        store.close()


@pytest.mark.slow
def test_ingest_run_and_capture_start_remember_the_same_rows(tmp_path: Path, clean_env: dict[str, str]) -> None:
    clip = tmp_path / "stage.mp4"  # one file: its path is the source key every row derives from
    shutil.copy(CLIP, clip)
    common: dict[str, Any] = {"perception": QUICK, "semantic": {"every_n": 1, "chapter_budget": 1},
                              "rules": [{"text": RULE, "cooldown_s": 0}], "access": {"roots": [str(tmp_path)]}}
    manifests = {name: write_manifest(tmp_path / name, **common) for name in ("ingest", "run", "tool")}

    ingest = _run(["ingest", str(clip), "--manifest", str(manifests["ingest"])], clean_env)
    assert ingest.returncode == 0, ingest.stderr
    run = _run(["run", "--source", str(clip), "--manifest", str(manifests["run"])], clean_env)
    assert run.returncode == 0, run.stderr

    async def capture() -> None:
        async with Client(create_server(load_manifest(manifests["tool"]))) as client:
            started = await client.call_tool("capture_start", {"source": str(clip)})
            assert not started.is_error, started.content
            with anyio.fail_after(240):
                while True:
                    status = await client.call_tool("capture_status", {"camera_id": "stage"})
                    if status.structured_content["captures"][0]["state"] == "done":  # type: ignore[index]
                        break
                    await anyio.sleep(0.2)
        # leaving the client closes the engine, which finishes the queued semantic work

    anyio.run(capture)
    rows = {name: _memory(path) for name, path in manifests.items()}
    reference = rows["ingest"]
    assert reference["traces"] and reference["observations"] and reference["entities"]
    assert reference["schemas"], "the source's end must flush its last event into a chapter"
    assert reference["notifications"]
    for name in ("run", "tool"):
        for table, expected in reference.items():
            assert rows[name][table] == expected, f"{name}: table {table} differs from `reflectworld ingest`"


def test_two_cameras_share_identities_live_and_a_forget_reaches_a_running_capture(tmp_path: Path) -> None:
    """Camera B starts before anyone is known; camera A meets the person while B runs; B must then
    recognise that person, and after a forget B must never bring the forgotten id back."""
    a = make_event_clip(tmp_path / "a.mp4", [(0.0, 3.0)], seconds=4.0, mtime=T0)
    b = make_event_clip(tmp_path / "b.mp4", [(4.0, 7.0), (12.0, 15.0)], seconds=17.0, mtime=T0)
    writes: list[SegmentWrite] = []
    forgotten: list[str] = []
    with engine_for(tmp_path, Overrides(on_commit=writes.append), perception=QUICK) as engine:

        def progress(_done: float, _total: float, segments: int) -> None:
            if segments == 1:  # B is running and its analyzer exists: now camera A meets the person
                engine.worker.start_capture(str(a), "cam_a")
                deadline = time.monotonic() + 60
                while not engine.worker.idle() and time.monotonic() < deadline:
                    time.sleep(0.05)
                assert engine.worker.status("cam_a")[0].state == "done"
            seen_b = [w for w in writes if w.camera_id == "cam_b" and w.trace.entity_ids]
            if seen_b and not forgotten and seen_b[-1].trace.t_end <= 10.0:
                entity = seen_b[-1].trace.entity_ids[0]
                with engine.identity.lock:  # what entity_update(action="forget") does
                    forget_entity(engine.store, entity)
                    engine.identity_edited()
                forgotten.append(entity)

        engine.ingest_file(b, "cam_b", progress=progress)
        on_a = {e for w in writes if w.camera_id == "cam_a" for e in w.trace.entity_ids}
        first_b = [w for w in writes if w.camera_id == "cam_b" and w.trace.entity_ids and w.trace.t_start < 10]
        later_b = [w for w in writes if w.camera_id == "cam_b" and w.trace.entity_ids and w.trace.t_start >= 10]
        assert len(on_a) == 1, f"camera A should have met one person, got {on_a}"
        assert first_b and set(first_b[0].trace.entity_ids) == on_a, "camera B did not recognise A's person"
        assert forgotten == sorted(on_a)
        assert later_b, "the person came back on camera B"
        assert all(forgotten[0] not in w.trace.entity_ids for w in later_b)
        assert forgotten[0] not in {e.id for e in engine.store.list_entities()}
        assert not engine.store.scan_rows("observations", f"entity_id = '{forgotten[0]}'")


@pytest.mark.slow
def test_real_prompts_carry_camera_context_and_entity_history_through_cli_and_server(
        tmp_path: Path, clean_env: dict[str, str]) -> None:
    first, second, third = (tmp_path / f"take{i}.mp4" for i in (1, 2, 3))
    for take in (first, second, third):
        shutil.copy(CLIP, take)
    with FakeVLMServer(require_images=True) as fake:
        vlm = {"base_url": fake.base_url, "model": "fake-vlm", "api_key": "${RW_TEST_VLM_KEY:}", "max_attempts": 1}
        manifest = write_manifest(tmp_path, perception={**QUICK, "level": "full"}, vlm=vlm,
                                  access={"roots": [str(tmp_path)]})

        # 1. the CLI meets the people on camera "stage": nothing is known yet
        done = _run(["ingest", str(first), "--camera", "stage", "--manifest", str(manifest)], clean_env)
        assert done.returncode == 0, done.stderr
        cold = [prompt_text(r["body"]) for r in fake.requests]
        assert cold and all("no camera context yet" in p for p in cold)

        async def set_context_then_capture() -> None:
            async with Client(create_server(load_manifest(manifest))) as client:
                result = await client.call_tool("context_set", {"camera_id": "stage", "scene_type": "theatre stage",
                                                                "routines": ["rehearsals in the evening"]})
                assert not result.is_error, result.content

        # 2. a host describes the camera through the server
        anyio.run(set_context_then_capture)
        fake.requests.clear()

        # 3. the CLI sees the same people again: its prompts carry the camera context and their history
        done = _run(["ingest", str(second), "--camera", "stage", "--manifest", str(manifest)], clean_env)
        assert done.returncode == 0, done.stderr
        warm = [prompt_text(r["body"]) for r in fake.requests]
        assert warm and all("scene: theatre stage" in p for p in warm)
        assert any(re.search(r"## Entity history\nperson_\d{4}:\n  seen: ", p) for p in warm)

        # 4. the server's capture path builds the same prompts
        fake.requests.clear()

        async def capture() -> None:
            async with Client(create_server(load_manifest(manifest))) as client:
                started = await client.call_tool("capture_start", {"source": str(third), "camera_id": "stage"})
                assert not started.is_error, started.content
                with anyio.fail_after(240):
                    while (await client.call_tool("capture_status", {"camera_id": "stage"})).structured_content[
                            "captures"][0]["state"] != "done":  # type: ignore[index]
                        await anyio.sleep(0.2)

        anyio.run(capture)
        served = [prompt_text(r["body"]) for r in fake.requests]
        assert served and all("scene: theatre stage" in p for p in served)
        assert any(re.search(r"## Entity history\nperson_\d{4}:\n  seen: ", p) for p in served)


@pytest.mark.slow
def test_a_rule_given_only_as_text_notifies_once_per_appearance_without_a_vlm(
        tmp_path: Path, clean_env: dict[str, str]) -> None:
    clip = make_people_clip(tmp_path / "room.mp4", APPEARANCES, seconds=26.0, mtime=T0)

    async def scenario() -> list[dict[str, Any]]:
        manifest = write_manifest(tmp_path, perception=QUICK, access={"roots": [str(tmp_path)]})
        async with Client(create_server(load_manifest(manifest))) as client:
            added = await client.call_tool("rule_add", {"text": RULE, "cooldown": 0})
            assert not added.is_error, added.content
            rule = added.structured_content
            assert rule["conditions"]["entities"] == ["*"]  # type: ignore[index]
            assert "understood: 'someone' → anyone" in added.content[0].text  # type: ignore[union-attr]
            policy = await client.call_tool("notify_policy", {"camera": "room", "event_gap_s": 2.0})
            assert not policy.is_error, policy.content
            started = await client.call_tool("capture_start", {"source": str(clip)})
            assert not started.is_error, started.content
            with anyio.fail_after(240):
                while (await client.call_tool("capture_status", {"camera_id": "room"})).structured_content[
                        "captures"][0]["state"] != "done":  # type: ignore[index]
                    await anyio.sleep(0.2)
            polled = await client.call_tool("notify_poll", {"since": 0})
            return polled.structured_content["notifications"]  # type: ignore[index,no-any-return]

    notes = anyio.run(scenario)
    assert len(notes) == len(EVENTS), [n["message"] for n in notes]
    for note, (start, end) in zip(notes, EVENTS):
        assert start - 1.0 <= note["t_start"] <= end
    assert len(notes[-1]["entities"]) == 2  # both people, in one notification

    labels = tmp_path / "labels.yaml"
    labels.write_text(yaml.safe_dump({"camera": "room", "rules": [{"text": RULE, "cooldown_s": 0}],
                                      "policy": {"event_gap_s": 2.0},
                                      "events": [{"start": a, "end": b} for a, b in EVENTS]}))
    result = _run(["eval", "rules", str(clip), str(labels), "--json", "--manifest",
                   str(write_manifest(tmp_path / "eval", perception=QUICK))], clean_env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {"precision": 1.0, "recall": 1.0, "deliveries": 3}


def test_rule_add_explains_what_it_understood_and_refuses_what_it_cannot(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with Client(create_server(load_manifest(write_manifest(tmp_path)))) as client:
            refused = await client.call_tool("rule_add", {"text": "ping me about the vibes"})
            assert refused.is_error
            message = refused.content[0].text  # type: ignore[union-attr]
            assert "without a vision-language model" in message and "rephrase" in message
            assert (await client.call_tool("rule_list", {})).structured_content["total"] == 0  # type: ignore[index]

            partial = await client.call_tool("rule_add", {"text": "let me know if the dog gets on the trampoline"})
            assert not partial.is_error
            cond = partial.structured_content["conditions"]  # type: ignore[index]
            assert cond["objects"] == ["dog"] and any("trampoline" in n for n in cond["needs_vlm"])
            assert "ignored without a vision model" in partial.content[0].text  # type: ignore[union-attr]

            absent = await client.call_tool("rule_add", {"text": "alert me if nobody is seen for 10 minutes"})
            assert absent.structured_content["conditions"]["absent_minutes"] == 10  # type: ignore[index]
            said = await client.call_tool("rule_add", {"text": "tell me when someone says 'dinner is ready'"})
            assert said.structured_content["conditions"]["said"] == ["dinner is ready"]  # type: ignore[index]

    anyio.run(scenario)


def test_vlm_rule_signals_notify_for_rules_only_a_vlm_can_judge(tmp_path: Path, clean_env: dict[str, str]) -> None:
    rule = "let me know if the performer bows"

    def responder(body: dict[str, Any]) -> dict[str, Any]:
        text = prompt_text(body)
        assert rule in text  # the active rule reaches the prompt
        return {"summary": "a performer bows", "event_summary": "a bow", "observations": [],
                "scene": {"scene_type": "stage", "change": "no change"},
                "rule_signals": [{"rule": rule, "matched": True, "evidence": "the performer bows deeply"},
                                 {"rule": "an invented rule", "matched": True, "evidence": "ignored"}],
                "risk": "low", "risk_reason": "none"}

    clip = tmp_path / "stage.mp4"
    shutil.copy(CLIP, clip)
    with FakeVLMServer(responder=responder) as fake:
        vlm = {"base_url": fake.base_url, "model": "fake-vlm", "api_key": "${RW_TEST_VLM_KEY:}", "max_attempts": 1}
        manifest = write_manifest(tmp_path, perception={"level": "light"}, vlm=vlm,
                                  rules=[{"text": rule, "cooldown_s": 0}],
                                  notifications={"policy": {"event_gap_s": 0.0}})
        done = _run(["ingest", str(clip), "--camera", "stage", "--manifest", str(manifest)], clean_env)
        assert done.returncode == 0, done.stderr
        assert fake.problems == []
    store = open_store(load_manifest(manifest))
    try:
        [stored] = store.scan_rows("rules", "id LIKE 'rule_%'")
        sent = [r for r in store.scan_rows("notifications") if r["decision"] == "sent"]
    finally:
        store.close()
    assert json.loads(stored["conditions_json"])["entities"] == []  # the text goes to the VLM as a whole
    assert sent and all(json.loads(r["payload_json"])["origin"] == "vlm" for r in sent)
    assert any("the performer bows deeply" in r["message"] for r in sent)


def test_one_process_owns_a_stores_captures(tmp_path: Path, clean_env: dict[str, str]) -> None:
    other = make_event_clip(tmp_path / "other.mp4", [(0.5, 1.5)], seconds=2.0)
    manifest = write_manifest(tmp_path, perception={"level": "light", "sample_fps": 1.0},
                              access={"roots": [str(tmp_path)]})
    # a phone camera is a live source: the headless daemon keeps capturing until it is stopped
    daemon = subprocess.Popen([*cli(), "run", "--source", "phone:door", "--manifest", str(manifest)],
                              env=clean_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        lease = tmp_path / "lancedb" / ".capture-owner"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (lease.is_file() and str(daemon.pid) in lease.read_text()):
            assert daemon.poll() is None, daemon.stderr.read() if daemon.stderr else ""
            time.sleep(0.1)
        # a one-shot file ingest may run beside the owner (atomic ids) and says so
        beside = _run(["ingest", str(other), "--manifest", str(manifest)], clean_env)
        assert beside.returncode == 0, beside.stderr
        assert f"(pid {daemon.pid}) is capturing into this store too" in beside.stderr

        async def capture() -> None:
            async with Client(create_server(load_manifest(manifest))) as client:
                result = await client.call_tool("capture_start", {"source": str(other)})
                assert result.is_error and f"pid {daemon.pid}" in result.content[0].text  # type: ignore[union-attr]
                found = await client.call_tool("memory_search", {"query": "scene"})
                assert not found.is_error  # reading memory works meanwhile

        anyio.run(capture)
    finally:
        daemon.send_signal(signal.SIGINT)
        try:
            daemon.wait(60)
        except subprocess.TimeoutExpired:
            daemon.kill()
    assert os.path.exists(tmp_path / "lancedb" / ".capture-owner")
    with Engine.from_manifest(load_manifest(manifest)) as engine:
        assert engine.lease.owner() is None  # the daemon is gone: captures may start here now
        engine.worker.start_capture(str(other), "door")
        assert engine.lease.held


def test_the_manifest_perception_section_is_the_runtime_settings(tmp_path: Path) -> None:
    """Bounds are checked once, where the manifest loads: what validates there runs."""
    clip = make_event_clip(tmp_path / "door.mp4", [(0.5, 1.5)], seconds=2.0)
    manifest = load_manifest(write_manifest(tmp_path, perception={"level": "light", "keyframes_per_segment": 16,
                                                                  "keyframe_min_gap_s": 0.0}))
    with Engine.from_manifest(manifest) as engine:
        assert engine.pipeline.settings is manifest.perception
        report = engine.ingest_file(clip)
        frames = engine.store.keyframes([k for t in engine.store.timeline() for k in t.keyframe_ids])
    assert report.done and len(frames) > 2 * report.segments_written


def test_model_threads_from_the_manifest_size_every_model_call(tmp_path: Path) -> None:
    """One thread per model call by default (least CPU per camera); the manifest may give a call more."""
    cpus = len(os.sched_getaffinity(0))
    try:
        for asked in (2, 1):
            manifest = load_manifest(write_manifest(tmp_path / str(asked), perception={"model_threads": asked}))
            with Engine.from_manifest(manifest):
                want = min(asked, cpus)
                assert ort_threads() == want and cv2.getNumThreads() == want
                assert ort_options().intra_op_num_threads == want
            minilm = manifest.model_copy(update={"memory": manifest.memory.model_copy(
                update={"embedder": MiniLMEmbedderConfig()})})
            assert build_embedder(minilm)._threads == asked  # type: ignore[attr-defined]
        assert load_manifest(write_manifest(tmp_path / "default")).perception.model_threads == 1
    finally:
        set_model_threads(1)
