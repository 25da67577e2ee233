"""The memory store: one class over an embedded (or object-store) LanceDB database.

:class:`MemoryStore` is the one public façade: this module holds its connections, lifecycle and
index maintenance; its writes are :class:`~memory.store.writes.StoreWrites`, its reads
:class:`~memory.store.reads.StoreReads`, and search runs in :mod:`memory.search`.

Design:

* **Typed tables** (``memory/store/schema.py``) created by ordered migrations (``memory/store/migrations.py``);
  a ``meta`` table records the schema version and the embedder that built the vectors. Opening
  with an embedder of another dimension raises :class:`DimensionMismatchError`.
* **Idempotent writes.** Every row has a deterministic id and is written with ``merge_insert``
  on ``(user_id, id)``. :meth:`MemoryStore.write_segment` commits a whole segment (trace,
  observations, entities, gallery slots, key frames) and writes ``ingest_log`` *last*, so a crash
  part-way re-runs that segment and produces the same rows. Gallery slots count for identity only
  once their segment is committed (``memory/identity/galleries.py``), so the re-run decides as the first run did.
* **Search** (``memory/search/retrieval.py``): the query is understood (``memory/search/query.py``: names, times,
  cameras, objects, counts), candidates come from full-text (BM25) and vector search under SQL filters
  (``memory/search/modes.py``), and are ranked with explanations (``memory/search/ranking.py``). The store embeds
  the query with the same embedder as the rows.
* **Indexes** (``memory/search/indexing.py``): an :class:`IndexMaintainer` thread builds the vector index past a
  size, retrains it as the table grows and folds new rows into both indexes, off the write path.
* **Multi-process.** The connection uses ``read_consistency_interval=0`` so that a server and an
  ingest process each see the other's commits.
* Records leave the store as pydantic models or plain dicts without ``vector`` (and without
  ``jpeg`` except through :meth:`MemoryStore.keyframes`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from contextlib import nullcontext
from datetime import timedelta
from pathlib import Path
from typing import Any

import lancedb
import numpy as np
import pyarrow as pa
from lancedb import AsyncConnection, AsyncTable
from lancedb.background_loop import LOOP

from ..embedders import Embedder
from ..errors import DimensionMismatchError, MemoryStoreError
from ..identity.ids import IdAllocator
from ..models import IngestState
from ..search.indexing import (
    IndexMaintainer,
    IndexPolicy,
    ensure_fts,
    is_commit_conflict,
    maintain_table,
    vector_config,
)
from ..search.retrieval import Retriever
from .migrations import MigrationContext, apply_migrations
from .reads import StoreReads
from .schema import META_TABLE, SEARCHABLE, meta_schema, table_schemas
from .writes import StoreWrites

logger = logging.getLogger(__name__)

#: LanceDB index cache bound of a store's search connection: the search indexes of a million traces
#: (IVF_PQ ≈ 29 MB, full-text ≈ 21 MB, scalar ones) fit, so a search does not read and decode evicted
#: index pages again (at 32 MB each IVF_PQ query cost 8 ms of CPU instead of 5).
DEFAULT_CACHE_BYTES = 128 * 1024 * 1024
#: LanceDB index cache bound of a store's main connection (writes, index maintenance, reads other
#: than search). LanceDB caches the index list of every table version it opens there, and every
#: commit is a new version: small entries that only a full cache evicts, so the bound is what a
#: stream's writes add to the heap.
WRITE_INDEX_CACHE_BYTES = 4 * 1024 * 1024
#: LanceDB metadata cache bound of the search connection (at most half of ``cache_bytes``)
METADATA_CACHE_BYTES = 16 * 1024 * 1024
#: ... and of the main connection, whose reads are mostly of the versions it just wrote: each
#: commit's transaction and each new data file's metadata are entries of their own (a process has
#: two such stores, the engine's and the semantic runner's)
WRITE_METADATA_CACHE_BYTES = 4 * 1024 * 1024

#: worker threads of LanceDB's runtime (tokio), unless ``TOKIO_WORKER_THREADS`` is set: its queries are
#: short chains of small tasks, and with a worker per core every hand-over woke an idle worker to
#: steal it (a search: 136 → 101 voluntary context switches, ≈ 2 ms of CPU less at 1M traces); the
#: heavy work of queries and index builds runs on LanceDB's own CPU pool either way
TOKIO_WORKERS = "1"


def optimize_quietly(table: lancedb.table.Table, name: str, policy: IndexPolicy, attempts: int = 3) -> bool:
    """Compact ``table`` by tiers and fold new rows into its indices (:func:`maintain_table`); returns
    whether it ran.

    Another process compacting or writing the same table makes LanceDB refuse the commit; that is
    retried a few times and then left to the next pass (compaction is an optimisation, never
    needed for correctness), logged without a traceback.
    """
    for attempt in range(attempts):
        try:
            maintain_table(table, policy)
            return True
        except Exception as exc:  # Lance raises plain OSError/RuntimeError for commit conflicts
            if not is_commit_conflict(exc):
                logger.exception("optimize of table %s failed", name)
                return False
            time.sleep(0.05 * (attempt + 1))
    logger.info("optimize of table %s skipped: another writer kept committing; the next pass retries", name)
    return False


def _dir_bytes(root: Path) -> int:
    """Bytes of the files under ``root``; files removed while walking (a cleanup pass) are skipped."""
    total = 0
    for folder, _dirs, files in os.walk(root):
        for name in files:
            try:
                total += os.stat(os.path.join(folder, name)).st_size
            except FileNotFoundError:
                continue
    return total


class MemoryStore(StoreWrites, StoreReads):
    """Long-term memory of one user over LanceDB. See the module docstring for the design."""

    def __init__(self, uri: str, embedder: Embedder, user_id: str = "default",
                 cache_bytes: int = DEFAULT_CACHE_BYTES, auto_index: bool = True,
                 index_policy: IndexPolicy | None = None, storage_options: dict[str, str] | None = None,
                 maintain: bool = True) -> None:
        """``auto_index`` runs an :class:`~memory.search.indexing.IndexMaintainer` thread while the store is open.

        ``storage_options`` reach LanceDB's object store (``s3://`` endpoint, region, credentials).
        ``maintain=False`` never compacts or indexes: for one of many writers of a store whose
        maintenance another process runs (a cluster's source workers; see ``plugin/cluster.py``).
        """
        self.uri = str(uri)
        self.storage_options = dict(storage_options or {})
        self.maintain = maintain
        self.embedder = embedder
        self.user_id = user_id
        self.cache_bytes = cache_bytes
        self._db: lancedb.DBConnection | None = None
        self._tables: dict[str, lancedb.table.Table] = {}
        self._search_db: AsyncConnection | None = None  # opened by the first search
        self._search_tables: dict[str, AsyncTable] = {}
        self._search_lock = threading.Lock()
        self._writes_since_optimize = 0
        self._dirty: set[str] = set()
        self._schemas: dict[str, pa.Schema] = {}
        #: per source: the resume record this process wrote last (the owner of a store's captures
        #: is its only writer of ingest_log), and the lowest segment index no earlier run can have rows for
        self._states: dict[str, IngestState] = {}
        self._fresh_from: dict[str, int] = {}
        #: observation rows per entity as of version ``_seen_version`` of the observations table (see _sightings)
        self._seen: dict[str, int] = {}
        self._seen_version: int | None = None
        self.auto_index = auto_index and maintain
        self.index_policy = index_policy or IndexPolicy()
        self._maintainer: IndexMaintainer | None = None
        self._retriever: Retriever | None = None
        self._embedded: OrderedDict[str, np.ndarray] = OrderedDict()
        self._embed_lock = threading.Lock()

    # ------------------------------------------------------------------ lifecycle

    def open(self) -> MemoryStore:
        """Connect, create missing tables, check the embedding dimension, apply migrations."""
        if self._db is not None:
            return self
        if "://" not in self.uri:
            Path(self.uri).expanduser().mkdir(parents=True, exist_ok=True)
        # read when LanceDB's runtime starts (the first connection of the process)
        os.environ.setdefault("TOKIO_WORKER_THREADS", TOKIO_WORKERS)
        # Bounded caches: every write makes a new table version, and LanceDB's default caches keep
        # their metadata and index pages without a practical limit, so a long stream's memory grew
        # with its length. Capped, memory stays flat once the caches are full; the big index cache
        # searches want is on a connection of their own, which sees new versions only when it searches.
        db = self._connect(min(self.cache_bytes, WRITE_INDEX_CACHE_BYTES), WRITE_METADATA_CACHE_BYTES)
        existing = set(db.list_tables().tables)
        meta = db.create_table(META_TABLE, schema=meta_schema(), exist_ok=True)
        values = {r["key"]: r["value"] for r in meta.search().limit(None).to_list()}
        self._check_dim(db, existing, values)
        self._db = db

        def record(version: int) -> None:
            self._set_meta(meta, {"schema_version": str(version)})

        version = apply_migrations(MigrationContext(db, self.embedder.dim), int(values.get("schema_version", 0)),
                                   record)
        if "embedding_dim" not in values:
            self._set_meta(meta, {"embedding_dim": str(self.embedder.dim), "embedding_name": self.embedder.name})
        elif values.get("embedding_name") != self.embedder.name:
            logger.warning("memory store at %s was embedded with %r, now opened with %r (same %d-d); "
                           "search quality suffers until it is re-embedded", self.uri,
                           values.get("embedding_name"), self.embedder.name, self.embedder.dim)
        self._tables = {name: db.open_table(name) for name in table_schemas(self.embedder.dim)}
        self._ids = IdAllocator(self._tables["id_alloc"], self.user_id, seed=self._highest_number,
                                written=lambda: self._written("id_alloc"))
        for name in SEARCHABLE:
            ensure_fts(self._tables[name])
        if self.auto_index:
            self._maintainer = IndexMaintainer(lambda: dict(self._tables), policy=self.index_policy,
                                               searchable=frozenset(SEARCHABLE))
            for name in SEARCHABLE:  # indexes another process's writes left unbuilt are caught up
                self._maintainer.poke(name)
            self._maintainer.start()
        logger.info("opened memory store %s (schema v%d, %s %d-d, user %s)", self.uri, version,
                    self.embedder.name, self.embedder.dim, self.user_id)
        return self

    def _session(self, index_cache_bytes: int, metadata_cache_bytes: int) -> lancedb.Session:
        return lancedb.Session(index_cache_size_bytes=index_cache_bytes,
                               metadata_cache_size_bytes=min(self.cache_bytes // 2, metadata_cache_bytes))

    def _connect(self, index_cache_bytes: int, metadata_cache_bytes: int) -> lancedb.DBConnection:
        return lancedb.connect(self.uri, read_consistency_interval=timedelta(seconds=0),
                               session=self._session(index_cache_bytes, metadata_cache_bytes),
                               storage_options=self.storage_options or None)

    def _connect_async(self, index_cache_bytes: int, metadata_cache_bytes: int) -> AsyncConnection:
        """An async connection (LanceDB's public async API) on lancedb's background event loop."""
        uri = self.uri if "://" in self.uri else str(Path(self.uri).expanduser().absolute())
        return LOOP.run(lancedb.connect_async(uri, read_consistency_interval=timedelta(seconds=0),
                                              session=self._session(index_cache_bytes, metadata_cache_bytes),
                                              storage_options=self.storage_options or None))

    def close(self) -> None:
        """Fold pending writes into the indices and drop the connection."""
        if self._db is None:
            return
        if self._maintainer is not None:
            self._maintainer.stop()
            self._maintainer = None
        if self._retriever is not None:
            self._retriever.close()
            self._retriever = None
        if self._dirty and self.maintain:
            self.optimize()
        self._tables = {}
        self._db = None
        with self._search_lock:
            self._search_tables, self._search_db = {}, None

    def __enter__(self) -> MemoryStore:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_dim(self, db: lancedb.DBConnection, existing: set[str], values: dict[str, str]) -> None:
        stored: int | None = int(values["embedding_dim"]) if "embedding_dim" in values else None
        if stored is None and "traces" in existing:
            stored = db.open_table("traces").schema.field("vector").type.list_size
        if stored is not None and stored != self.embedder.dim:
            raise DimensionMismatchError(stored, self.embedder.dim, self.embedder.name, values.get("embedding_name"))

    @staticmethod
    def _set_meta(meta: lancedb.table.Table, values: dict[str, str]) -> None:
        now = time.time()
        rows = pa.Table.from_pylist([{"key": k, "value": v, "updated_at": now} for k, v in values.items()],
                                    schema=meta_schema())
        meta.merge_insert("key").when_matched_update_all().when_not_matched_insert_all().execute(rows)

    def _table(self, name: str) -> lancedb.table.Table:
        if self._db is None:
            raise MemoryStoreError("the memory store is not open; call MemoryStore.open() or use `with store:`")
        return self._tables[name]

    def _search_table(self, name: str) -> AsyncTable:
        """Table ``name`` on the async search connection (its own index cache of ``cache_bytes``; same
        read consistency: a search sees every committed write). Searches query it on lancedb's
        background event loop (:mod:`memory.search.retrieval`)."""
        self._table(name)  # the store is open and knows the table
        with self._search_lock:
            table = self._search_tables.get(name)
            if table is None:
                if self._search_db is None:
                    self._search_db = self._connect_async(self.cache_bytes, METADATA_CACHE_BYTES)
                table = self._search_tables[name] = LOOP.run(self._search_db.open_table(name))
            return table

    def optimize(self) -> None:
        """Compact the tables written since the last pass and fold new rows into their indices."""
        for name in sorted(self._dirty):
            with self._maintainer.lock if self._maintainer is not None else nullcontext():
                optimize_quietly(self._table(name), name, self.index_policy)
        self._dirty.clear()
        self._writes_since_optimize = 0

    def storage_status(self) -> dict[str, Any]:
        """Size on disk (MiB; ``None`` for object-store URIs) and live version count of every table."""
        versions: dict[str, int] = {}
        for name, table in sorted(self._tables.items()):
            try:
                versions[name] = len(table.list_versions())
            except Exception:  # a table another process is compacting right now; report it next time
                logger.debug("version count of %s unavailable", name, exc_info=True)
        size = round(_dir_bytes(Path(self.uri).expanduser()) / 2**20, 1) if "://" not in self.uri else None
        return {"size_mb": size, "versions": versions, "total_versions": sum(versions.values())}

    # ------------------------------------------------------------------ indexes

    def create_vector_index(self, level: str = "traces", num_partitions: int | None = None,
                            num_sub_vectors: int | None = None) -> None:
        """Build the IVF_PQ cosine index on ``level`` now (the maintainer does this on its own past a size)."""
        table = self._table(level)
        config = vector_config(table.count_rows())
        if num_partitions is not None:
            config.num_partitions = num_partitions
        if num_sub_vectors is not None:
            config.num_sub_vectors = num_sub_vectors
        table.create_index("vector", config=config, replace=True)

    def maintain_indexes(self, force: bool = True) -> dict[str, Any]:
        """Run one index-maintenance pass now (build, retrain, fold in new rows); returns each table's state."""
        maintainer = self._maintainer or IndexMaintainer(lambda: dict(self._tables), policy=self.index_policy,
                                                         searchable=frozenset(SEARCHABLE))
        for name in self._dirty:
            maintainer.poke(name)
        states = maintainer.run_once(force=force)
        self._dirty.clear()
        return states
