"""The VLM stage in the real pipeline (built by the engine) on the real Hamilton clip, against the fake VLM.

decode (PyAV) → segments → SegmentAnalyzer (real YuNet/SFace, identity write committed first under
the identity lock) → anchors → VLMSegmentStage over HTTP → reconciled write in LanceDB.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from fake_vlm_server import FakeVLMServer, Reply, prompt_text

from perception.describe.context import ContextBuilder
from perception.describe.local import SegmentFacts
from perception.describe.steering import ExitCondition, SteeringRequest
from perception.describe.vlm import StageBudget, VLMClient
from perception.describe.vlm_stage import VLMSegmentStage
from perception.media.video import iter_frames
from tests.conftest import engine_for

HEADERS = ["## Working memory", "## Camera context", "## Entity history", "## Active rules", "## Steering",
           "## Detection anchors"]
RULE = "tell me when the singer leaves the stage"


def _responder(body: dict[str, Any]) -> dict[str, Any]:
    """Describe every listed anchor; also claim a non-existent anchor A99 (must be dropped)."""
    text = prompt_text(body)
    n = int(re.search(r"event cam_vlm#\d+, (\d+) segment", text).group(1))  # type: ignore[union-attr]
    claims = []
    for anchor_id, rest in re.findall(r"^(A\d+): ([^\n]*)", text, flags=re.MULTILINE):
        ids = re.findall(r"person_\d{4}", rest)
        claims.append({"anchor_id": anchor_id, "entity_id": ids[0] if ids else None,
                       "description": f"sings into a microphone (marker {anchor_id})"})
    claims.append({"anchor_id": "A99", "entity_id": "person_0001", "description": "a ghost"})
    return {"summary": f"VLMSEG{n} a performer sings on a lit stage", "event_summary": f"VLMEVENT up to {n}",
            "observations": claims, "scene": {"scene_type": "stage", "change": "no change"},
            "rule_signals": [{"rule": RULE, "matched": False, "evidence": "still on stage"}],
            "risk": "none", "risk_reason": "a performance"}


def test_vlm_stage_on_the_real_clip_through_the_engine(hamilton: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """live_latency with a VLM: identities first, then the VLM's anchored text; context, rules and steering
    reach every prompt; a claim about a non-existent anchor never reaches memory."""
    monkeypatch.setenv("RW_TEST_VLM_KEY", "sk-x")
    with FakeVLMServer(require_images=True, require_text=HEADERS, responder=_responder, api_key="sk-x") as fake:
        fake.enqueue(Reply(status=429), Reply(content="{oops"))  # the first segment needs 3 attempts
        perception = {"sample_fps": 2.0, "min_segment_s": 0.5, "max_segment_s": 1.5, "keyframes_per_segment": 1,
                      "mode": "live_latency", "ocr": {"type": "none"}, "asr": {"type": "none"},
                      "objects": {"type": "none"}, "body": {"type": "none"}}
        vlm = {"base_url": fake.base_url, "model": "fake-vlm", "api_key": "${RW_TEST_VLM_KEY}", "stages": {"segment": {"timeout_s": 10}}}
        with engine_for(tmp_path, perception=perception, vlm=vlm, rules=[{"text": RULE}]) as engine:
            steer: list[str] = []

            def progress(_done: float, _total: float, segments: int) -> None:
                if segments == 2:  # before the third segment is analysed
                    memory = engine.perception.builder.memory("cam_vlm")
                    steer.append(engine.perception.steering.inject(
                        SteeringRequest(scene_description="a musical rehearsal", focus_targets=["the singer"],
                                        exit=ExitCondition(until="segments", segments=2)),
                        camera_id="cam_vlm", media_t=memory.last_t or 0.0, event_id=memory.event_id).id)

            report = engine.ingest_file(hamilton, "cam_vlm", progress=progress)
            store = engine.store
            traces = store.timeline(source=str(hamilton.resolve()))
            analysed = engine.perception.scheduler.counters()["analysed"]
            totals = engine.perception.vlm.usage_totals()["segment"]  # type: ignore[union-attr]
            texts = [o.text for e in store.list_entities() for o in store.entity_observations(e.id, 50)]
            steering_left = engine.perception.steering.active("cam_vlm")

    assert fake.problems == []
    assert report.segments_written == len(traces) >= 6
    prompts = [prompt_text(r["body"]) for r in fake.requests]
    assert len(fake.requests) == analysed + 2  # + the 429 and the malformed reply
    by_segment = prompts[2:]  # the first segment took three requests
    assert "VLMEVENT up to 0" in by_segment[1] and "VLMSEG0" in by_segment[2]
    assert "VLMSEG0" not in prompts[-1]  # only the last 3 summaries are kept
    assert all(RULE in p for p in prompts)
    # steering injected before the third segment, gone after its two segments
    assert steer and [i for i, p in enumerate(by_segment) if steer[0] in p] == [2, 3]
    assert steering_left == []
    # the enriched writes carry the VLM text; the ghost anchor A99 never reached memory
    assert sum("a performer sings on a lit stage" in t.summary for t in traces) == analysed
    assert texts and any("sings into a microphone" in t for t in texts)
    assert not any("a ghost" in t for t in texts)
    assert totals["calls"] == analysed and totals["attempts"] == analysed + 2


def test_timeout_falls_back_to_the_local_describer(hamilton: Path) -> None:
    frames = [f.image_bgr for f in iter_frames(hamilton, sample_fps=2.0)][:4]
    facts = SegmentFacts(t_start=0.0, t_end=2.0, images=frames, first=True)
    with FakeVLMServer(require_images=True) as fake:
        fake.enqueue(Reply(content="{}", delay_s=3.0))
        client = VLMClient(base_url=fake.base_url, model="m", budgets={"segment": StageBudget(100, timeout_s=0.3)})
        stage = VLMSegmentStage(client, ContextBuilder())
        result = stage.describe(facts, [], stage.context("cam"), keyframes=frames[:1])
        assert result.fallback is not None and "timed out" in result.fallback
        assert result.description == stage.local.describe(facts)
        assert result.description.summary.startswith("0:00.0–0:02.0")
        client.close()
