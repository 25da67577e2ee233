"""The VLM stage driving the real pipeline pieces on the real Hamilton clip, against the fake VLM.

decode (PyAV) → segments → SegmentAnalyzer (real YuNet/SFace, identity write committed first under
the user lock) → anchors from the key frames → VLMSegmentStage over HTTP → reconciled write in LanceDB.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import cv2
import numpy as np
from fake_vlm_server import FakeVLMServer, Reply, prompt_text

from memory import MemoryStore
from perception.describe.anchoring import Anchor
from perception.describe.context import (
    ContextBuilder,
    PerceptionRuntime,
    camera_context_from_store,
    entity_history_from_store,
)
from perception.describe.local import SegmentFacts
from perception.detectors.faces import FaceDetector, FaceEmbedder
from perception.identity.reference import IdentityResolver
from perception.drivers.analyzer import IngestSettings, SegmentAnalyzer
from perception.segmenting.scheduler import (
    Scheduler,
    SegmentSignals,
    UserLocks,
    run_two_phase,
    segment_motion,
)
from perception.segmenting.segment import Segmenter
from perception.describe.steering import ExitCondition, SteeringRequest
from perception.media.video import iter_frames
from perception.describe.vlm import StageBudget, VLMClient
from perception.describe.vlm_stage import VLMSegmentStage, enrich_write

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


def _anchors(write: Any, detector: FaceDetector) -> tuple[list[Anchor], list[bytes]]:
    anchors: list[Anchor] = []
    jpegs: list[bytes] = []
    for k, kf in enumerate(write.keyframes):
        jpegs.append(kf.jpeg)
        image = cv2.imdecode(np.frombuffer(kf.jpeg, np.uint8), cv2.IMREAD_COLOR)
        dets = detector.detect(image)
        for det in dets:
            box = tuple(int(v) for v in det.box[:4])
            committed = kf.entity_ids[0] if len(dets) == 1 and len(kf.entity_ids) == 1 else None
            anchors.append(Anchor(f"A{len(anchors) + 1}", "face", k, box,  # type: ignore[arg-type]
                                  candidates=tuple(write.trace.entity_ids), entity_id=committed))
    return anchors, jpegs


def test_vlm_stage_on_the_real_clip(hamilton: Path, tmp_path: Path, face_detector: FaceDetector,
                                    face_embedder: FaceEmbedder) -> None:
    from memory import HashEmbedder

    settings = IngestSettings(sample_fps=2.0, min_segment_s=0.5, max_segment_s=1.5, keyframes_per_segment=1)
    with FakeVLMServer(require_images=True, require_text=HEADERS, responder=_responder, api_key="sk-x") as fake, \
            MemoryStore(str(tmp_path / "mem"), HashEmbedder(64), user_id="tester") as store:
        fake.enqueue(Reply(status=429), Reply(content="{oops"))  # the first segment needs 3 attempts
        client = VLMClient(base_url=fake.base_url, model="fake-vlm", api_key="sk-x", backoff_s=0.01,
                           budgets={"segment": StageBudget(600, timeout_s=10)})
        runtime = PerceptionRuntime(
            ContextBuilder(camera_context=camera_context_from_store(store),
                           entity_history=entity_history_from_store(store)),
            scheduler=Scheduler("offline_quality", "full"), vlm=client)
        stage = VLMSegmentStage(client, runtime.builder, runtime.steering)
        analyzer = SegmentAnalyzer(source=str(hamilton), camera_id="cam_vlm", settings=settings, store=store,
                                   wall_clock=lambda t: 1.7e9 + t, detector=face_detector, embedder=face_embedder,
                                   resolver=IdentityResolver(store.face_gallery(), store))
        locks = UserLocks()
        segments = list(Segmenter(settings.min_segment_s, settings.max_segment_s, settings.scene_threshold)
                        .segments(iter_frames(hamilton, sample_fps=settings.sample_fps)))
        assert len(segments) >= 6
        results = []
        steer_id = None
        for segment in segments:
            memory = runtime.builder.memory("cam_vlm")
            if segment.index == 2:
                steer_id = runtime.steering.inject(
                    SteeringRequest(scene_description="a musical rehearsal", focus_targets=["the singer"],
                                    exit=ExitCondition(until="segments", segments=2)),
                    camera_id="cam_vlm", media_t=memory.last_t or 0.0, event_id=memory.event_id).id
            images = [f.image_bgr for f in segment.frames]
            decision = runtime.scheduler.decide(SegmentSignals(first_of_event=memory.starts_event(segment.t_start),
                                                               motion=segment_motion(images)))
            assert decision.analysed

            def enrich(first: Any, segment: Any = segment, images: list[np.ndarray] = images, memory: Any = memory) -> Any:
                anchors, jpegs = _anchors(first, face_detector)
                facts = SegmentFacts(t_start=segment.t_start, t_end=segment.t_end, images=images,
                                     first=segment.index == 0)
                ids = list(first.trace.entity_ids)
                context = stage.context("cam_vlm", reid_hits=ids, rules=[RULE])
                result = stage.describe(facts, anchors, context, keyframes=jpegs,
                                        known_entities=[*ids, *memory.entities])
                stage.commit("cam_vlm", facts, result, entity_ids=ids)
                runtime.note_keyframe("cam_vlm", segment.t_end, jpegs[-1])
                results.append((first, result, anchors))
                return enrich_write(first, result)

            run_two_phase("tester", locks, lambda segment=segment: analyzer.analyse(segment),
                          store.write_segment, enrich)

        assert fake.problems == []
        prompts = [prompt_text(r["body"]) for r in fake.requests]
        assert len(fake.requests) == len(segments) + 2  # + the 429 and the malformed reply
        # context from early segments appears in later prompts
        by_segment = prompts[2:]  # the first segment took three requests
        assert "VLMEVENT up to 0" in by_segment[1] and "VLMSEG0" in by_segment[2]
        assert "VLMSEG0" not in prompts[-1]  # only the last 3 summaries are kept
        assert RULE in prompts[-1]
        # steering injected before segment 2, gone after its two segments
        steering_prompts = [i for i, p in enumerate(by_segment) if steer_id and steer_id in p]
        assert steering_prompts == [2, 3]
        assert runtime.steering.active("cam_vlm") == []
        # the ghost anchor never reaches the resolver; real anchors are described
        for first, result, anchors in results:
            assert result.fallback is None
            assert all(t.anchor_id != "A99" for t in result.targets)
            assert any(d.anchor_id == "A99" and d.reason == "no such detection anchor" for d in result.dropped)
        assert any(anchors for _f, _r, anchors in results), "the clip has faces: anchors expected"
        # the reconciled writes carry the VLM text with the identity-phase entities
        traces = store.timeline(source=str(hamilton))
        assert len(traces) == len(segments)
        assert all("a performer sings on a lit stage" in t.summary for t in traces)
        for (first, _r, _a), trace in zip(results, traces):
            assert trace.entity_ids == first.trace.entity_ids
        observed = [o for (first, _r, _a) in results for o in first.observations]
        assert observed, "faces were identified on the clip"
        texts = {o.id: o.text for e in {o.entity_id for o in observed} for o in store.entity_observations(e, 50)}
        assert any("sings into a microphone" in t for t in texts.values())
        totals = client.usage_totals()["segment"]
        assert totals["calls"] == len(segments) and totals["attempts"] == len(segments) + 2
        assert runtime.status()["scheduler"]["analysed"] == len(segments)
        client.close()


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
