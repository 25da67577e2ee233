"""The LLM consolidator over real HTTP to a fake OpenAI-compatible server: same edit records as scripted."""

from __future__ import annotations

from datetime import timezone
from pathlib import Path

from fake_vlm_server import FakeVLMServer, Reply

from memory import Entity, HashEmbedder, MemoryStore, Observation, SegmentWrite, Trace, stable_id
from memory.semantic.consolidate import ConsolidationEngine, FactEdit, apply_edits
from memory.semantic.local_consolidator import LocalConsolidator
from perception.describe.llm_consolidator import FactEdits, LLMConsolidator
from perception.describe.vlm import VLMClient

DAY0 = 1_704_067_200.0


def _segment(i: int, camera: str, hour: float) -> SegmentWrite:
    src = f"rtsp://{camera}"
    wall = DAY0 + (i // 2) * 86_400 + hour * 3600
    obs = Observation(id=stable_id("obs_", src, i), entity_id="person_0001", camera_id=camera, source=src,
                      segment_index=i, t_start=i * 600.0, t_end=i * 600.0 + 600, wall_start=wall,
                      text=f"person_0001 at {camera}")
    trace = Trace(id=stable_id("trc_", src, i), camera_id=camera, source=src, segment_index=i, t_start=i * 600.0,
                  t_end=i * 600.0 + 600, wall_start=wall, summary=f"a woman at {camera}", entity_ids=["person_0001"],
                  objects=["Coffee cup"])
    return SegmentWrite(source=src, camera_id=camera, segment_index=i, trace=trace, observations=[obs],
                        entities=[Entity(id="person_0001", kind="person", cameras=[camera])])


def test_llm_edits_equal_the_scripted_records_and_apply_like_local_ones(tmp_path: Path) -> None:
    with MemoryStore(str(tmp_path / "m"), HashEmbedder(64)) as store:
        segs = [_segment(i, "cam_cafe", 8.0) for i in range(6)]
        for seg in segs:
            store.write_segment(seg)
        local = ConsolidationEngine(store, LocalConsolidator(timezone=timezone.utc))
        local.consolidate("person_0001", current=segs[-1], places={"cam_cafe": "cafe"}, now=DAY0)
        habit = next(f for f in store.facts("person_0001") if f.key == "habit/morning")
        request = local.request_for("person_0001", current=segs[-1], places={"cam_cafe": "cafe"})
        obs_ids = [o.id for o in request.observations]
        scripted = [
            FactEdit(op="ADD", text="person_0001 drinks coffee every morning", kind="habit", key="habit/coffee",
                     evidence_ids=obs_ids[:2], reason="coffee cup each visit"),
            FactEdit(op="NONE", fact_id=habit.id, evidence_ids=[segs[-1].observations[0].id]),
            FactEdit(op="UPDATE", fact_id="fct_doesnotexist", text="x", evidence_ids=obs_ids[:1]),
            FactEdit(op="DELETE", fact_id=habit.id, evidence_ids=obs_ids[:1], reason="model thinks so"),
        ]
        with FakeVLMServer(api_key="sk-test", require_text=[habit.id, obs_ids[0], "## Prior observations"]) as fake:
            fake.enqueue(Reply(content=FactEdits(edits=scripted).model_dump(mode="json")))
            client = VLMClient(base_url=fake.base_url, model="fake-llm", api_key="sk-test")
            llm = LLMConsolidator(client, fallback=LocalConsolidator(timezone=timezone.utc))
            try:
                engine = ConsolidationEngine(store, llm)
                proposed = llm.propose(engine.request_for("person_0001", current=segs[-1],
                                                          places={"cam_cafe": "cafe"}))
            finally:
                client.close()
            assert fake.problems == []
            body = fake.requests[-1]["body"]
        assert proposed == scripted
        assert body["response_format"]["json_schema"]["name"] == "FactEdits"
        outcomes = apply_edits(store, request, proposed)
        assert [o.result for o in outcomes] == ["added", "unchanged", "dropped", "deleted"]
        assert "no evidence beyond" in outcomes[1].reason  # the current segment's id was not evidence
        assert "unknown fact id" in outcomes[2].reason
        retired = store.facts(ids=[habit.id], include_superseded=True)[0]
        assert retired.status == "superseded" and retired.retired_by == obs_ids[:1]


def test_a_failing_model_falls_back_to_the_local_consolidator(tmp_path: Path) -> None:
    with MemoryStore(str(tmp_path / "m"), HashEmbedder(64)) as store:
        segs = [_segment(i, "cam_cafe", 8.0) for i in range(6)]
        for seg in segs:
            store.write_segment(seg)
        local = LocalConsolidator(timezone=timezone.utc)
        with FakeVLMServer() as fake:
            fake.enqueue(Reply(status=400, content={"error": {"message": "bad model"}}))
            client = VLMClient(base_url=fake.base_url, model="fake-llm")
            try:
                engine = ConsolidationEngine(store, LLMConsolidator(client, fallback=local))
                request = engine.request_for("person_0001", current=segs[-1])
                edits = engine.consolidator.propose(request)
            finally:
                client.close()
        assert edits == local.propose(request) and any(e.key == "habit/morning" for e in edits)
