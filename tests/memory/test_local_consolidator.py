"""The deterministic consolidator: places, habits, co-occurrence, objects and names from evidence."""

from __future__ import annotations

from datetime import timezone

from semantic_stream import Stream

from memory import MemoryStore
from memory.semantic.consolidate import ConsolidationEngine, FactEdit
from memory.semantic.local_consolidator import LocalConsolidator, names_in

PLACES = {"cam_cafe": "cafe"}


def _engine(store: MemoryStore) -> ConsolidationEngine:
    return ConsolidationEngine(store, LocalConsolidator(timezone=timezone.utc))


def test_names_are_read_from_speech_and_ocr() -> None:
    assert names_in("hi, my name is maria and I like tea", "") == ["Maria"]
    assert names_in("", "HELLO MY NAME IS JOAO") == ["Joao"]
    assert names_in("I am tired", "EXIT") == []


def test_co_occurrence_objects_places_and_names_become_facts(store: MemoryStore) -> None:
    stream = Stream()
    for day in range(3):
        stream.visit(["person_0001", "person_0002"], "cam_cafe", day, 9.0, n=2, objects=("Laptop", "Person"))
    stream.visit(["person_0001"], "cam_cafe", 3, 9.0, n=1, transcript="Hello, my name is Ana.", ocr="NAME: ANA")
    stream.visit(["person_0001"], "cam_cafe", 4, 9.0, n=1)  # the current segment
    for seg in stream.segments:
        store.write_segment(seg)
    eng = _engine(store)
    request = eng.request_for("person_0001", current=stream.segments[-1], places=PLACES)
    edits = eng.consolidator.propose(request)
    by_key = {e.key: e for e in edits}
    assert by_key["with/person_0002"].text == "person_0001 is often seen with person_0002"
    assert by_key["object/laptop"].kind == "attribute" and "object/person" not in by_key
    assert by_key["place/cafe"].kind == "place"
    assert by_key["habit/morning"].text == "person_0001 is usually at the cafe in the morning"
    assert by_key["name/Ana"].kind == "name"
    assert all(e.op == "ADD" for e in edits) and "identity/name" not in by_key
    current = {stream.segments[-1].trace.id, stream.segments[-1].observations[0].id}
    assert all(set(e.evidence_ids).isdisjoint(current) for e in edits)
    # person_0002 never said a name: the name from a segment with one person is not attributed to it
    other = eng.consolidator.propose(eng.request_for("person_0002", places=PLACES))
    assert not any(e.key.startswith("name/") for e in other)

    report = eng.consolidate("person_0001", current=stream.segments[-1], places=PLACES)
    assert sorted(o.result for o in report.outcomes) == ["added"] * len(edits)
    # the same evidence again changes nothing; a user-given name retires the contradicting name fact
    again = eng.consolidate("person_0001", current=stream.segments[-1], places=PLACES)
    assert {o.result for o in again.outcomes} == {"unchanged"}
    store.upsert_entity(store.get_entity("person_0001").model_copy(update={"name": "Anabel"}))
    renamed = eng.consolidate("person_0001", current=stream.segments[-1], places=PLACES)
    results = {(o.edit.op, o.result) for o in renamed.outcomes}
    assert ("DELETE", "deleted") in results and ("ADD", "added") in results
    keys = {f.key for f in store.facts("person_0001")}
    assert "identity/name" in keys and "name/Ana" not in keys


def test_local_edits_are_plain_edit_records() -> None:
    edit = FactEdit(op="NONE", fact_id="fct_x", evidence_ids=["obs_1"])
    assert FactEdit.model_validate_json(edit.model_dump_json()) == edit
