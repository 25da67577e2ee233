"""The engine: the one place where a manifest becomes running objects.

Every entry point — ``reflectworld serve`` (the MCP lifespan), ``run``, ``ingest``, ``demo``,
the evals, the capture tools — builds an :class:`Engine` from the manifest and asks it for what
it needs; none of them wires pipeline stages itself. A stage added here reaches every path.

What :meth:`Engine.open` builds, in order:

* the memory store (embedder from the manifest, or an override for tests and benches);
* the per-user :class:`~perception.identity.service.IdentityService` (one lock, shared galleries);
* the live perception state (:class:`~perception.describe.context.PerceptionRuntime`): the context
  builder *with* its store lookups (camera context, entity history), steering and the scheduler;
* the VLM stage when the manifest names a VLM;
* the semantic runner (facts, chapters, camera context) on its own thread;
* rules + notifications (resolver, delivery thread);
* the proactive reminder stage (what is in view → memory → gate → one reminder, as a notification);
* the :class:`~perception.drivers.analyzer.Pipeline` that bundles all of it for the drivers, with
  one post-commit chain and one source-end hook;
* the background :class:`~plugin.worker.Worker` for captures.

Lifecycle: ``open()`` → ``ingest_file()`` / ``start_sources()`` / tools → ``close(drain_s)``.
``close`` stops captures, finishes queued semantic work and deliveries (up to ``drain_s``), and
closes the store. The engine is also a context manager. Captures take the store's capture lease
(:mod:`plugin.lease`): one process at a time runs the background captures.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from memory import HashEmbedder, MemoryStore, MiniLMEmbedder, OpenAIEmbedder
from memory.embedders import Embedder
from memory.models import SegmentWrite, Trace
from memory.store.notes import Note, write_notes
from perception.describe.context import (
    ContextBuilder,
    PerceptionRuntime,
    camera_context_from_store,
    entity_history_from_store,
)
from perception.describe.vlm import VLMClient
from perception.describe.vlm_stage import VLMSegmentStage
from perception.detectors.model_files import set_model_threads
from perception.drivers import heap
from perception.drivers.analyzer import Models, Pipeline
from perception.drivers.ingest import IngestReport, ProgressCallback, ingest_file
from perception.identity.service import IdentityService
from perception.segmenting.scheduler import Scheduler
from perception.settings import PerceptionConfig
from plugin.lease import CaptureLease
from plugin.manifest import HashEmbedderConfig, Manifest, MiniLMEmbedderConfig, OpenAIEmbedderConfig, SourceConfig
from plugin.acting.notify import NotificationHub, NotificationService, chain_commits
from plugin.acting.reminders.stage import ReminderStage, reminder_stage
from plugin.semantic import SemanticRunner, runner_from_manifest
from plugin.worker import Worker

__all__ = ["Engine", "Overrides", "build_embedder", "open_store"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Overrides:
    """Seams for tests, benches and evals; production passes none."""

    #: text embedder instead of the manifest's (benches reuse one loaded model)
    embedder: Embedder | None = None
    #: run the HTTP delivery thread (evals score decisions without delivering)
    deliver: bool = True
    #: the HTTP address this process serves, named to other processes that want to capture
    http: str | None = None
    #: one more post-commit hook, after the engine's own (tests and benches observe the writes)
    on_commit: Callable[[SegmentWrite], Any] | None = None
    #: a cluster source worker (``plugin/cluster.py``): this engine only analyses and writes. Its
    #: post-commit side goes to ``relay`` instead — ``("commit", write)``, ``("done", source, camera_id)``,
    #: ``("event", camera_id, state, detail)`` — for the one engine per user that runs semantic memory,
    #: rules and deliveries (:meth:`Engine.committed`, …). It takes no capture lease and leaves
    #: compaction and indexes to that engine's store.
    relay: Callable[..., Any] | None = None


def build_embedder(manifest: Manifest) -> Embedder:
    """Build the text embedder the manifest names (models load lazily on first use)."""
    cfg = manifest.memory.embedder
    if isinstance(cfg, MiniLMEmbedderConfig):
        return MiniLMEmbedder(threads=manifest.perception.model_threads)
    if isinstance(cfg, HashEmbedderConfig):
        return HashEmbedder(dim=cfg.dim)
    if isinstance(cfg, OpenAIEmbedderConfig):
        return OpenAIEmbedder(base_url=cfg.base_url, model=cfg.model, api_key=cfg.api_key.get_secret_value(),
                              dim=cfg.dim, timeout_s=cfg.timeout_s)
    raise AssertionError(f"unhandled embedder config {cfg!r}")  # the union is exhaustive


class Engine:
    """Store, identity, perception, semantic memory, rules and captures for one manifest."""

    def __init__(self, manifest: Manifest, overrides: Overrides | None = None) -> None:
        self.manifest = manifest
        self.overrides = overrides or Overrides()
        self.settings: PerceptionConfig = manifest.perception
        self.embedder: Embedder = self.overrides.embedder or build_embedder(manifest)
        self.hub = NotificationHub()
        self.lease = CaptureLease(manifest.store_uri(), http=self.overrides.http)
        self.store: MemoryStore
        self.identity: IdentityService
        self.perception: PerceptionRuntime
        self.vlm_stage: VLMSegmentStage | None = None
        self.semantic: SemanticRunner | None = None
        self.notifications: NotificationService
        self.reminders: ReminderStage | None = None
        self.pipeline: Pipeline
        self.worker: Worker
        self._opened = False

    @classmethod
    def from_manifest(cls, manifest: Manifest, overrides: Overrides | None = None) -> Engine:
        """An engine for ``manifest`` (nothing opened yet)."""
        return cls(manifest, overrides)

    # ------------------------------------------------------------------ lifecycle

    def open_store(self) -> MemoryStore:
        """A new connection to the manifest's store (the semantic runner keeps its own)."""
        store = MemoryStore(self.manifest.store_uri(), self.embedder, user_id=self.manifest.user_id,
                            storage_options=self.manifest.storage_options(), maintain=self.overrides.relay is None)
        store.open()
        return store

    def open(self) -> Engine:
        """Open the store and build every service; blocking (async callers use a worker thread)."""
        if self._opened:
            return self
        m = self.manifest
        heap.limit_arenas()  # before the store's and the models' native threads start
        set_model_threads(self.settings.model_threads)
        relay = self.overrides.relay
        self.store = self.open_store()
        try:
            shared = relay is not None or "://" in self.store.uri  # other processes write identities too
            self.identity = IdentityService(self.store, self.settings.face_match_threshold,
                                            stamp=identity_versions(self.store) if shared else None)
            builder = ContextBuilder(camera_context=camera_context_from_store(self.store),
                                     entity_history=entity_history_from_store(self.store))
            self.perception = PerceptionRuntime(builder=builder, scheduler=Scheduler(self.settings.mode,
                                                                                     self.settings.level))
            self.vlm_stage = self._vlm_stage()
            self.semantic = runner_from_manifest(m, self.open_store) if relay is None else None
            if self.semantic is not None:
                self.semantic.start()
            deliver = self.overrides.deliver and relay is None
            self.notifications = NotificationService.for_manifest(self.store, m, hub=self.hub, start_delivery=deliver,
                                                                  vlm=self.vlm_stage is not None)
            matcher = self.notifications.on_commit if relay is None else partial(relay, "commit")
            self.reminders = reminder_stage(m, self.store, self.notifications, self.identity,
                                            self.perception.vlm) if relay is None else None
            self.pipeline = Pipeline(
                store=self.store, settings=self.settings, identity=self.identity, models=Models(self.settings),
                scheduler=self.perception.scheduler, vlm_stage=self.vlm_stage,
                active_rules=lambda camera: [r.text for r in self.notifications.active_rules(camera)],
                rule_interest=self.notifications.could_match,
                on_commit=chain_commits(self.semantic.on_commit if self.semantic else None, matcher,
                                        self.reminders.on_commit if self.reminders else None,
                                        self.perception.on_commit, self.overrides.on_commit),
                on_source_done=self._source_done if relay is None else partial(relay, "done"))
            self.worker = Worker(self.pipeline, mode=self.settings.mode,
                                 on_source_event=self.notifications.on_source_event if relay is None
                                 else partial(relay, "event"),
                                 before_start=self.lease.acquire if relay is None else lambda: None,
                                 max_captures=m.access.max_captures)
        except BaseException:
            self.store.close()
            raise
        self._opened = True
        logger.info("engine open: store %s (user %s), %s level, %s, %s describer", self.store.uri, m.user_id,
                    self.settings.level, self.settings.mode, "VLM" if self.vlm_stage else "local")
        return self

    def close(self, drain_s: float = 0.0) -> None:
        """Stop captures, finish queued semantic work and deliveries (up to ``drain_s``), close the store."""
        if not self._opened:
            return
        self._opened = False
        try:
            self.worker.stop()
            if self.perception.vlm is not None:
                self.perception.vlm.close()
            if self.reminders is not None:
                self.reminders.close()
            if self.semantic is not None:
                self.semantic.stop(timeout=max(drain_s, 30.0))
            self.notifications.close(drain_s=drain_s)
        finally:
            self.lease.release()
            self.store.close()
            logger.info("engine closed")

    def __enter__(self) -> Engine:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _vlm_stage(self) -> VLMSegmentStage | None:
        vlm = self.manifest.vlm
        if vlm is None:
            return None
        client = VLMClient.from_config(vlm)
        self.perception.vlm = client
        logger.info("segments are described by the VLM %s at %s", vlm.model, vlm.base_url)
        return VLMSegmentStage(client, self.perception.builder, self.perception.steering)

    def _source_done(self, source: str, camera_id: str) -> None:
        if self.semantic is not None:
            self.semantic.source_done(source, camera_id)

    # ------------------------------------------------------------------ work

    def ingest_file(self, path: str | Path, camera_id: str | None = None, *, progress: ProgressCallback | None = None,
                    stop: threading.Event | None = None) -> IngestReport:
        """Ingest one file in this thread through the engine's pipeline (resumable).

        A one-shot file job needs no capture lease: entity ids come from the store's atomic counter,
        so it may run beside the process that owns the captures (see :mod:`plugin.lease`).
        """
        owner = self.lease.owner()
        if owner is not None and not self.lease.held:
            logger.warning("`%s` (pid %s) is capturing into this store too; ids stay unique, but a person it "
                           "meets during this ingest may get a second entity (merge them with entity_update)",
                           owner.get("command") or "reflectworld", owner.get("pid", "?"))
        return ingest_file(path, self.pipeline, camera_id=camera_id, progress=progress, stop=stop)

    def start_sources(self, extra: Sequence[SourceConfig] = ()) -> list[str]:
        """Start the manifest's enabled sources plus ``extra`` in the background; returns the errors."""
        sources = [s for s in [*self.manifest.sources, *extra] if s.enabled]
        if not sources:
            return []
        return self.worker.start_sources(sources)

    def wait_idle(self, stop: threading.Event, poll_s: float = 0.5) -> bool:
        """Block until every capture has ended (True) or ``stop`` is set (False)."""
        while not stop.wait(poll_s):
            if self.worker.idle():
                return True
        return False

    def flush(self, timeout_s: float = 60.0) -> bool:
        """Wait until queued semantic work and deliveries are done; False when ``timeout_s`` ran out."""
        deadline = time.monotonic() + timeout_s
        ok = self.semantic.wait_idle(timeout_s) if self.semantic is not None else True
        delivery = self.notifications.delivery
        if delivery is not None:
            ok = delivery.drain(max(0.0, deadline - time.monotonic())) and ok
        return ok

    # ------------------------------------------------------------------ the post-commit side of relayed workers

    def committed(self, write: SegmentWrite) -> None:
        """A write another engine committed to this store (a cluster worker's relay): run the post-commit hooks."""
        self.pipeline.commit(write)

    def source_done(self, source: str, camera_id: str) -> None:
        """A relayed worker ingested ``source`` to its end (its last event becomes a chapter)."""
        self.pipeline.source_done(source, camera_id)

    def source_event(self, camera_id: str, state: str, detail: str = "") -> None:
        """A relayed worker's live source went ``offline`` or came back ``online``."""
        self.notifications.on_source_event(camera_id, state, detail)

    def remember(self, notes: Sequence[Note]) -> list[Trace]:
        """Store notes (``memory_note``, ``remember``): linked to known people and this detector's classes;
        the reminder stage reads them at its next segment."""
        traces = write_notes(self.store, notes, labels=self.notifications.labels or None)
        if self.reminders is not None:
            self.reminders.index.invalidate()
        return traces

    def identity_edited(self) -> None:
        """An identity edit (name, enrol, merge, split, forget) was committed: running captures see it now."""
        self.identity.edited()

    def status(self) -> dict[str, Any]:
        """Scheduler counters and VLM tokens (``capture_status``)."""
        return self.perception.status()


#: tables whose change may change what a worker's identity service sees
IDENTITY_TABLES = ("gallery_face", "gallery_body", "entities", "ingest_log")
#: how often a worker sharing its store with other writers looks for their new faces and edits
IDENTITY_POLL_S = 2.0


def identity_versions(store: MemoryStore, every_s: float = IDENTITY_POLL_S) -> Callable[[], object]:
    """The versions of the identity tables, re-read at most every ``every_s``.

    The identity service reloads its galleries when they change: faces other workers of the store
    enrolled, and identity edits made anywhere (an object store has no epoch file beside it). The
    ingest log is among them because a segment's slots count only once it commits there
    (``memory/identity/galleries.py``).
    """
    seen: list[Any] = [float("-inf"), None]

    def stamp() -> object:
        now = time.monotonic()
        if now - seen[0] >= every_s:
            seen[0] = now
            seen[1] = tuple(store.table_version(t) for t in IDENTITY_TABLES)
        return seen[1]

    return stamp


def open_store(manifest: Manifest) -> MemoryStore:
    """Open (creating if needed) the manifest's store alone: for readers (search, ask, evals of answers)."""
    return Engine(manifest).open_store()
