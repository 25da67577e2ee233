"""`reflectworld ingest` with a VLM in the manifest: segments are described by the (fake) remote model."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from tests.conftest import CLIP, write_manifest
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
    from plugin.server import open_store

    env_manifest = manifest.read_text().replace("${RW_VLM_KEY}", "${RW_VLM_KEY:unused}")
    manifest.write_text(env_manifest)
    store = open_store(load_manifest(manifest))
    try:
        summaries = [t.summary for t in store.timeline()]
        hits = store.search("performer on a lit stage", limit=3)
    finally:
        store.close()
    assert [re.sub(r"^\S+ ", "", s) for s in summaries] == [f"VLMSEG{n} a performer on a lit stage" for n in range(4)]
    assert hits and "VLMSEG" in hits[0].text


def test_live_latency_commits_identities_first_and_the_vlm_text_reconciles_after(tmp_path: Path) -> None:
    from memory import HashEmbedder, MemoryStore
    from perception import IngestSettings, ingest_file
    from perception.context import PerceptionRuntime
    from perception.scheduler import Scheduler
    from perception.vlm import VLMClient
    from perception.vlm_describer import VLMSegmentStage

    clip = tmp_path / "stage.mp4"
    shutil.copy(CLIP, clip)
    settings = IngestSettings(ocr=False, asr=False, objects=False, body=False)
    committed: list[str] = []
    with FakeVLMServer(require_images=True, responder=responder) as fake, \
            MemoryStore(str(tmp_path / "db"), HashEmbedder(32)) as store:
        runtime = PerceptionRuntime(scheduler=Scheduler("live_latency", "full"))
        client = VLMClient(base_url=fake.base_url, model="fake-vlm", api_key="k", max_attempts=1)
        stage = VLMSegmentStage(client, runtime.builder, runtime.steering)

        def on_commit(write: Any) -> None:  # hooks see the identity-phase write, before enrichment
            committed.append(write.trace.summary)

        try:
            report = ingest_file(clip, store, settings, camera_id="stage", on_commit=on_commit, vlm_stage=stage,
                                 scheduler=runtime.scheduler)
        finally:
            client.close()
        traces = store.timeline()
        people = store.list_entities()
    analysed = runtime.scheduler.counters()["analysed"]
    assert report.segments_written == len(traces) == len(committed) == 4
    assert not any("VLMSEG" in text for text in committed)  # phase one: local describer text
    enriched = [t for t in traces if "VLMSEG" in t.summary]
    assert len(enriched) == analysed == len(fake.requests)  # phase two replaced the text of each analysed one
    assert people and all(p.sightings >= 1 for p in people)  # identities from phase one stand


def test_a_failing_vlm_never_loses_a_segment_in_live_latency(tmp_path: Path) -> None:
    from memory import HashEmbedder, MemoryStore
    from perception import IngestSettings, ingest_file
    from perception.context import PerceptionRuntime
    from perception.scheduler import Scheduler
    from perception.vlm import VLMClient
    from perception.vlm_describer import VLMSegmentStage
    from tests.perception.fake_vlm_server import Reply

    clip = tmp_path / "stage.mp4"
    shutil.copy(CLIP, clip)
    with FakeVLMServer() as fake, MemoryStore(str(tmp_path / "db"), HashEmbedder(32)) as store:
        fake.enqueue(*[Reply(status=500) for _ in range(20)])
        runtime = PerceptionRuntime(scheduler=Scheduler("live_latency", "full"))
        client = VLMClient(base_url=fake.base_url, model="fake-vlm", api_key="k", max_attempts=1)
        try:
            report = ingest_file(clip, store, IngestSettings(ocr=False, asr=False, objects=False, body=False),
                                 vlm_stage=VLMSegmentStage(client, runtime.builder, runtime.steering),
                                 scheduler=runtime.scheduler)
        finally:
            client.close()
        traces = store.timeline()
    assert report.segments_written == len(traces) == 4
    assert all(t.summary and "VLMSEG" not in t.summary for t in traces)
