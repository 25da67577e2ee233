"""The semantic runner off the hot path: non-blocking hand-over, bounded queue, end-to-end results."""

from __future__ import annotations

import shutil
from datetime import timezone
from pathlib import Path

import pytest

from memory import HashEmbedder, MemoryStore
from memory.semantic.camera_context import ContextSettings, get_context, set_context
from memory.semantic.chapters import ChapterSettings, build_chapters
from memory.semantic.local_consolidator import LocalConsolidator
from plugin.cli import main
from plugin.manifest import load_manifest
from plugin.semantic import SemanticRunner, SemanticSettings, runner_from_manifest
from plugin.engine import open_store
from tests.conftest import CLIP, write_manifest
from tests.memory.semantic_stream import Stream, week


def _opener(path: Path):
    return lambda: MemoryStore(str(path), HashEmbedder(64), user_id="u").open()


def test_on_commit_never_blocks_and_counts_overflow(tmp_path: Path) -> None:
    stream = Stream()
    week(stream, days=range(1))
    runner = SemanticRunner(_opener(tmp_path / "m"), LocalConsolidator(), SemanticSettings(queue_size=2))
    for seg in stream.segments:  # not started: nothing drains the queue
        runner.on_commit(seg)
    assert runner.stats.queued == 2 and runner.stats.dropped == len(stream.segments) - 2


def test_runner_consolidates_chapters_and_revises_context_from_commits(tmp_path: Path) -> None:
    stream = Stream()
    week(stream, days=range(4))
    settings = SemanticSettings(chapters=ChapterSettings(budget_events=2),
                                context=ContextSettings(min_traces=6, revise_every=6, timezone=timezone.utc),
                                max_entities_per_run=1)
    runner = SemanticRunner(_opener(tmp_path / "m"), LocalConsolidator(timezone=timezone.utc), settings).start()
    try:
        with _opener(tmp_path / "m")() as store:
            set_context(store, "cam_cafe", scene_type="cafe")
            for seg in stream.segments:
                store.write_segment(seg)  # the driver commits first …
                runner.on_commit(seg)     # … then hands over
            runner.source_done("rtsp://cam_cafe", "cam_cafe")
            assert runner.wait_idle(120)
            assert runner.stats.errors == 0 and runner.stats.processed == len(stream.segments)
            # one consolidation per 5 new sightings; a runner that falls behind the writer catches up in fewer runs
            assert 1 <= runner.stats.consolidations <= len(stream.segments) // 5
            facts = {f.key: f for f in store.facts("person_0001")}
            assert facts["habit/morning"].text == "person_0001 is usually at the cafe in the morning"
            # the gym camera's place comes from its derived context (stationary bicycle, "works out")
            assert get_context(store, "cam_gym").scene_type == "gym"
            assert facts["habit/evening"].text == "person_0001 is usually at the gym in the evening"
            cafe = store.scan_rows("schemas", "camera_id = 'cam_cafe'")
            assert sum(len(c["trace_ids"]) for c in cafe) == 12  # every cafe trace is in a chapter
            ctx = get_context(store, "cam_gym")
            assert ctx is not None and ctx.revision >= 1 and ctx.routines
            assert get_context(store, "cam_cafe").scene_type == "cafe"  # hand-set field kept
    finally:
        runner.stop()
    assert runner.stats.processed == len(stream.segments)


def test_runner_writes_chapters_while_a_stream_runs_and_revises_context_when_due(tmp_path: Path) -> None:
    """Without source_done: chapters follow from events closing (gaps, full events), context from trace counts."""
    stream = Stream()
    for day in range(3):  # three visits of 4 segments each, hours apart: each visit is one event
        stream.visit(["person_0001"], "cam_cafe", day=day, hour=8, n=4)
    stream.visit(["person_0001"], "cam_cafe", day=3, hour=8, n=1)  # its gap closes the third visit
    settings = SemanticSettings(chapters=ChapterSettings(budget_events=3, event_max_traces=30),
                                context=ContextSettings(min_traces=5, revise_every=4, timezone=timezone.utc))
    runner = SemanticRunner(_opener(tmp_path / "m"), LocalConsolidator(timezone=timezone.utc), settings).start()
    try:
        with _opener(tmp_path / "m")() as store:
            for seg in stream.segments:  # in step, so the runner sees the store as the reference below does
                store.write_segment(seg)
                runner.on_commit(seg)
                assert runner.wait_idle(60)
            chapters = sorted(sorted(c["trace_ids"]) for c in store.scan_rows("schemas", "camera_id = 'cam_cafe'"))
        with _opener(tmp_path / "ref")() as ref:  # the same stream, chapters checked after every segment
            for seg in stream.segments:
                ref.write_segment(seg)
                build_chapters(ref, seg.source, seg.camera_id, settings.chapters)
            expected = sorted(sorted(c["trace_ids"]) for c in ref.scan_rows("schemas", "camera_id = 'cam_cafe'"))
        assert chapters == expected and sum(map(len, chapters)) == 12  # the open fourth visit is in none
        with _opener(tmp_path / "m")() as store:
            ctx = get_context(store, "cam_cafe")
            # 13 traces: revised at the 5th and the 9th (every 4 after), the 13th makes a third revision
            assert ctx is not None and ctx.revision == 3 and ctx.trace_count == 13
    finally:
        runner.stop()


@pytest.mark.slow  # the real pipeline, whisper ASR included, over the 9 s clip
def test_cli_ingest_feeds_the_runner_and_flushes_a_chapter(tmp_path: Path) -> None:
    clip = tmp_path / "stage.mp4"
    shutil.copy(CLIP, clip)
    manifest_path = write_manifest(tmp_path, perception={"level": "light", "sample_fps": 1.0})
    assert main(["ingest", str(clip), "--manifest", str(manifest_path), "--camera", "stage"]) == 0
    manifest = load_manifest(manifest_path)
    assert runner_from_manifest(manifest, lambda: open_store(manifest)) is not None
    store = open_store(manifest)
    try:
        traces = store.timeline(camera="stage")
        chapters = store.scan_rows("schemas", "camera_id = 'stage'")
        assert traces and sorted(t for c in chapters for t in c["trace_ids"]) == sorted(t.id for t in traces)
    finally:
        store.close()
