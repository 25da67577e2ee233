"""The semantic runner: consolidation, chapters and camera context, off the hot path.

Drivers (``perception.drivers.ingest.ingest_file``, the stream worker) call :meth:`SemanticRunner.on_commit`
after each committed segment. That call only does ``put_nowait`` on a bounded queue, so it never
delays a commit; when the queue is full the segment is dropped and counted, which is safe because
all semantic state is derived from the store (an entity's counter catches up on its next commit,
chapters pick up every trace after the last chapter).

One worker thread owns its own store connection (same URI, embedder and user) and, per segment:
counts the observations and consolidates at most ``max_entities_per_run`` due entities (the rest
stay due), writes the chapters that are due for that source, and revises the camera's context
when enough new segments exist. :meth:`SemanticRunner.source_done` flushes a finished source's
last event into a chapter. The lifespan and ``reflectworld ingest`` start and stop it.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from memory import MemoryStore
from memory.semantic.camera_context import ContextSettings, maybe_revise, places, traces_until_revision
from memory.semantic.chapters import ChapterSettings, build_chapters
from memory.semantic.consolidate import ConsolidationEngine, ConsolidationSettings, Consolidator
from memory.semantic.local_consolidator import LocalConsolidator
from memory.models import SegmentWrite
from plugin.errors import PluginError
from plugin.manifest import Manifest

__all__ = ["SemanticRunner", "SemanticSettings", "build_consolidator", "runner_from_manifest"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SemanticSettings:
    """Everything the runner needs besides the store and the consolidator."""

    consolidation: ConsolidationSettings = field(default_factory=ConsolidationSettings)
    chapters: ChapterSettings = field(default_factory=ChapterSettings)
    context: ContextSettings = field(default_factory=ContextSettings)
    queue_size: int = 256
    max_entities_per_run: int = 4


@dataclass
class RunnerStats:
    """Counters for status tools and tests."""

    queued: int = 0
    dropped: int = 0
    processed: int = 0
    consolidations: int = 0
    chapters: int = 0
    revisions: int = 0
    errors: int = 0


_STOP = object()


class SemanticRunner:
    """A worker thread fed by a bounded queue of committed segments."""

    def __init__(self, open_store: Callable[[], MemoryStore], consolidator: Consolidator,
                 settings: SemanticSettings | None = None) -> None:
        self._open_store = open_store
        self.consolidator = consolidator
        self.settings = settings or SemanticSettings()
        self.stats = RunnerStats()
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=self.settings.queue_size)
        self._thread: threading.Thread | None = None
        self._store: MemoryStore | None = None
        #: per (source, camera): segments since chapters were last built, and the last segment's end
        self._chapter_watch: dict[tuple[str, str], tuple[int, float]] = {}
        #: per camera: segments still to come before its context is due for revision
        self._context_left: dict[str, int] = {}

    def start(self) -> SemanticRunner:
        """Open the runner's store connection and start the worker thread (idempotent)."""
        if self._thread is not None:
            return self
        self._store = self._open_store()
        self._thread = threading.Thread(target=self._loop, name="reflectworld-semantic", daemon=True)
        self._thread.start()
        logger.info("semantic runner started (%s consolidator)", self.consolidator.name)
        return self

    def on_commit(self, seg: SegmentWrite) -> None:
        """Hand a committed segment over without blocking (dropped and counted when the queue is full)."""
        self._offer(("segment", seg))

    def source_done(self, source: str, camera_id: str) -> None:
        """Flush ``source``'s pending events into a chapter once the queued segments are processed."""
        self._offer(("done", source, camera_id))

    def _offer(self, item: tuple[Any, ...]) -> None:
        try:
            self._queue.put_nowait(item)
            self.stats.queued += 1
        except queue.Full:
            self.stats.dropped += 1
            logger.warning("semantic queue full (%d); dropped %s work (it catches up on a later commit)",
                           self.settings.queue_size, item[0])

    def wait_idle(self, timeout: float) -> bool:
        """Block until everything queued so far is processed; False on timeout."""
        done = threading.Event()

        def waiter() -> None:
            self._queue.join()
            done.set()

        threading.Thread(target=waiter, name="reflectworld-semantic-wait", daemon=True).start()
        return done.wait(timeout)

    def stop(self, timeout: float = 30.0) -> None:
        """Finish the queued work (up to ``timeout`` seconds), stop the thread, close the store."""
        if self._thread is None:
            return
        self._queue.put(_STOP)
        self._thread.join(timeout)
        if self._thread.is_alive():
            logger.warning("semantic runner still busy after %.0fs; leaving %d item(s) for the next run",
                           timeout, self._queue.qsize())
        else:
            self._thread = None
            if self._store is not None:
                self._store.close()
                self._store = None
        logger.info("semantic runner stopped: %s", self.stats)

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is _STOP:
                    return
                self._process(item)
            except Exception:  # the worker's top loop: log with traceback and keep going
                self.stats.errors += 1
                logger.exception("semantic work on %s failed", item[0] if isinstance(item, tuple) else item)
            finally:
                self._queue.task_done()

    def _process(self, item: tuple[Any, ...]) -> None:
        store = self._store
        assert store is not None
        if item[0] == "done":
            self.stats.chapters += len(build_chapters(store, item[1], item[2], self.settings.chapters,
                                                      source_done=True))
            return
        seg: SegmentWrite = item[1]
        engine = ConsolidationEngine(store, self.consolidator, self.settings.consolidation)
        due = engine.note_segment(seg)[:self.settings.max_entities_per_run]
        if due:
            known = places(store)
            for entity_id in due:
                engine.consolidate(entity_id, current=seg, places=known)
                self.stats.consolidations += 1
        if self._event_may_have_closed(seg):
            self.stats.chapters += len(build_chapters(store, seg.source, seg.camera_id, self.settings.chapters))
        left = self._context_left.get(seg.camera_id, 0)
        if left > 1:
            self._context_left[seg.camera_id] = left - 1
        else:
            if maybe_revise(store, seg.camera_id, self.settings.context) is not None:
                self.stats.revisions += 1
            self._context_left[seg.camera_id] = traces_until_revision(store, seg.camera_id, self.settings.context)
        self.stats.processed += 1

    def _event_may_have_closed(self, seg: SegmentWrite) -> bool:
        """Whether chapters can be due after ``seg``: an event closes on a gap or when it is full.

        Chapters are derived from the store, so this only saves reads: each check scans the traces
        of the open event (up to ``event_max_traces``), which per segment was most of a light
        camera's store cost. The first segment of a source in this runner checks, so a resumed run
        picks up where the last chapter ended.
        """
        chapters = self.settings.chapters
        key = (seg.source, seg.camera_id)
        watched = self._chapter_watch.get(key)
        gap = watched is not None and seg.trace.t_start - watched[1] > chapters.event_gap_s
        count = 1 if watched is None else watched[0] + 1
        due = watched is None or gap or count >= chapters.event_max_traces
        self._chapter_watch[key] = (1 if gap else 0 if due else count, seg.trace.t_end)
        return due


def _timezone(name: str | None) -> ZoneInfo | None:
    if name is None:
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise PluginError(f"semantic.timezone {name!r} is not a known IANA zone; use e.g. 'Europe/Paris' or "
                          "null for this machine's local time") from None


def build_consolidator(manifest: Manifest) -> Consolidator:
    """The consolidator the manifest names (``llm`` needs a ``vlm`` section; local is its fallback)."""
    cfg = manifest.semantic
    local = LocalConsolidator(timezone=_timezone(cfg.timezone))
    if cfg.consolidator == "local":
        return local
    if manifest.vlm is None:
        logger.warning("semantic.consolidator is 'llm' but no `vlm` section is configured; using the local one")
        return local
    from perception.describe.llm_consolidator import LLMConsolidator
    from perception.describe.vlm import VLMClient

    return LLMConsolidator(VLMClient.from_config(manifest.vlm), fallback=local)


def runner_from_manifest(manifest: Manifest, open_store: Callable[[], MemoryStore]) -> SemanticRunner | None:
    """A (not yet started) runner for ``manifest``, or None when ``semantic.enabled`` is false."""
    cfg = manifest.semantic
    if not cfg.enabled:
        return None
    tz = _timezone(cfg.timezone)
    settings = SemanticSettings(
        consolidation=ConsolidationSettings(every_n=cfg.every_n, gamma=cfg.gamma,
                                            initial_importance=cfg.initial_importance),
        chapters=ChapterSettings(budget_events=cfg.chapter_budget, interval_s=cfg.chapter_interval_s,
                                 event_gap_s=cfg.event_gap_s),
        context=ContextSettings(min_traces=cfg.context_min_traces, revise_every=cfg.context_revise_every, timezone=tz),
        queue_size=cfg.queue_size, max_entities_per_run=cfg.max_entities_per_run)
    return SemanticRunner(open_store, build_consolidator(manifest), settings)
