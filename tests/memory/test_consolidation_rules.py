"""Consolidation rules on a generated week: importance formula, supersession, protection, dropping."""

from __future__ import annotations

from datetime import timezone

import pytest
from semantic_stream import DAY0, Stream, run, week

from memory import HashEmbedder, MemoryStore
from memory.semantic.camera_context import set_context
from memory.semantic.consolidate import (
    ConsolidationEngine,
    ConsolidationSettings,
    FactEdit,
    apply_edits,
    reconfirm,
)
from memory.semantic.local_consolidator import LocalConsolidator

PLACES = {"cam_cafe": "cafe", "cam_gym": "gym"}


def engine(store: MemoryStore, **settings: object) -> ConsolidationEngine:
    return ConsolidationEngine(store, LocalConsolidator(timezone=timezone.utc), ConsolidationSettings(**settings))


def test_reconfirm_follows_the_formula_and_caps_at_one() -> None:
    assert reconfirm(0.5, 0.2) == pytest.approx(0.6)
    assert reconfirm(0.6, 0.2) == pytest.approx(0.68)
    assert reconfirm(1.0, 0.2) == 1.0
    assert reconfirm(0.999999, 1.5) == 1.0


def test_a_week_of_cafe_and_gym_visits_raises_habit_importance_by_the_formula(store: MemoryStore) -> None:
    stream = Stream()
    week(stream)
    eng = engine(store)
    history: dict[str, list[float]] = {"habit/morning": [], "habit/evening": []}
    for seg in stream.segments:
        reports = run(store, eng, [seg], PLACES)
        for report in reports:
            for key in history:
                fact = next((f for f in store.facts("person_0001") if f.key == key), None)
                if fact is not None:
                    history[key].append(fact.importance)
    counters = eng.counters("person_0001")
    assert counters["observed"] == 42 and counters["runs"] == 42 // 5 and counters["consolidated_at"] == 40
    for key, ws in history.items():
        assert len(ws) >= 4, f"{key} was derived too late: {ws}"
        assert all(b >= a for a, b in zip(ws, ws[1:])), f"{key} importance is not monotonic: {ws}"
        assert ws[-1] > ws[0]
        fact = next(f for f in store.facts("person_0001") if f.key == key)
        expected = 1 - (1 - 0.5) * (1 - 0.2) ** fact.confirmations
        assert fact.importance == pytest.approx(expected)
        assert fact.confirmations >= 3
        # evidence points at real prior observations/traces of the right camera
        cam = "cam_cafe" if key == "habit/morning" else "cam_gym"
        assert fact.evidence_ids and all(store.get(e).item["camera_id"] == cam for e in fact.evidence_ids)
    texts = {f.key: f.text for f in store.facts("person_0001")}
    assert texts["habit/morning"] == "person_0001 is usually at the cafe in the morning"
    assert texts["habit/evening"] == "person_0001 is usually at the gym in the evening"
    assert "object/coffee cup" in texts and "place/gym" in texts


def test_a_contradicted_habit_is_superseded_with_provenance(store: MemoryStore) -> None:
    stream = Stream()
    week(stream, days=range(3))
    eng = engine(store, every_n=3)
    run(store, eng, stream.segments, PLACES)
    old = next(f for f in store.facts("person_0001") if f.key == "habit/morning")
    assert "cafe" in old.text
    # from day 3 on, mornings are spent at the gym
    later = Stream(_index=stream._index)
    for day in (3, 4, 5):
        later.visit(["person_0001"], "cam_gym", day, 8.0, what="works out")
    reports = run(store, eng, later.segments, PLACES)
    assert any(o.result == "updated" and o.edit.op == "UPDATE" for r in reports for o in r.outcomes)
    retired = store.facts(ids=[old.id], include_superseded=True)[0]
    assert retired.status == "superseded" and retired.superseded_by
    assert retired.text == old.text and set(old.evidence_ids) <= set(retired.evidence_ids)  # nothing erased
    assert retired.retired_by and all(store.get(e).item["camera_id"] == "cam_gym" for e in retired.retired_by)
    new = store.facts(ids=[retired.superseded_by], include_superseded=True)[0]
    assert new.status == "active" and new.supersedes == old.id and "gym in the morning" in new.text
    assert [f.id for f in store.facts("person_0001") if f.key == "habit/morning"] == [new.id]
    # the superseded fact is out of search, the replacement is in
    hits = {h.id for h in store.search("usually in the morning", level="facts", limit=20)}
    assert new.id in hits and old.id not in hits


def _request(store: MemoryStore) -> tuple[ConsolidationEngine, object]:
    stream = Stream()
    week(stream, days=range(2))
    eng = engine(store)
    for seg in stream.segments:
        store.write_segment(seg)
    return eng, eng.request_for("person_0001")


def test_an_identity_fact_survives_a_delete_and_an_update(store: MemoryStore) -> None:
    eng, _ = _request(store)
    entity = store.get_entity("person_0001").model_copy(update={"name": "Alice"})
    store.upsert_entity(entity)
    report = eng.consolidate("person_0001")
    identity = next(f for f in store.facts("person_0001") if f.kind == "identity")
    assert identity.importance == 1.0 and identity.text == "person_0001 is named Alice"
    assert any(o.result == "added" and o.fact_id == identity.id for o in report.outcomes)
    request = eng.request_for("person_0001")
    evidence = [request.observations[0].id]
    outcomes = apply_edits(store, request, [
        FactEdit(op="DELETE", fact_id=identity.id, evidence_ids=evidence, reason="looks like someone else"),
        FactEdit(op="UPDATE", fact_id=identity.id, text="person_0001 is named Bob", evidence_ids=evidence),
        FactEdit(op="NONE", fact_id=identity.id, evidence_ids=evidence),
    ])
    assert [o.result for o in outcomes] == ["dropped", "dropped", "reconfirmed"]
    assert "protected" in outcomes[0].reason and "protected" in outcomes[1].reason
    after = store.facts(ids=[identity.id], include_superseded=True)[0]
    assert after.status == "active" and after.text == identity.text and after.importance == 1.0
    # a user's own edit may change it
    manual = apply_edits(store, request, [FactEdit(op="UPDATE", fact_id=identity.id, text="person_0001 is named Ali",
                                                   evidence_ids=evidence)], manual=True)
    assert manual[0].result == "updated"


def test_edits_naming_missing_or_foreign_facts_are_dropped(store: MemoryStore) -> None:
    eng, request = _request(store)
    ev = [request.observations[0].id]
    before = store.counts()["facts"]
    outcomes = apply_edits(store, request, [
        FactEdit(op="UPDATE", fact_id="fct_000000000000", text="person_0001 likes tea", evidence_ids=ev),
        FactEdit(op="DELETE", fact_id="fct_ffffffffffff", evidence_ids=ev),
        FactEdit(op="UPDATE", fact_id=None, text="no id", evidence_ids=ev),
        FactEdit(op="NONE", fact_id="fct_123456789abc", evidence_ids=ev),
    ])
    assert [o.result for o in outcomes] == ["dropped"] * 4
    assert all("unknown fact id" in o.reason for o in outcomes)
    assert store.counts()["facts"] == before == 0


def test_the_current_segment_is_not_evidence_and_a_run_without_history_is_skipped(store: MemoryStore) -> None:
    stream = Stream()
    segs = stream.visit(["person_0002"], "cam_cafe", 0, 9.0, n=5)
    eng = engine(store)
    reports = run(store, eng, segs, PLACES)
    assert len(reports) == 1 and not reports[0].skipped  # four prior segments are history
    request = eng.request_for("person_0002", current=segs[-1])
    assert all(o.segment_index != segs[-1].segment_index for o in request.observations)
    self_evidence = [segs[-1].observations[0].id, segs[-1].trace.id]
    out = apply_edits(store, request, [FactEdit(op="ADD", text="person_0002 likes the window seat",
                                                evidence_ids=self_evidence)])
    assert out[0].result == "dropped" and "current segment" in out[0].reason
    # an entity whose only observation is the current segment is skipped, and the skip is counted
    lone = stream.visit(["person_0003"], "cam_gym", 0, 9.0, n=1)
    store.write_segment(lone[0])
    report = eng.consolidate("person_0003", current=lone[0])
    assert report.skipped and eng.counters("person_0003")["skipped"] == 1


def test_counters_are_persistent_per_user_and_idempotent(tmp_path) -> None:
    stream = Stream()
    segs = stream.visit(["person_0001"], "cam_cafe", 0, 8.0, n=4)
    with MemoryStore(str(tmp_path / "m"), HashEmbedder(64), user_id="ann") as store:
        eng = engine(store)
        assert run(store, eng, segs[:3], PLACES) == []
        eng.note_segment(segs[2])  # a re-committed segment does not count twice
        assert eng.counters("person_0001")["observed"] == 3
    with MemoryStore(str(tmp_path / "m"), HashEmbedder(64), user_id="ann") as store:
        eng = engine(store)
        assert eng.counters("person_0001")["observed"] == 3  # survived the reopen
        more = stream.visit(["person_0001"], "cam_cafe", 1, 8.0, n=2)
        reports = run(store, eng, [segs[3], *more], PLACES)
        assert [r.entity_id for r in reports] == ["person_0001"]
    with MemoryStore(str(tmp_path / "m"), HashEmbedder(64), user_id="bob") as store:
        assert engine(store).counters("person_0001")["observed"] == 0  # per user


def test_importance_lifts_facts_in_search(store: MemoryStore) -> None:
    eng, request = _request(store)
    ev = [o.id for o in request.observations[:2]]
    apply_edits(store, request, [
        FactEdit(op="ADD", key="a", text="person_0001 reads the newspaper", evidence_ids=ev[:1]),
        FactEdit(op="ADD", key="b", text="person_0001 reads the newspaper daily", evidence_ids=ev[:1]),
    ], now=DAY0)
    low, high = sorted(store.facts("person_0001"), key=lambda f: f.key)
    query = "person_0001 reads the newspaper"
    assert store.search(query, level="facts", limit=2)[0].id == low.id  # equal importance: the closer text wins
    for i in range(6):
        apply_edits(store, eng.request_for("person_0001"),
                    [FactEdit(op="NONE", fact_id=high.id, evidence_ids=[request.observations[2 + i].id])])
    assert store.facts(ids=[high.id])[0].importance == pytest.approx(1 - 0.5 * 0.8 ** 6)
    hits = store.search(query, level="facts", limit=2)
    assert [h.id for h in hits] == [high.id, low.id]
