"""Index management: the vector and full-text indexes of the searchable tables, kept fresh off the write path.

LanceDB answers a query from an index plus a flat scan of the rows written since the index was last
updated, so results are always complete; what degrades as a table grows is *latency*. This module
keeps both parts small:

* **Full-text (BM25)** — every searchable table gets an FTS index on ``text`` when the store opens
  (English stemming, stop words removed, ASCII folding). New rows are folded in by ``optimize()``.
* **Vector (IVF_PQ, cosine)** — built once a table holds :attr:`IndexPolicy.vector_min_rows` rows
  (below that a flat scan is faster than probing partitions) and retrained when the table has grown
  :attr:`IndexPolicy.retrain_growth` times since the last training, so partitions keep fitting the data.
* **Scalar** — past :attr:`IndexPolicy.scalar_min_rows` rows, a BTREE on ``id`` (candidate lookups,
  ``get``), bitmaps on ``user_id`` and ``camera_id`` and a BTREE on ``wall_start`` (filters: a question's
  "yesterday" or "this morning") replace full scans; at 1M traces a day's window took a search's
  vector and full-text prefilters 30 ms each as a scan, 4 ms through the index.
* **Freshness** — a maintenance pass (:func:`maintain_table`: tiered compaction, folding new rows into
  both indexes, dropping old versions) runs when a table has :attr:`IndexPolicy.unindexed_max` rows
  outside its indexes, after :attr:`IndexPolicy.compact_every` writes, or at the latest
  :attr:`IndexPolicy.interval_s` after the first such row. Between passes, every
  :attr:`IndexPolicy.cleanup_every` writes of a table delete its old versions (reads and commits cost
  per version kept and per fragment, so both are bounded by writes, not only by time). A
  forced pass (:meth:`IndexMaintainer.run_once` with ``force``) compacts a table left in small
  fragments completely: reading a search's candidates by row id costs per fragment touched.
* **Tiered compaction** — every write leaves a fragment of its own. LanceDB's ``optimize()`` merges
  every fragment under a million rows, so each pass rewrote whole tables and its cost grew with the
  table, hour after hour of a stream. A pass here merges only the fragments below a tier
  (:attr:`IndexPolicy.compaction_tiers`, eight times apart) into fragments of that tier: new fragments
  as soon as there are two, a tier's fragments into the next once there are more than
  :attr:`IndexPolicy.compaction_fan_in` of them. A pass rewrites at most one tier's rows, each row is
  rewritten about once per tier, and a table keeps at most about ``fan_in`` fragments per tier. This
  uses Lance's ``compact_files`` (pylance, the same Lance release LanceDB carries).

:class:`IndexMaintainer` does this work on its own thread. Writers only call :meth:`IndexMaintainer.poke`
(non-blocking), so ingestion never waits for an index build; searches keep using the previous index
version until the new one commits.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from lancedb.index import FTS, Bitmap, BTree, IvfPq

logger = logging.getLogger(__name__)

__all__ = ["IndexMaintainer", "IndexPolicy", "IndexState", "compaction_target", "drop_old_versions", "ensure_fts",
           "maintain_table", "table_index_state"]


@dataclass(frozen=True)
class IndexPolicy:
    """When indexes are built, retrained and refreshed."""

    #: rows from which a vector index beats a flat scan
    vector_min_rows: int = 20_000
    #: rows from which scalar indexes (``id``, ``user_id``, ``camera_id``) pay for themselves
    scalar_min_rows: int = 10_000
    #: retrain the vector index when the table has grown this many times since it was trained
    retrain_growth: float = 4.0
    #: rows outside the indexes that trigger an ``optimize()``
    unindexed_max: int = 5_000
    #: seconds after which any unindexed rows are folded in
    interval_s: float = 30.0
    #: how often the maintainer thread looks at the tables
    check_every_s: float = 2.0
    #: rows per fragment that tiered compaction merges up to; the last is Lance's own target. Below the
    #: first tier a table is compacted whole, as LanceDB's ``optimize()`` does (on a long stream a first
    #: tier of 256 rows cost ~10 % more CPU per segment than 4,096: more fragments to read per write)
    compaction_tiers: tuple[int, ...] = (4_096, 32_768, 262_144, 1_048_576)
    #: fragments of a tier that are merged up into the next one together
    compaction_fan_in: int = 8
    #: Every write leaves a table version. Old ones are deleted except the newest ``keep_versions`` and
    #: any younger than ``keep_versions_for_s``: by each compaction (the maintainer's and
    #: ``MemoryStore.optimize()``) and by the maintainer every ``cleanup_every`` writes of a table.
    #: Without cleanup a stream's store grew by its write amplification (about 2 GB per camera-hour).
    #: The count matters as much as the bytes: with ``read_consistency_interval=0`` every read and
    #: write of a table first finds its latest version, at a cost that grows with the versions on disk
    #: (0.5 ms a call at 50, 1.4 ms at 300, 7.8 ms at 1,000), and a segment makes dozens of such calls.
    #: A time window alone keeps as many versions as the write rate fills it with (eight cameras, or a
    #: file ingested faster than real time, write many times a second). Ten seconds still lets a reader
    #: that opened an older version finish (a search takes milliseconds); crash recovery needs only
    #: the latest (``ingest_log`` is written last).
    keep_versions: int = 32
    keep_versions_for_s: float = 10.0
    cleanup_every: int = 32
    #: writes of a table after which it is compacted without waiting for ``interval_s``: every write
    #: leaves a fragment, and each read and commit costs per fragment (a store written many times a
    #: second, by many cameras or a file read faster than real time, would gather hundreds)
    compact_every: int = 64


@dataclass
class IndexState:
    """What one table's indexes look like now."""

    rows: int
    fts: bool
    vector: bool
    unindexed: int
    scalar: list[str] = field(default_factory=list)
    vector_trained_rows: int = 0
    vector_indexed: int = 0


def fts_config() -> FTS:
    """The full-text configuration of every searchable ``text`` column."""
    return FTS(with_position=False, stem=True, remove_stop_words=True, ascii_folding=True, lower_case=True)


def ensure_fts(table: Any) -> None:
    """Create the FTS index on ``text`` when the table has none."""
    if not any(idx.index_type == "FTS" for idx in table.list_indices()):
        table.create_index("text", config=fts_config(), replace=True)


def vector_config(rows: int) -> IvfPq:
    """IVF_PQ for ``rows`` rows: about 4k rows per partition (LanceDB picks the sub-vectors: dim / 16)."""
    partitions = max(16, min(4096, rows // 4096))
    return IvfPq(distance_type="cosine", num_partitions=partitions)


def table_index_state(table: Any) -> IndexState:
    """Row count, which indexes exist, and how many rows the FTS index does not cover yet."""
    rows = table.count_rows()
    fts = vector = False
    unindexed = vector_indexed = 0
    scalar: list[str] = []
    for idx in table.list_indices():
        if idx.index_type == "FTS":
            fts = True
        elif "vector" in idx.columns:
            vector = True
            vector_indexed = int(getattr(idx, "num_indexed_rows", 0) or 0)
            if not vector_indexed:  # PQ needs a few hundred rows to train; below that the index stays empty
                continue
        else:
            scalar.extend(idx.columns)
            continue
        unindexed = max(unindexed, int(getattr(idx, "num_unindexed_rows", 0) or 0))
    return IndexState(rows=rows, fts=fts, vector=vector, unindexed=unindexed, scalar=scalar,
                      vector_indexed=vector_indexed)


def small_fragments(table: Any) -> int:
    """How many of the table's fragments compaction would merge."""
    return int(table.stats()["fragment_stats"]["num_small_fragments"])


def drop_old_versions(dataset: Any, policy: IndexPolicy) -> int:
    """Delete the versions of a Lance dataset past both of the policy's limits; returns how many went."""
    return int(dataset.cleanup_old_versions(older_than=timedelta(seconds=policy.keep_versions_for_s),
                                            retain_versions=policy.keep_versions).old_versions)


def compaction_target(fragment_rows: Sequence[int], tiers: Sequence[int], fan_in: int) -> int | None:
    """The tier a compaction pass should merge the fragments of ``fragment_rows`` up to (None: nothing to do).

    Fragments below the first tier are merged as soon as there are two. A fragment belongs to tier
    ``i`` when it holds at least ``tiers[i]`` rows but fewer than the next tier; more than ``fan_in``
    of them are merged up into the next tier. The highest tier that qualifies wins (Lance merges
    every fragment below the target).
    """
    target = tiers[0] if sum(1 for rows in fragment_rows if rows < tiers[0]) > 1 else None
    for lower, upper in zip(tiers, tiers[1:]):
        if sum(1 for rows in fragment_rows if lower <= rows < upper) > fan_in:
            target = upper
    return target


def is_commit_conflict(exc: BaseException) -> bool:
    """Whether ``exc`` is Lance refusing a commit because another writer committed first."""
    text = str(exc).lower()
    return "conflict" in text or "retryable" in text or "was modified" in text


#: index and metadata cache of the datasets maintenance opens (one session for the process)
MAINTENANCE_CACHE_BYTES = 4 * 1024 * 1024
_session: Any = None
_session_lock = threading.Lock()


def _maintenance_session() -> Any:
    global _session
    with _session_lock:
        if _session is None:
            import lance  # pylance's native library loads only once a table is maintained

            _session = lance.Session(index_cache_size_bytes=MAINTENANCE_CACHE_BYTES,
                                     metadata_cache_size_bytes=MAINTENANCE_CACHE_BYTES)
        return _session


def maintain_table(table: Any, policy: IndexPolicy, full: bool = False) -> int | None:
    """Compact ``table`` by the policy's tiers (``full``: everything under Lance's target, as
    ``optimize()`` does), fold new rows into its indexes and delete old versions (:func:`drop_old_versions`).

    Returns the tier compacted up to (None when no compaction was needed). Raises what Lance raises;
    :func:`is_commit_conflict` tells a concurrent writer's commit apart.
    """
    dataset = table.to_lance(session=_maintenance_session())
    tiers = policy.compaction_tiers
    target = tiers[-1] if full else compaction_target(
        [fragment.metadata.physical_rows for fragment in dataset.get_fragments()], tiers, policy.compaction_fan_in)
    if target is not None:  # commits, and moves ``dataset`` to the compacted version
        dataset.optimize.compact_files(target_rows_per_fragment=target)
    dataset.optimize.optimize_indices()
    drop_old_versions(dataset, policy)
    return target


SCALAR_INDEXES: tuple[tuple[str, type], ...] = (("id", BTree), ("user_id", Bitmap), ("camera_id", Bitmap),
                                                ("wall_start", BTree))


def _committed(name: str, action: Callable[[], object], lock: threading.Lock) -> bool:
    """Run an index/compaction commit; False when a concurrent write committed first (writers always
    win; the next pass retries)."""
    with lock:
        try:
            action()
        except (RuntimeError, OSError) as exc:
            if not is_commit_conflict(exc):
                raise
            logger.info("index maintenance of %s yielded to a concurrent write; retrying later", name)
            return False
    return True


@dataclass
class _Pending:
    since: float | None = None
    trained_rows: int = 0
    writes: int = 0  # since the table was last compacted
    cleaned: int = 0  # ``writes`` when its old versions were last deleted


@dataclass
class IndexMaintainer:
    """Builds and refreshes the indexes of ``tables()`` on a background thread.

    ``tables`` returns ``{name: lancedb table}`` for every table it keeps compact; those in ``searchable``
    also get the full-text and vector indexes. ``lock`` is held around each ``optimize()`` so the
    store's own synchronous optimise never runs concurrently with it.
    """

    tables: Callable[[], dict[str, Any]]
    searchable: frozenset[str] = frozenset()
    policy: IndexPolicy = field(default_factory=IndexPolicy)
    lock: threading.Lock = field(default_factory=threading.Lock)
    _wake: threading.Event = field(default_factory=threading.Event)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _pending: dict[str, _Pending] = field(default_factory=dict)
    _pass: threading.Lock = field(default_factory=threading.Lock)
    builds: int = 0
    optimizes: int = 0
    passes: int = 0
    _passed: threading.Condition = field(default_factory=threading.Condition)

    def start(self) -> None:
        """Start the maintainer thread (idempotent)."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="memory-index", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Ask the thread to finish its current step and wait for it."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                logger.warning("index maintainer still busy after %.0f s; leaving it to finish", timeout)
        self._thread = None

    def poke(self, table: str) -> None:
        """Note that ``table`` was written (never blocks)."""
        pending = self._pending.setdefault(table, _Pending())
        if pending.since is None:
            pending.since = time.monotonic()
        pending.writes += 1
        self._wake.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.policy.check_every_s)
            self._wake.clear()
            if self._stop.is_set():
                break
            try:
                self.run_once()
            except Exception:  # the worker's top loop: log and keep maintaining
                logger.exception("index maintenance pass failed")
            # at most one pass per interval, however often writers poke: maintenance stays a small,
            # steady share of the CPU next to ingestion
            self._stop.wait(self.policy.check_every_s)

    def run_once(self, force: bool = False) -> dict[str, IndexState]:
        """One pass over every table: build, retrain or refresh what the policy asks for.

        ``force`` folds every unindexed row in now (used by benchmarks and by ``close``). Passes never overlap.
        """
        with self._pass:
            states = self._run_once(force)
        with self._passed:
            self.passes += 1
            self._passed.notify_all()
        return states

    def wait_for_pass(self, timeout: float) -> bool:
        """Wait until a pass that started after this call has finished; False on timeout."""
        with self._passed:
            target = self.passes + 2  # the pass running now may have started before the call
            self._wake.set()
            return self._passed.wait_for(lambda: self.passes >= target, timeout)

    def _run_once(self, force: bool) -> dict[str, IndexState]:
        states: dict[str, IndexState] = {}
        now = time.monotonic()
        for name, table in self.tables().items():
            if self._stop.is_set() and not force:
                break
            pending = self._pending.setdefault(name, _Pending())
            state = self._bring_up_to_date(name, table, pending, force, now)
            if state is not None:
                states[name] = state
            # a compaction above deleted old versions and reset the count; between compactions:
            if pending.writes - pending.cleaned >= self.policy.cleanup_every:
                pending.cleaned = pending.writes
                try:  # deleting versions commits nothing, so no writer can refuse it
                    drop_old_versions(table.to_lance(session=_maintenance_session()), self.policy)
                except (RuntimeError, OSError) as exc:  # another process cleaning up the same files
                    logger.info("old versions of %s left for the next pass: %s", name, exc)
        return states

    def _bring_up_to_date(self, name: str, table: Any, pending: _Pending, force: bool,
                          now: float) -> IndexState | None:
        """Build, retrain or refresh one table's indexes as the policy asks; None when it was left alone."""
        if pending.since is None and not force:
            return None  # not written since it was last brought up to date
        state = table_index_state(table)
        search = name in self.searchable
        if search and not state.fts:
            ensure_fts(table)
        if state.rows >= self.policy.scalar_min_rows:
            names = set(table.schema.names)
            for column, kind in SCALAR_INDEXES:
                if column in names and column not in state.scalar and _committed(
                        name, lambda: table.create_index(column, config=kind(), replace=True), self.lock):
                    logger.info("%s index on %s.%s built", kind.__name__, name, column)
        grown = pending.trained_rows and state.rows >= self.policy.retrain_growth * pending.trained_rows
        if search and state.rows >= self.policy.vector_min_rows and (not state.vector or grown):
            t0 = time.perf_counter()
            if not _committed(name, lambda: table.create_index("vector", config=vector_config(state.rows),
                                                               replace=True), self.lock):
                return None
            pending.trained_rows = state.rows
            self.builds += 1
            logger.info("vector index of %s built over %d rows in %.1f s", name, state.rows,
                        time.perf_counter() - t0)
            state = table_index_state(table)
        elif state.vector and not pending.trained_rows:
            pending.trained_rows = state.rows
        overdue = pending.since is not None and (now - pending.since >= self.policy.interval_s
                                                 or pending.writes >= self.policy.compact_every)
        # tables without indexes still gather one fragment per write: compact them on the same schedule
        stale = state.unindexed if search else (pending.since is not None and (force or overdue))
        if force and not stale:  # a forced pass also leaves the table compact (row reads touch every fragment)
            stale = small_fragments(table) > 1
        if stale and (force or not search or state.unindexed >= self.policy.unindexed_max or overdue):
            if not _committed(name, lambda: maintain_table(table, self.policy, full=force), self.lock):
                return None
            self.optimizes += 1
            pending.since = None
            pending.writes = pending.cleaned = 0
            state = table_index_state(table)
        elif not state.unindexed and (search or force):
            pending.since = None
        state.vector_trained_rows = pending.trained_rows
        return state
