"""Beyond one machine: the sources of a manifest on a Ray cluster, one memory for the user.

``reflectworld run --cluster ray://HOST:PORT`` (or ``HOST:PORT`` on a cluster node, or ``auto``)
places every source in a Ray actor (:class:`SourceWorker`). Each actor opens its own
:class:`~plugin.engine.Engine` with ``Overrides(relay=…)``: it decodes, segments, runs the local
models, resolves identities and writes the segment to the shared store — the same pipeline as
``reflectworld run``, composed by the engine, nothing re-wired here. What must happen once per user
is relayed instead: every committed write, a finished source, a live source going offline. This
process (the driver) drains the actors and hands those to its own engine (:meth:`Engine.committed`
and friends), which alone runs semantic memory, chapters, rule matching, notifications and the
store's compaction and index building.

Why each actor resolves identities itself (and not one resolver actor per user): analysis and
resolution are one step of :class:`~perception.drivers.analyzer.SegmentAnalyzer`, and shipping every
face crop to one actor would serialise the cluster on it. Ids stay unique across processes and hosts
through the store's atomic allocation (``memory/identity/ids.py``); each worker reloads the galleries when
the identity tables change (other workers' new faces, identity edits from any process), so a person
enrolled on one camera is recognised on the others seconds later. Two workers that meet the same new
person within those seconds may create two entities (``entity_update merge`` joins them).

Fault tolerance: an actor that dies is restarted by Ray and resumes from the ingest log; writes are
idempotent, so nothing is lost or duplicated in the store. The driver keeps a cursor per source (the
last segment its post-commit side saw): a segment that the dead actor committed but could not relay
any more is rebuilt from the store (:func:`stored_write`) and relayed from there, and a segment
relayed twice is dropped.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memory.errors import NotFoundError
from memory.models import Keyframe, Observation, SegmentWrite
from memory.search.modes import sql_literal
from plugin.engine import Engine, Overrides
from plugin.errors import PluginError
from plugin.manifest import Manifest, SourceConfig
from perception.media.redact import install_log_redaction
from perception.media.sources import SourceError, make_source
from plugin.worker import CaptureInfo

__all__ = ["CLUSTER_HINT", "ClusterRun", "SourceWorker", "connect", "disconnect", "run_cluster", "stored_write"]

logger = logging.getLogger(__name__)

CLUSTER_HINT = "pip install 'reflectworld-mm[cluster]'"
#: Ray namespace of the actors (one actor name per user and camera: a second driver is refused)
NAMESPACE = "reflectworld"
#: restarts Ray grants a source actor before its source counts as failed
MAX_RESTARTS = 5
#: seconds between two drains of the actors
POLL_S = 0.5


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise PluginError(f"--cluster needs Ray, which is not installed: {CLUSTER_HINT}") from None
    return ray


# ---------------------------------------------------------------------------------- the actor


class SourceWorker:
    """One source of the manifest, in a Ray actor: its engine analyses and writes, the rest is relayed.

    Ray builds it again after the process died (same arguments): the capture then resumes from the
    store's ingest log. :meth:`drain` hands the driver what happened since the last drain.
    """

    def __init__(self, manifest: Manifest, source: SourceConfig, log_level: str = "WARNING") -> None:
        os.environ.setdefault("OPENCV_LOG_LEVEL", "ERROR")
        os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
        logging.basicConfig(level=log_level, stream=sys.stderr,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        install_log_redaction()
        self.incarnation = uuid.uuid4().hex[:8]
        self._lock = threading.Lock()
        self._outbox: list[tuple[Any, ...]] = []
        self.engine = Engine.from_manifest(manifest, Overrides(relay=self._relay)).open()
        try:  # the key the worker files the source under; a bad source is reported by start_sources
            key: str | None = make_source(source.uri, dict(source.options or {})).key
        except SourceError:
            key = None
        #: the last segment committed before this incarnation started (what the driver may have missed)
        self.resumed_from = self.engine.store.resume_point(key) if key is not None else None
        errors = self.engine.start_sources([source])
        self.error = errors[0] if errors else None
        logger.info("source worker %s (pid %d) runs %s after segment %s", self.incarnation, os.getpid(), key,
                    self.resumed_from)

    def _relay(self, kind: str, *args: Any) -> None:
        with self._lock:
            self._outbox.append((kind, *args))

    def drain(self) -> dict[str, Any]:
        """What happened since the last call: relayed items, capture status, whether it still runs."""
        with self._lock:
            items, self._outbox = self._outbox, []
        return {"items": items, "status": self.engine.worker.status(), "running": not self.engine.worker.idle(),
                "error": self.error, "incarnation": self.incarnation, "pid": os.getpid(),
                "resumed_from": self.resumed_from, "cpu_s": sum(os.times()[:2])}

    def where(self) -> dict[str, Any]:
        """Where this incarnation runs (process id, host), for operators and ``ray`` tooling."""
        return {"pid": os.getpid(), "host": socket.gethostname(), "incarnation": self.incarnation}

    def stop(self) -> dict[str, Any]:
        """Stop the capture gracefully (the in-flight segment is committed or discarded) and close the engine."""
        self.engine.worker.stop()
        last = self.drain()
        self.engine.close()
        return last


# ---------------------------------------------------------------------------------- the driver


def connect(address: str, num_cpus: int | None = None) -> Any:
    """Connect to the Ray cluster at ``address`` (``ray://host:port``, ``host:port``, or ``auto``).

    ``auto`` joins a cluster started on this machine with ``ray start``, or else starts a local one
    inside this process. Ray logs to stderr; workers' output stays in Ray's log files.

    Raises:
        PluginError: Ray is not installed, or the cluster cannot be reached.
    """
    ray = _ray()
    common = {"namespace": NAMESPACE, "log_to_driver": False, "logging_level": logging.WARNING}
    # Ray forks and at once executes its own processes; LanceDB's fork warning concerns children
    # that go on running Python, which these do not.
    warnings.filterwarnings("ignore", message="lancedb fork support", category=RuntimeWarning)
    try:
        if address == "auto":
            try:
                return ray.init(address="auto", **common)
            except ConnectionError:
                logger.info("no Ray cluster on this machine; starting a local one")
                return ray.init(num_cpus=num_cpus, include_dashboard=False, **common)
        return ray.init(address=address, **common)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise PluginError(f"cannot reach the Ray cluster at {address}: {exc}; start one with "
                          "`ray start --head` (see README, \"Beyond one machine\")") from exc


def disconnect() -> None:
    """Leave the cluster (a local one started by :func:`connect` stops with it)."""
    ray = _ray()
    if ray.is_initialized():
        ray.shutdown()


def stored_write(store: Any, source: str, index: int) -> SegmentWrite | None:
    """Segment ``index`` of ``source`` as committed, rebuilt from the store (``None`` when it holds none).

    What the store does not keep (the VLM's rule signals and risk) is empty; the people count is
    the identified ones.
    """
    trace = store.segment_traces([(source, index)]).get((source, index))
    if trace is None:
        return None
    where = f"source = {sql_literal(source)} AND segment_index = {int(index)}"
    obs_fields = set(Observation.model_fields)
    observations = [Observation.model_validate({k: v for k, v in row.items() if k in obs_fields})
                    for row in store.scan_rows("observations", where)]
    entities = []
    for entity_id in trace.entity_ids:
        try:
            entities.append(store.get_entity(entity_id))
        except NotFoundError:
            continue  # forgotten since
    keyframes: list[Keyframe] = store.keyframes(trace.keyframe_ids) if trace.keyframe_ids else []
    return SegmentWrite(source=source, camera_id=trace.camera_id, segment_index=index, trace=trace,
                        observations=observations, keyframes=keyframes, entities=entities,
                        people=len(trace.entity_ids))


@dataclass
class _Placed:
    """The driver's view of one source actor."""

    config: SourceConfig
    name: str
    actor: Any
    #: highest segment index the post-commit side has seen (None until the first drain)
    cursor: int | None = None
    source: str = ""
    camera_id: str = ""
    incarnation: str = ""
    restarts: int = 0
    relayed: int = 0
    replayed: int = 0
    duplicates: int = 0
    #: CPU seconds (user + system) of the actor's current incarnation, at its last drain
    cpu_s: float = 0.0
    finished: bool = False
    error: str | None = None
    info: CaptureInfo | None = None
    pending: Any = None


@dataclass
class ClusterRun:
    """Outcome of :func:`run_cluster`: one entry per source."""

    sources: list[_Placed] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return any(p.error for p in self.sources)


def _actor_name(manifest: Manifest, cfg: SourceConfig) -> str:
    camera = cfg.camera_id or Path(cfg.uri.split("?", 1)[0]).stem or "source"
    return f"{manifest.user_id}/{camera}"


def _absolute(cfg: SourceConfig) -> SourceConfig:
    """File and folder paths made absolute here, so that workers key them as a local run does."""
    if "://" in cfg.uri or cfg.uri.startswith(("/dev/", "phone:")):
        return cfg
    return cfg.model_copy(update={"uri": str(Path(cfg.uri).expanduser().absolute())})


def run_cluster(engine: Engine, sources: list[SourceConfig], stop: threading.Event, *, cpus_per_source: float = 1.0,
                on_status: Callable[[list[CaptureInfo]], None] | None = None) -> ClusterRun:
    """Run ``sources`` as actors on the connected Ray cluster until all ended or ``stop`` is set.

    ``engine`` is this process's open engine for the user: it receives every relayed write. The
    actors get the manifest without its sources and rules (the rules are already in the store).
    """
    ray = _ray()
    worker_manifest = engine.manifest.model_copy(update={"sources": [], "rules": []})
    remote = ray.remote(SourceWorker)
    placed: list[_Placed] = []
    run = ClusterRun(placed)
    try:
        for cfg in sources:
            cfg = _absolute(cfg)
            name = _actor_name(engine.manifest, cfg)
            source, cursor = _start_point(engine, cfg)
            actor = remote.options(name=name, max_restarts=MAX_RESTARTS, max_task_retries=-1,
                                   num_cpus=cpus_per_source).remote(worker_manifest, cfg, engine.manifest.log_level)
            placed.append(_Placed(config=cfg, name=name, actor=actor, source=source, cursor=cursor))
        while not stop.is_set() and not all(p.finished for p in placed):
            _poll(ray, engine, placed, timeout_s=POLL_S)
            if on_status is not None:
                on_status([p.info for p in placed if p.info is not None])
            stop.wait(POLL_S)
    finally:
        _finish(ray, engine, placed)
    return run


def _start_point(engine: Engine, cfg: SourceConfig) -> tuple[str, int | None]:
    """The source's key and last committed segment, read before its actor can write anything.

    A file that only the workers can see leaves both to the actor's first report.
    """
    try:
        key = make_source(cfg.uri, dict(cfg.options or {})).key
    except SourceError:
        return "", None
    last = engine.store.resume_point(key)
    return key, -1 if last is None else last


def _poll(ray: Any, engine: Engine, placed: list[_Placed], timeout_s: float) -> None:
    """Drain every running actor once (an actor being restarted is asked again next time)."""
    for p in placed:
        if not p.finished and p.pending is None:
            p.pending = p.actor.drain.remote()
    waiting = [p for p in placed if p.pending is not None]
    ready, _ = ray.wait([p.pending for p in waiting], num_returns=len(waiting), timeout=timeout_s)
    done = set(ready)
    for p in waiting:
        if p.pending not in done:
            continue
        ref, p.pending = p.pending, None
        try:
            _absorb(engine, p, ray.get(ref))
        except ray.exceptions.RayActorError as exc:  # restarts used up, or the actor could not be built
            p.error = f"worker died and was not restarted: {str(exc).splitlines()[0]}"
            p.finished = True
            _catch_up(engine, p)
            p.actor = None
            continue
        if p.finished:  # its source ended: free the CPUs for the sources still waiting for a place
            _release(ray, engine, p)
            p.actor = None


def _absorb(engine: Engine, p: _Placed, state: dict[str, Any]) -> None:
    """Apply one drain: a restarted actor's gap first, then its relayed items in order."""
    if state["incarnation"] != p.incarnation:
        if p.incarnation:
            p.restarts += 1
            logger.warning("source worker %s was restarted (pid %s); it resumes after segment %s", p.name,
                           state["pid"], state["resumed_from"])
        p.incarnation = state["incarnation"]
        resumed = -1 if state["resumed_from"] is None else int(state["resumed_from"])
        if p.cursor is None:
            p.cursor = resumed
        elif resumed > p.cursor:  # committed by the dead actor after its last drain
            _replay(engine, p, resumed)
    p.info = state["status"][0] if state["status"] else p.info
    p.cpu_s = float(state.get("cpu_s", 0.0))
    if p.info is not None:
        p.source, p.camera_id = p.info.source, p.info.camera_id
    for item in state["items"]:
        kind, args = item[0], item[1:]
        if kind == "commit":
            write: SegmentWrite = args[0]
            p.source, p.camera_id = write.source, write.camera_id
            if not write.enrichment and p.cursor is not None and write.segment_index <= p.cursor:
                p.duplicates += 1  # relayed before, by an earlier incarnation
                continue
            if p.cursor is not None and write.segment_index > p.cursor + 1:
                _replay(engine, p, write.segment_index - 1)
            engine.committed(write)
            p.relayed += not write.enrichment
            p.cursor = max(p.cursor if p.cursor is not None else -1, write.segment_index)
        elif kind == "done":
            _catch_up(engine, p)
            engine.source_done(*args)
        elif kind == "event":
            engine.source_event(*args)
    if state["error"]:
        p.error = state["error"]
    if not state["running"]:
        _catch_up(engine, p)
        p.finished = True
        if p.info is not None and p.info.state == "failed":
            p.error = p.error or p.info.error or "failed"


def _replay(engine: Engine, p: _Placed, upto: int) -> None:
    """Relay segments ``cursor + 1 … upto`` from the store (the actor that wrote them died first)."""
    start = (p.cursor if p.cursor is not None else -1) + 1
    for index in range(start, upto + 1):
        write = stored_write(engine.store, p.source, index) if p.source else None
        if write is not None:
            engine.committed(write)
            p.replayed += 1
            logger.info("segment %d of %s relayed from the store", index, p.name)
    p.cursor = max(p.cursor if p.cursor is not None else -1, upto)


def _catch_up(engine: Engine, p: _Placed) -> None:
    """Relay whatever the store holds past the cursor (before a source is declared ended)."""
    if not p.source:
        return
    last = engine.store.resume_point(p.source)
    if last is not None and (p.cursor is None or last > p.cursor):
        _replay(engine, p, last)


def _release(ray: Any, engine: Engine, p: _Placed, stop_ref: Any = None) -> None:
    """Stop the actor (graceful: its in-flight segment is committed), relay the rest, free its CPUs."""
    try:
        if p.pending is not None:
            _absorb(engine, p, ray.get(p.pending, timeout=60))
        _absorb(engine, p, ray.get(stop_ref if stop_ref is not None else p.actor.stop.remote(), timeout=60))
    except Exception as exc:  # shutdown path: record, relay what the store holds, keep freeing the others
        logger.warning("source worker %s did not stop cleanly: %s", p.name, exc)
        _catch_up(engine, p)
    p.pending = None
    p.finished = True
    try:
        ray.kill(p.actor, no_restart=True)
    except Exception:  # already gone
        logger.debug("actor %s already gone", p.name)


def _finish(ray: Any, engine: Engine, placed: list[_Placed]) -> None:
    """Release every actor still held (all stopping at once)."""
    live = [p for p in placed if p.actor is not None]
    stopping = [p.actor.stop.remote() for p in live]
    for p, ref in zip(live, stopping):
        _release(ray, engine, p, ref)
        p.actor = None
