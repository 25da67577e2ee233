"""`reflectworld ingest` with a VLM in the manifest: segments are described by the (fake) remote model."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from tests.conftest import CLIP, engine_for, write_manifest
from tests.perception.fake_vlm_server import FakeVLMServer, prompt_text
from tests.plugin.test_transports import cli


def responder(body: dict[str, Any]) -> dict[str, Any]:
    n = int(re.search(r"(\d+) segment", prompt_text(body)).group(1))  # type: ignore[union-attr]
    return {"summary": f"VLMSEG{n} a performer on a lit stage", "event_summary": f"VLMEVENT up to {n}",
            "observations": [], "scene": {"scene_type": "stage", "change": "no change"},
            "rule_signals": [], "risk": "none", "risk_reason": "a performance"}


def test_ingest_describes_segments_with_the_configured_vlm_and_keeps_the_key_secret(clean_env: dict[str, str],
                                                                                     tmp_path: Path) -> None:
    clip = tmp_path / "stage.mp4"
    shutil.copy(CLIP, clip)
    with FakeVLMServer(require_images=True, require_text=["## Working memory"], api_key="sk-vlm-secret",
                       responder=responder) as fake:
        manifest = write_manifest(tmp_path, log_level="INFO", perception={"level": "light"},
                                  vlm={"base_url": fake.base_url, "model": "fake-vlm", "api_key": "${RW_VLM_KEY}"})
        env = {**clean_env, "RW_VLM_KEY": "sk-vlm-secret"}
        result = subprocess.run([*cli(), "ingest", str(clip), "--manifest", str(manifest)], capture_output=True,
                                text=True, env=env, timeout=300, stdin=subprocess.DEVNULL)
        assert result.returncode == 0, result.stderr
        assert fake.problems == []
        assert len(fake.requests) >= 4
    assert "sk-vlm-secret" not in result.stderr + result.stdout

    from plugin.manifest import load_manifest
    from plugin.engine import open_store

    env_manifest = manifest.read_text().replace("${RW_VLM_KEY}", "${RW_VLM_KEY:}")
    manifest.write_text(env_manifest)
    store = open_store(load_manifest(manifest))
    try:
        summaries = [t.summary for t in store.timeline()]
        hits = store.search("performer on a lit stage", limit=3)
    finally:
        store.close()
    assert len(summaries) >= 4
    assert [re.sub(r"^\S+ ", "", s) for s in summaries] == [f"VLMSEG{n} a performer on a lit stage"
                                                            for n in range(len(summaries))]
    assert hits and "VLMSEG" in hits[0].text


LIVE = {"mode": "live_latency", "ocr": {"type": "none"}, "asr": {"type": "none"}, "objects": {"type": "none"},
        "body": {"type": "none"}}


def test_live_latency_commits_identities_first_and_the_vlm_text_reconciles_after(tmp_path: Path) -> None:
    clip = tmp_path / "stage.mp4"
    shutil.copy(CLIP, clip)
    engines: list[Any] = []
    lock_free: list[bool] = []

    def unlocked_responder(body: dict[str, Any]) -> dict[str, Any]:
        lock = engines[0].identity.lock  # the VLM call must not hold up other cameras' identity decisions
        got = lock.acquire(blocking=False)
        lock_free.append(got)
        if got:
            lock.release()
        return responder(body)

    with FakeVLMServer(require_images=True, responder=unlocked_responder) as fake:
        vlm = {"base_url": fake.base_url, "model": "fake-vlm", "api_key": "${RW_TEST_VLM_KEY:}", "max_attempts": 1}
        with engine_for(tmp_path, perception=LIVE, vlm=vlm) as engine:
            engines.append(engine)
            committed: list[Any] = []
            hooks = engine.pipeline.on_commit
            object.__setattr__(engine.pipeline, "on_commit", lambda w: (committed.append(w), hooks(w)))
            report = engine.ingest_file(clip, "stage")
            traces = engine.store.timeline()
            people = engine.store.list_entities()
            analysed = engine.perception.scheduler.counters()["analysed"]
    first = [w for w in committed if not w.enrichment]
    second = [w for w in committed if w.enrichment]
    assert report.segments_written == len(traces) == len(first)
    assert not any("VLMSEG" in w.trace.summary for w in first)  # phase one: local describer text
    assert all("VLMSEG" in w.trace.summary and not w.entities for w in second)  # phase two: text only
    enriched = [t for t in traces if "VLMSEG" in t.summary]
    assert len(enriched) == len(second) == analysed == len(fake.requests)
    assert people and all(p.sightings >= 1 for p in people)  # identities from phase one stand
    assert lock_free and all(lock_free)


def test_a_failing_vlm_never_loses_a_segment_in_live_latency(tmp_path: Path) -> None:
    from tests.perception.fake_vlm_server import Reply

    clip = tmp_path / "stage.mp4"
    shutil.copy(CLIP, clip)
    with FakeVLMServer() as fake:
        fake.enqueue(*[Reply(status=500) for _ in range(40)])
        vlm = {"base_url": fake.base_url, "model": "fake-vlm", "api_key": "${RW_TEST_VLM_KEY:}", "max_attempts": 1}
        with engine_for(tmp_path, perception=LIVE, vlm=vlm) as engine:
            report = engine.ingest_file(clip, "stage")
            traces = engine.store.timeline()
    assert report.segments_written == len(traces) >= 4
    assert all(t.summary and "VLMSEG" not in t.summary for t in traces)
