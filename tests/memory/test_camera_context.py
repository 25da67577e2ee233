"""Per-camera context: derived once enough traces exist, revised later, hand-set fields kept."""

from __future__ import annotations

from datetime import timezone

from semantic_stream import Stream

from memory import MemoryStore
from memory.semantic.camera_context import ContextSettings, get_context, maybe_revise, places, set_context

SETTINGS = ContextSettings(min_traces=6, revise_every=6, timezone=timezone.utc)


def test_context_is_derived_once_enough_traces_exist_and_revised_later(store: MemoryStore) -> None:
    stream = Stream()
    revisions = []
    for day in range(4):
        for seg in stream.visit(["person_0001"], "cam_k", day, 7.5, n=3, objects=("Bottle",), what="boils the kettle"):
            store.write_segment(seg)
            revised = maybe_revise(store, "cam_k", SETTINGS)
            if revised is not None:
                revisions.append((store.count_traces("cam_k"), revised))
    assert [n for n, _ in revisions] == [6, 12]
    ctx = revisions[-1][1]
    assert ctx.revision == 2 and ctx.trace_count == 12
    assert ctx.scene_type == "kitchen"
    assert "usually active in the morning (4 days)" in ctx.routines
    assert any(r.startswith("person_0001 appears most days in the morning") for r in ctx.routines)
    assert ctx.baseline["people_mean"] == 1.0 and ctx.baseline["active_hours"] == [7]
    assert "07h" in ctx.anomaly_baseline
    assert get_context(store, "cam_k") == ctx
    assert places(store) == {"cam_k": "kitchen"}


def test_hand_set_fields_survive_revisions_and_can_be_released(store: MemoryStore) -> None:
    stream = Stream()
    set_context(store, "cam_k", scene_type="bakery", notes="the back door is always locked")
    for seg in stream.visit(["person_0001"], "cam_k", 0, 7.5, n=6, what="boils the kettle"):
        store.write_segment(seg)
    ctx = maybe_revise(store, "cam_k", SETTINGS)
    assert ctx is not None and ctx.scene_type == "bakery" and ctx.notes == "the back door is always locked"
    assert ctx.revision == 1 and ctx.locked == ["notes", "scene_type"]
    set_context(store, "cam_k", scene_type="")
    again = maybe_revise(store, "cam_k", SETTINGS, force=True)
    assert again is not None and again.scene_type == "kitchen" and again.revision == 2
