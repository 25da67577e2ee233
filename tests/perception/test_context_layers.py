"""Context layers: working-memory bounds, camera context and entity history from a real store,
and a prompt size that does not grow with stream length."""

from __future__ import annotations

import time
from pathlib import Path

from memory import MemoryStore
from perception.describe.context import (
    ContextBounds,
    ContextBuilder,
    camera_context_from_store,
    clamp_words,
    entity_history_from_store,
)
from perception.describe.vlm_stage import SYSTEM_PROMPT

LAYER_HEADERS = ["## Working memory", "## Camera context", "## Entity history", "## Active rules", "## Steering"]


def _feed(builder: ContextBuilder, n: int, start: int = 0) -> None:
    memory = builder.memory("cam")
    for i in range(start, start + n):
        people = [f"person_{(i + k) % 40:04d}" for k in range(3)]
        memory.observe(t_start=2.0 * i, t_end=2.0 * i + 2, entity_ids=people,
                       summary=f"segment {i}: " + "someone walks past the counter carrying a box " * 3,
                       targets={p: "person" for p in people} | {f"object_{i % 50:04d}": "cup"})


def test_rolling_summary_recent_targets_and_entities_are_bounded() -> None:
    bounds = ContextBounds(max_event_segments=1000, entity_inactive_s=20.0)
    builder = ContextBuilder(bounds)
    _feed(builder, 50)
    m = builder.memory("cam")
    assert len(m.rolling_summary.split()) <= bounds.rolling_words + 1  # + the ellipsis
    assert "segment 49" in m.rolling_summary and "segment 10:" not in m.rolling_summary
    assert [s.split(":")[0] for s in m.recent] == ["segment 47", "segment 48", "segment 49"]
    assert len(m.targets) <= bounds.max_targets
    assert all(t.missed < bounds.target_max_missed for t in m.targets.values())
    assert all(m.last_t is not None and m.last_t - seen <= 20.0 for seen in m.entities.values())
    assert len(m.entities) <= bounds.max_active_entities


def test_targets_dropped_after_missed_segments_and_event_rotation() -> None:
    builder = ContextBuilder(ContextBounds(max_event_segments=5, target_max_missed=2, event_gap_s=30))
    m = builder.memory("cam")
    assert m.observe(t_start=0, t_end=1, summary="a", targets={"person_0001": "singer"}) is True
    m.observe(t_start=1, t_end=2, summary="b")
    assert "person_0001" in m.targets and m.targets["person_0001"].missed == 1
    m.observe(t_start=2, t_end=3, summary="c")
    assert "person_0001" not in m.targets
    m.observe(t_start=3, t_end=4, summary="d")
    m.observe(t_start=4, t_end=5, summary="e")
    assert m.event_id == "cam#0" and m.segments == 5
    assert m.observe(t_start=5, t_end=6, summary="f") is True  # max segments → rotation
    assert (m.event_id, m.segments, list(m.recent)) == ("cam#1", 1, ["f"])
    assert m.observe(t_start=100, t_end=101, summary="after a gap") is True
    assert m.event_id == "cam#2"


def test_clamp_words() -> None:
    text = " ".join(str(i) for i in range(10))
    assert clamp_words(text, 3) == "0 1 2 …"
    assert clamp_words(text, 3, keep="tail") == "… 7 8 9"
    assert clamp_words("a  b", 5) == "a b"


def test_prompt_size_after_1000_segments_matches_after_10() -> None:
    builder = ContextBuilder()
    rules = ["tell me when someone takes the box", "watch the back door"]
    steering = ["[steer_1] focus on: person_0003"]
    _feed(builder, 10)
    after_10 = len(SYSTEM_PROMPT) + len(builder.build("cam", rules=rules, steering=steering).render())
    builder = ContextBuilder(ContextBounds(max_event_segments=10_000))  # no rotation: the worst case
    _feed(builder, 1000)
    after_1000 = len(SYSTEM_PROMPT) + len(builder.build("cam", rules=rules, steering=steering).render())
    assert builder.memory("cam").segments == 1000
    assert abs(after_1000 - after_10) / after_10 < 0.03, (after_10, after_1000)


def test_camera_context_and_entity_history_from_a_real_store(ingested: Path, tmp_path: Path) -> None:
    from plugin.manifest import load_manifest
    from plugin.engine import open_store

    store = open_store(load_manifest(ingested))
    try:
        builder = ContextBuilder(camera_context=camera_context_from_store(store),
                                 entity_history=entity_history_from_store(store))
        entity = store.list_entities(kind="person", limit=1)[0]
        empty = builder.build("stage", reid_hits=[entity.id])
        assert empty.layers["camera"] == "no camera context yet"  # no row yet: tolerated
        history = empty.layers["entities"]
        assert history.startswith(f"{entity.id}:") and "seen:" in history
        assert store.entity_observations(entity.id, limit=1)[0].text in history
        assert builder.build("stage", reid_hits=["person_9999"]).layers["entities"] == "no re-identified entities"
    finally:
        store.close()


def test_camera_context_row_is_read(tmp_path: Path) -> None:
    from memory import HashEmbedder

    with MemoryStore(str(tmp_path / "mem"), HashEmbedder(64)) as store:
        row = {"id": "ctx_stage", "camera_id": "stage", "scene_type": "theatre stage", "routines": ["rehearsal at 7pm"],
               "anomaly_baseline": "empty at night", "revision": 2, "updated_at": time.time()}
        store.upsert_rows("camera_context", [row])
        text = ContextBuilder(camera_context=camera_context_from_store(store)).build("stage").render()
    assert "scene: theatre stage" in text and "rehearsal at 7pm" in text and "empty at night" in text
    for header in LAYER_HEADERS:
        assert header in text


def test_a_broken_store_does_not_break_the_prompt() -> None:
    class Closed:
        def scan_rows(self, *_a: object, **_k: object) -> list[dict[str, object]]:
            raise ValueError("table camera_context does not exist")

    ctx = ContextBuilder(camera_context=camera_context_from_store(Closed())).build("cam")
    assert ctx.layers["camera"] == "no camera context yet"
