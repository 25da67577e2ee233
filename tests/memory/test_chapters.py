"""Chapters: closed events accumulate to a budget B (or an interval) and index their traces."""

from __future__ import annotations

from semantic_stream import Stream

from memory import MemoryStore
from memory.semantic.chapters import ChapterSettings, build_chapters, split_events

SETTINGS = ChapterSettings(budget_events=3, interval_s=10 * 86_400, event_gap_s=60.0)


def _day(stream: Stream, day: int) -> list:
    """Three separate visits (events) of two segments each at the cafe camera."""
    return [s for hour in (8.0, 12.0, 18.0) for s in stream.visit(["person_0001"], "cam_cafe", day, hour, n=2)]


def test_events_split_at_gaps_and_rotate() -> None:
    stream = Stream()
    segs = _day(stream, 0)
    events = split_events([s.trace for s in segs], gap_s=60.0, max_traces=30)
    assert [len(e) for e in events] == [2, 2, 2]
    assert [len(e) for e in split_events([s.trace for s in segs], gap_s=1e9, max_traces=4)] == [4, 2]


def test_chapters_index_the_traces_of_their_events_and_walk_down(store: MemoryStore) -> None:
    stream = Stream()
    day0, day1 = _day(stream, 0), _day(stream, 1)
    written = []
    for seg in day0 + day1:
        store.write_segment(seg)
        written += build_chapters(store, seg.source, seg.camera_id, SETTINGS)
    # six events; the last one is still open, so exactly one chapter of B = 3 closed events exists
    assert len(written) == 1
    chapter = written[0]
    assert chapter.trace_ids == [s.trace.id for s in day0]
    assert chapter.entity_ids == ["person_0001"] and "3 event(s), 6 segment(s)" in chapter.title
    got = store.get(chapter.id)
    assert [t["id"] for t in got.children] == chapter.trace_ids
    assert got.entities[0].id == "person_0001"
    # re-running changes nothing; finishing the source flushes the rest (open event included)
    assert build_chapters(store, day1[0].source, "cam_cafe", SETTINGS) == []
    rest = build_chapters(store, day1[0].source, "cam_cafe", SETTINGS, source_done=True)
    assert [c.trace_ids for c in rest] == [[s.trace.id for s in day1]]
    assert store.counts()["schemas"] == 2
    hits = store.search("person_0001 sits at a table", level="schemas", limit=5)
    assert {h.id for h in hits} == {chapter.id, rest[0].id}


def test_a_chapter_is_written_after_the_interval_even_below_budget(store: MemoryStore) -> None:
    stream = Stream()
    segs = stream.visit(["person_0001"], "cam_cafe", 0, 8.0, n=1) + stream.visit(["person_0001"], "cam_cafe", 0, 8.5, n=1)
    for seg in segs:
        store.write_segment(seg)
    hourly = ChapterSettings(budget_events=10, interval_s=3600.0, event_gap_s=60.0)
    assert build_chapters(store, segs[0].source, "cam_cafe", hourly) == []  # one closed event, 40 min: not yet
    late = stream.visit(["person_0001"], "cam_cafe", 0, 9.5, n=1)[0]
    store.write_segment(late)
    chapters = build_chapters(store, segs[0].source, "cam_cafe", hourly)
    assert [c.trace_ids for c in chapters] == [[segs[0].trace.id, segs[1].trace.id]]
