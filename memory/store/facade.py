"""The memory store: one class over an embedded (or object-store) LanceDB database.

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
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from contextlib import nullcontext
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import lancedb
import numpy as np
import pyarrow as pa

from ..search.cards import CARD_COLUMN, CARD_COLUMNS, add_cards, card_json
from ..embedders import Embedder
from ..identity.galleries import GALLERY_TABLES, restored, stamped, visible
from ..errors import DimensionMismatchError, MemoryStoreError, NotFoundError
from ..identity.ids import IdAllocator
from ..search.indexing import IndexMaintainer, IndexPolicy, ensure_fts, is_commit_conflict, maintain_table, vector_config
from .migrations import MigrationContext, apply_migrations
from ..models import (
    ID_PREFIXES,
    Chapter,
    Entity,
    EntityKind,
    Fact,
    GalleryBody,
    GalleryFace,
    GalleryObject,
    GalleryVoice,
    GetResult,
    IngestState,
    Keyframe,
    Level,
    Observation,
    SearchHit,
    SegmentWrite,
    Trace,
    stable_id,
)
from ..search.retrieval import Retriever, SearchOutcome
from .schema import META_TABLE, SEARCHABLE, meta_schema, table_schemas
from ..search.modes import SearchMode, sql_in, sql_literal

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

#: texts whose vectors the store keeps for reuse (entity texts repeat segment after segment)
EMBED_CACHE = 2048
#: entities whose observation counts the store keeps between segments
SEEN_ENTITIES = 4096
#: write operations between two ``optimize()`` passes over the tables written.
OPTIMIZE_EVERY = 50

_ENTITY_HINT = "call entity_list or memory_search to find entity ids"
_HIDDEN = ("vector", "user_id", CARD_COLUMN)


_SPEAKER = re.compile(r"\b(?:person|object|voice)_\d+: ")


def trace_text(trace: Trace) -> str:
    """The searchable text of a trace: summary, quotes, transcript, OCR and objects.

    Each piece of speech appears once (the summary already quotes the segment's words, speaker-labelled):
    repeats cost embedding time and, past the meaning model's 256 tokens, push the end of a long
    sentence out of what it reads.
    """
    parts = [trace.summary]
    said = _SPEAKER.sub("", trace.summary)
    for text in [*trace.quotes, trace.transcript]:
        plain = _SPEAKER.sub("", text or "").strip()
        if plain and plain not in said:
            parts.append(f'"{text}"' if text in trace.quotes else text)
            said += "\n" + plain
    if trace.ocr_text:
        parts.append(trace.ocr_text)
    if trace.objects:
        parts.append("objects: " + ", ".join(trace.objects))
    return "\n".join(p for p in parts if p)


def entity_text(entity: Entity) -> str:
    """The searchable text of an entity: id, names and description."""
    names = [n for n in [entity.name, *entity.aliases] if n]
    return " ".join([entity.id, entity.kind, *names, entity.description]).strip()


#: most traces ``get`` returns under a chapter
CHAPTER_CHILDREN = 100


def _model_from_row(model: type, row: dict[str, Any]) -> Any:
    return model.model_validate({k: row[k] for k in model.model_fields if k in row})


def _public(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in _HIDDEN and k != "jpeg" and not k.startswith("_")}


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


class MemoryStore:
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
        self._search_db: lancedb.DBConnection | None = None  # opened by the first search
        self._search_tables: dict[str, lancedb.table.Table] = {}
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

    def _connect(self, index_cache_bytes: int, metadata_cache_bytes: int) -> lancedb.DBConnection:
        session = lancedb.Session(index_cache_size_bytes=index_cache_bytes,
                                  metadata_cache_size_bytes=min(self.cache_bytes // 2, metadata_cache_bytes))
        return lancedb.connect(self.uri, read_consistency_interval=timedelta(seconds=0), session=session,
                               storage_options=self.storage_options or None)

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

    def _search_table(self, name: str) -> lancedb.table.Table:
        """Table ``name`` on the search connection (its own index cache of ``cache_bytes``; same
        read consistency: a search sees every committed write)."""
        self._table(name)  # the store is open and knows the table
        with self._search_lock:
            table = self._search_tables.get(name)
            if table is None:
                if self._search_db is None:
                    self._search_db = self._connect(self.cache_bytes, METADATA_CACHE_BYTES)
                table = self._search_tables[name] = self._search_db.open_table(name)
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

    # ------------------------------------------------------------------ low-level writes

    def _rows(self, name: str, records: Sequence[dict[str, Any]]) -> pa.Table:
        schema = self._schemas.get(name)
        if schema is None:  # fixed once the store is open (migrations run in open()); fetching it costs a round trip
            schema = self._schemas[name] = self._table(name).schema
        rows = [{**r, "user_id": self.user_id} for r in records]
        if name in CARD_COLUMNS and CARD_COLUMN in schema.names:  # the search card, from the row as written
            rows = [{**r, CARD_COLUMN: card_json(name, r)} for r in rows]
        return pa.Table.from_pylist(rows, schema=schema)

    def _upsert(self, name: str, records: Sequence[dict[str, Any]]) -> None:
        if not records:
            return
        table = self._table(name)
        (table.merge_insert(["user_id", "id"]).when_matched_update_all().when_not_matched_insert_all()
         .execute(self._rows(name, records)))
        self._written(name)

    def _append(self, name: str, records: Sequence[dict[str, Any]]) -> int | None:
        """Append rows; returns the table version committed (None when there was nothing to write)."""
        if not records:
            return None
        version = int(self._table(name).add(self._rows(name, records)).version)
        self._written(name)
        return version

    def _written(self, name: str) -> None:
        self._dirty.add(name)
        if name == "entities" and self._retriever is not None:
            self._retriever.invalidate()  # renames and merges reach the next search at once
        if self._maintainer is not None:
            self._maintainer.poke(name)  # compacted and indexed off the write path
            return
        if not self.maintain:
            return
        self._writes_since_optimize += 1
        if self._writes_since_optimize >= OPTIMIZE_EVERY:
            self.optimize()

    def _embed(self, texts: list[str]) -> np.ndarray:
        """Vectors of ``texts``: recent texts from the cache, the rest embedded in batches of similar length.

        A stream writes the same entity texts segment after segment, and a batch is padded to its
        longest text, so one long trace text made every short observation cost as much as it.
        """
        out = np.empty((len(texts), self.embedder.dim), dtype=np.float32)
        missing: dict[str, list[int]] = {}
        with self._embed_lock:
            for i, text in enumerate(texts):
                cached = self._embedded.get(text)
                if cached is None:
                    missing.setdefault(text, []).append(i)
                else:
                    self._embedded.move_to_end(text)
                    out[i] = cached
        fresh = sorted(missing, key=len)
        start = 0
        for end in range(1, len(fresh) + 1):
            if end < len(fresh) and len(fresh[end]) <= 2 * max(len(fresh[start]), 32):
                continue
            batch = fresh[start:end]
            vectors = self.embedder.embed(batch)
            if vectors.shape != (len(batch), self.embedder.dim):
                raise MemoryStoreError(f"embedder {self.embedder.name!r} returned shape {vectors.shape}, "
                                       f"expected ({len(batch)}, {self.embedder.dim})")
            with self._embed_lock:
                for text, vector in zip(batch, vectors):
                    out[missing[text]] = vector
                    self._embedded[text] = vector
                while len(self._embedded) > EMBED_CACHE:
                    self._embedded.popitem(last=False)
            start = end
        return out

    def bulk_append(self, name: str, rows: pa.Table) -> None:
        """Append pre-built Arrow rows (with ``vector``) to table ``name``; for benchmarks and imports."""
        if name in CARD_COLUMNS and CARD_COLUMN in self._table(name).schema.names:
            rows = add_cards(name, rows)
        self._table(name).add(rows)
        self._written(name)

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

    # ------------------------------------------------------------------ plain tables (memory/procedural.py)

    def upsert_rows(self, name: str, rows: Sequence[dict[str, Any]]) -> None:
        """Insert or replace rows keyed by ``id`` in a table without vectors (``rules``, ``notifications``…)."""
        if name in SEARCHABLE:
            raise ValueError(f"table {name!r} is searchable; write it through its typed method")
        self._upsert(name, rows)

    def table_version(self, name: str) -> int:
        """The latest committed version of table ``name`` (changes with every write, from any process)."""
        return int(self._table(name).version)

    def scan_rows(self, name: str, where: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
        """This user's rows of table ``name`` matching the SQL filter ``where`` (``user_id`` excluded)."""
        return [{k: v for k, v in r.items() if k != "user_id"} for r in self._scan(name, where, limit=limit)]

    def delete_rows(self, name: str, where: str) -> int:
        """Delete this user's rows of table ``name`` matching ``where``; returns how many were deleted."""
        table = self._table(name)
        where = self._user_where(where)
        count = table.count_rows(where)
        if count:
            table.delete(where)
            self._written(name)
        return count

    # ------------------------------------------------------------------ writes

    def write_segment(self, seg: SegmentWrite) -> None:
        """Commit one segment idempotently; ``ingest_log`` is written last (the resume point).

        One commit per table the segment has rows for. Rows of an earlier run of the same segment
        that this run no longer produces are deleted; a segment past anything an earlier run can
        have written (the resume point + 1, the one that might have been in flight) skips that check.
        """
        previous = self._states.get(seg.source) or self.ingest_state(seg.source)
        if seg.source not in self._fresh_from:
            self._fresh_from[seg.source] = (previous.last_segment_index + 2) if previous is not None else 0
        rewrite = seg.segment_index < self._fresh_from[seg.source]
        # From here on this index may have rows (a failed write retried in this process is a rewrite).
        self._fresh_from[seg.source] = max(self._fresh_from[seg.source], seg.segment_index + 1)
        texts = [trace_text(seg.trace)] + [o.text for o in seg.observations] + [entity_text(e) for e in seg.entities]
        vectors = self._embed(texts)
        n_obs = len(seg.observations)
        trace_row = {**seg.trace.model_dump(), "text": texts[0], "vector": vectors[0]}
        obs_rows = [{**o.model_dump(), "vector": vectors[1 + i]} for i, o in enumerate(seg.observations)]
        # A fresh segment's rows cannot exist yet: appending costs the same at any table size, where
        # an upsert joins against every stored id (the cost of a segment grew with the stream).
        put = self._upsert if rewrite else self._append
        put("traces", [trace_row])
        counted = False
        if rewrite:
            self._upsert("observations", obs_rows)
            self._delete_stale("observations", seg, [o.id for o in seg.observations])
        elif obs_rows:
            counted = self._count_appended(obs_rows, self._append("observations", obs_rows))
        # Sightings are counted from the observations just written, not carried forward by the
        # caller, so re-running a segment after a crash can never count it twice. The segment's
        # entities leave with the counts written, for the post-commit hooks (semantic memory).
        seg.entities = [e.model_copy(update={"sightings": self._sightings(e.id, counted)}) for e in seg.entities]
        ent_rows = [{**e.model_dump(), "text": texts[1 + n_obs + i], "vector": vectors[1 + n_obs + i]}
                    for i, e in enumerate(seg.entities)]
        self._upsert("entities", ent_rows)
        if not seg.enrichment:  # the second write of a live_latency segment never touches identity
            for name, slots in (("gallery_face", seg.gallery_faces), ("gallery_body", seg.gallery_bodies),
                                ("gallery_voice", seg.gallery_voices), ("gallery_object", seg.gallery_objects)):
                self._write_slots(name, seg, [s.model_dump() for s in slots], rewrite)
        put("identity_decisions", [d.model_dump() for d in seg.decisions])  # ids name the segment
        put("keyframes", [k.model_dump() for k in seg.keyframes])
        if rewrite:
            self._delete_stale("keyframes", seg, [k.id for k in seg.keyframes])

        last = seg.segment_index
        done = False
        if previous is not None and previous.last_segment_index > last:
            last, done = previous.last_segment_index, previous.done
        state = IngestState(source=seg.source, camera_id=seg.camera_id, last_segment_index=last,
                            last_t_end=max(seg.trace.t_end, previous.last_t_end if previous else 0.0),
                            done=done, source_size=seg.source_size, source_mtime=seg.source_mtime,
                            updated_at=time.time())
        self._write_state(state)
        logger.debug("wrote segment %s#%d (%d observations, %d keyframes)", seg.source, seg.segment_index,
                     n_obs, len(seg.keyframes))

    def _write_slots(self, name: str, seg: SegmentWrite, rows: list[dict[str, Any]], rewrite: bool) -> None:
        """Write a segment's gallery slots, naming the segment and keeping what each replaces
        (``memory/identity/galleries.py``); a re-run restores the slots its first attempt wrote and it no longer does."""
        if rows:
            stored = {r["id"]: r for r in self._scan(name, f"id IN {sql_in([r['id'] for r in rows])}")}
            self._upsert(name, stamped(rows, stored, seg.source, seg.segment_index, self._commit_points))
        if rewrite:
            where = f"source = {sql_literal(seg.source)} AND segment_index = {int(seg.segment_index)}"
            if rows:
                where += f" AND id NOT IN {sql_in([r['id'] for r in rows])}"
            self._restore_slots(name, self._scan(name, where))

    def _restore_slots(self, name: str, rows: list[dict[str, Any]]) -> None:
        """Put gallery slots back as they were before their (uncommitted) segment wrote them."""
        self._replace_slots(name, rows, [restored(r) for r in rows])

    def _replace_slots(self, name: str, rows: list[dict[str, Any]], new: list[dict[str, Any] | None]) -> None:
        """Write ``new[i]`` in place of ``rows[i]``; a ``None`` deletes that row."""
        self._upsert(name, [r for r in new if r is not None])
        gone = [r["id"] for r, n in zip(rows, new) if n is None]
        if gone:
            self.delete_rows(name, f"id IN {sql_in(gone)}")

    def _commit_points(self) -> dict[str, int]:
        """``source -> last committed segment index`` from the ingest log (every writer's)."""
        return {r["source"]: int(r["last_segment_index"])
                for r in self._scan("ingest_log", columns=["source", "last_segment_index"])}

    def _slots(self, name: str) -> list[dict[str, Any]]:
        """The gallery rows of ``name`` as identity sees them: segments' slots once committed."""
        rows = self._scan(name)
        if not any(r.get("source") for r in rows):
            return rows
        points = self._commit_points()
        return [v for r in rows if (v := visible(r, points)) is not None]

    def _count_appended(self, rows: Sequence[dict[str, Any]], version: int | None) -> bool:
        """Add appended observation rows to the per-entity counts; False when the counts were dropped.

        The counts stay valid only while this process made every commit to the table since they
        were taken (the version advanced by exactly this append); any other commit (another writer,
        an identity edit, a compaction) drops them and they are counted again.
        """
        if version is None or self._seen_version is None or version != self._seen_version + 1 \
                or len(self._seen) > SEEN_ENTITIES:
            self._seen.clear()
        else:
            for row in rows:
                if row["entity_id"] in self._seen:
                    self._seen[row["entity_id"]] += 1
        self._seen_version = version
        return version is not None

    def _sightings(self, entity_id: str, counted: bool = False) -> int:
        """Segments in which ``entity_id`` has an observation.

        ``counted``: this segment's observations were just appended and added to the kept counts,
        which then stand in for a scan of the table (whose cost grows with the stream).
        """
        if counted and entity_id in self._seen:
            return self._seen[entity_id]
        n = self._table("observations").count_rows(self._user_where(f"entity_id = {sql_literal(entity_id)}"))
        if counted:
            self._seen[entity_id] = n
        return n

    def _delete_stale(self, name: str, seg: SegmentWrite, keep: list[str]) -> None:
        """Delete rows of this segment that a re-run no longer produces."""
        where = (f"user_id = {sql_literal(self.user_id)} AND source = {sql_literal(seg.source)} "
                 f"AND segment_index = {int(seg.segment_index)}")
        if keep:
            where += f" AND id NOT IN {sql_in(keep)}"
        table = self._table(name)
        if table.count_rows(where):
            table.delete(where)
            self._written(name)

    def _write_state(self, state: IngestState) -> None:
        """Write the resume record of ``state.source`` (one commit).

        A record this process has written before is updated in place: an update of one row costs
        about a third less CPU than a merge-insert, which joins the new row against the table.
        Should the row be gone (another process reset the source), it is inserted.
        """
        row_id = stable_id("ing_", self.user_id, state.source)
        known = state.source in self._states
        self._states[state.source] = state
        if known:
            where = f"user_id = {sql_literal(self.user_id)} AND id = {sql_literal(row_id)}"
            if self._table("ingest_log").update(where=where, values=state.model_dump()).rows_updated:
                self._written("ingest_log")
                return
        self._upsert("ingest_log", [{**state.model_dump(), "id": row_id}])

    def upsert_entity(self, entity: Entity) -> None:
        """Insert or replace one entity (the caller sends the full updated record)."""
        text = entity_text(entity)
        self._upsert("entities", [{**entity.model_dump(), "text": text, "vector": self._embed([text])[0]}])

    def upsert_chapters(self, chapters: Sequence[Chapter]) -> None:
        """Insert or replace chapters (level ``schemas``)."""
        vectors = self._embed([c.text for c in chapters]) if chapters else []
        self._upsert("schemas", [{**c.model_dump(), "vector": v} for c, v in zip(chapters, vectors)])

    def facts(self, entity_id: str | None = None, ids: Sequence[str] | None = None,
              include_superseded: bool = False, limit: int | None = None) -> list[Fact]:
        """Facts about ``entity_id`` and/or with ``ids``, most important first (active only by default)."""
        clauses = [] if include_superseded else ["(status IS NULL OR status = 'active')"]
        if entity_id is not None:
            clauses.append(f"array_has_any(entity_ids, [{sql_literal(entity_id)}])")
        if ids is not None:
            if not ids:
                return []
            clauses.append(f"id IN {sql_in(ids)}")
        rows = self._scan("facts", " AND ".join(clauses) or None, columns=list(Fact.model_fields))
        facts = [Fact.model_validate({k: v for k, v in r.items() if v is not None}) for r in rows]
        facts.sort(key=lambda f: (f.status != "active", -f.importance, f.created_at, f.id))
        return facts[:limit] if limit is not None else facts

    def traces_by_id(self, ids: Sequence[str]) -> list[Trace]:
        """Traces with ``ids``, in time order; unknown ids are skipped."""
        rows = self._rows_by_id("traces", list(ids), columns=list(Trace.model_fields))
        return [_model_from_row(Trace, r) for r in sorted(rows.values(), key=lambda r: (r["t_start"], r["id"]))]

    def segment_traces(self, keys: Sequence[tuple[str, int]]) -> dict[tuple[str, int], Trace]:
        """Traces of ``(source, segment_index)`` pairs, e.g. those behind an entity's observations."""
        by_source: dict[str, set[int]] = {}
        for source, index in keys:
            by_source.setdefault(source, set()).add(int(index))
        if not by_source:
            return {}
        where = " OR ".join(f"(source = {sql_literal(src)} AND segment_index IN ({', '.join(map(str, sorted(ix)))}))"
                            for src, ix in by_source.items())
        rows = self._scan("traces", where, columns=list(Trace.model_fields))
        return {(r["source"], int(r["segment_index"])): _model_from_row(Trace, r) for r in rows}

    def traces_after(self, source: str, camera: str, after_t: float, limit: int) -> list[Trace]:
        """Up to ``limit`` traces of ``source``/``camera`` starting after media second ``after_t``, oldest first."""
        where = (f"source = {sql_literal(source)} AND camera_id = {sql_literal(camera)} "
                 f"AND t_start > {float(after_t)!r}")
        rows = sorted(self._scan("traces", where, columns=list(Trace.model_fields)), key=lambda r: (r["t_start"], r["id"]))
        return [_model_from_row(Trace, r) for r in rows[:limit]]

    def recent_traces(self, camera: str, limit: int) -> list[Trace]:
        """The latest ``limit`` traces (by wall time) of ``camera``, oldest first."""
        keys = self._scan("traces", f"camera_id = {sql_literal(camera)}", columns=["id", "wall_start", "t_start"])
        keys.sort(key=lambda r: (r["wall_start"], r["t_start"], r["id"]))
        traces = self.traces_by_id([r["id"] for r in keys[-limit:]]) if limit > 0 else []
        return sorted(traces, key=lambda t: (t.wall_start, t.t_start, t.id))

    def count_traces(self, camera: str | None = None) -> int:
        """How many traces this user has (of ``camera``, when given)."""
        where = f"camera_id = {sql_literal(camera)}" if camera is not None else None
        return self._table("traces").count_rows(self._user_where(where))

    def upsert_facts(self, facts: Sequence[Fact]) -> None:
        """Insert or replace facts (level ``facts``)."""
        vectors = self._embed([f.text for f in facts]) if facts else []
        self._upsert("facts", [{**f.model_dump(), "vector": v} for f, v in zip(facts, vectors)])

    def add_gallery_faces(self, faces: Sequence[GalleryFace]) -> None:
        """Insert or replace face-gallery slots."""
        self._upsert("gallery_face", [f.model_dump() for f in faces])

    def face_gallery(self) -> list[GalleryFace]:
        """All face-gallery slots of this user (for identity matching)."""
        return [_model_from_row(GalleryFace, r) for r in self._slots("gallery_face")]

    def body_gallery(self) -> list[GalleryBody]:
        """All body-gallery slots of this user (for re-identification)."""
        return [_model_from_row(GalleryBody, r) for r in self._slots("gallery_body")]

    def voice_gallery(self) -> list[GalleryVoice]:
        """All voice-gallery slots of this user (speaker identification)."""
        return [_model_from_row(GalleryVoice, r) for r in self._slots("gallery_voice")]

    def object_gallery(self) -> list[GalleryObject]:
        """All object-appearance slots of this user (object re-identification)."""
        return [_model_from_row(GalleryObject, r) for r in self._slots("gallery_object")]

    def upsert_searchable(self, name: str, rows: Sequence[dict[str, Any]]) -> None:
        """Insert or replace full rows of a searchable table, re-embedding their ``text`` (identity edits)."""
        if name not in SEARCHABLE:
            raise ValueError(f"table {name!r} is not searchable; use upsert_rows")
        rows = [{k: v for k, v in r.items() if k not in ("vector", "user_id")} for r in rows]
        vectors = self._embed([r["text"] for r in rows]) if rows else []
        self._upsert(name, [{**r, "vector": v} for r, v in zip(rows, vectors)])

    def mark_source_done(self, source: str, camera_id: str = "") -> None:
        """Record that ``source`` was ingested to its end."""
        state = self.ingest_state(source) or IngestState(source=source, camera_id=camera_id)
        self._write_state(state.model_copy(update={"done": True, "updated_at": time.time()}))

    def reset_source(self, source: str) -> None:
        """Delete the traces, observations, key frames and resume point of ``source`` (a changed file).

        Entities, their gallery slots, chapters and facts are kept: they outlive one file. The
        slots of its committed segments stop naming the source (they count without its resume
        point); those of a segment that never committed are put back as they were.
        """
        self._states.pop(source, None)
        self._fresh_from.pop(source, None)
        points = self._commit_points()
        for name in GALLERY_TABLES:
            rows = self._scan(name, f"source = {sql_literal(source)}")
            shown = [visible(r, points) for r in rows]
            self._replace_slots(name, rows, [
                None if v is None else
                {**v, **({"source": None, "segment_index": None} if v["source"] == source else {}), "prior": None}
                for v in shown])
        where = f"user_id = {sql_literal(self.user_id)} AND source = {sql_literal(source)}"
        for name in ("traces", "observations", "keyframes", "ingest_log"):
            table = self._table(name)
            if table.count_rows(where):
                table.delete(where)
                self._written(name)
        logger.info("reset source %s", source)

    # ------------------------------------------------------------------ ingest state

    def ingest_state(self, source: str) -> IngestState | None:
        """The resume record of ``source``, or None if it was never written."""
        rows = self._scan("ingest_log", f"source = {sql_literal(source)}", limit=1)
        return _model_from_row(IngestState, rows[0]) if rows else None

    def ingest_sources(self) -> list[IngestState]:
        """Every source in the ingest log (files and live sources), with its camera id."""
        return [_model_from_row(IngestState, r) for r in self._scan("ingest_log")]

    def resume_point(self, source: str) -> int | None:
        """The last committed segment index of ``source``, or None when nothing was committed."""
        state = self.ingest_state(source)
        if state is None or state.last_segment_index < 0:
            return None
        return state.last_segment_index

    # ------------------------------------------------------------------ reads

    def _user_where(self, extra: str | None = None) -> str:
        where = f"user_id = {sql_literal(self.user_id)}"
        return f"{where} AND ({extra})" if extra else where

    def _scan(self, name: str, where: str | None = None, limit: int | None = None,
              columns: list[str] | None = None) -> list[dict[str, Any]]:
        query = self._table(name).search().where(self._user_where(where)).limit(limit)
        if columns is not None:
            query = query.select(columns)
        return query.to_list()

    def _row(self, name: str, item_id: str) -> dict[str, Any] | None:
        rows = self._scan(name, f"id = {sql_literal(item_id)}", limit=1)
        return rows[0] if rows else None

    def search(self, query: str, level: Level | Literal["all"] = "traces", camera: str | None = None,
               entity: str | Sequence[str] | None = None, start: float | None = None, end: float | None = None,
               limit: int = 10, mode: SearchMode | str = "hybrid", offset: int = 0,
               tz: str | None = None, until: float | None = None) -> list[SearchHit]:
        """Search one level (or ``"all"``) and return the hits; see :meth:`find`."""
        return self.find(query, level, camera, entity, start, end, limit, mode, offset, tz, until=until).hits

    def find(self, query: str, level: Level | Literal["all"] = "traces", camera: str | None = None,
             entity: str | Sequence[str] | None = None, start: float | None = None, end: float | None = None,
             limit: int = 10, mode: SearchMode | str = "hybrid", offset: int = 0, tz: str | None = None,
             now: datetime | None = None, until: float | None = None) -> SearchOutcome:
        """Search with query understanding (``memory/search/query.py``) and explained ranking (``memory/search/ranking.py``).

        Names, times (in time zone ``tz``), cameras, object words and people counts in ``query`` become
        filters or score parts; ``camera``/``entity``/``start``/``end`` (media seconds) filter explicitly.
        ``mode`` picks the candidate sources: ``vector``, ``fts`` or both (``hybrid``). Scores are in
        [0, 1] and comparable across levels; ``level="all"`` merges every level by score. ``until``
        keeps only timed rows that *ended* by that media second (see ``memory/search/timecut.py`` for a cut
        over every level).
        """
        mode = SearchMode(mode)
        if level != "all" and level not in SEARCHABLE:
            raise ValueError(f"unknown level {level!r}; use one of {', '.join(SEARCHABLE)} or 'all'")
        levels = list(SEARCHABLE) if level == "all" else [level]
        self._table("traces")  # raises when the store is not open
        if self._retriever is None:
            self._retriever = Retriever(self)
        return self._retriever.search(query, levels, camera, list(entity) if isinstance(entity, (list, tuple))
                                      else entity, start, end, limit, offset, mode, tz=tz, now=now, until=until)

    def get(self, item_id: str, neighbors: int = 2) -> GetResult:
        """Return an item with its ``neighbors`` time-ordered neighbours each side and linked entities.

        Traces and chapters: neighbours are rows of the same source and camera by ``t_start``.
        Observations: that entity's observations by wall time. Facts: facts sharing the first entity.
        Entities: ``after`` holds the entity's latest ``max(neighbors, 1)`` observations, newest first
        (so ``neighbors=0`` still reaches the entity's latest key frames).
        """
        level = next((lv for prefix, lv in ID_PREFIXES.items() if item_id.startswith(prefix)), None)
        row = self._row(level, item_id) if level else None
        if row is None:
            raise NotFoundError(item_id)
        before: list[dict[str, Any]] = []
        after: list[dict[str, Any]] = []
        if level == "entities":
            after = [_public(r) for r in self._latest_observations(item_id, max(neighbors, 1))]
            linked: list[str] = []
        else:
            if level in ("traces", "schemas"):
                where = f"source = {sql_literal(row['source'])} AND camera_id = {sql_literal(row['camera_id'])}"
                before, after = self._neighbours(level, where, row, ("t_start", "id"), neighbors)
            elif level == "observations":
                where = f"entity_id = {sql_literal(row['entity_id'])}"
                before, after = self._neighbours(level, where, row, ("wall_start", "t_start", "id"), neighbors)
            elif level == "facts" and row["entity_ids"]:
                where = f"array_has_any(entity_ids, [{sql_literal(row['entity_ids'][0])}])"
                before, after = self._neighbours(level, where, row, ("created_at", "id"), neighbors)
            linked = [row["entity_id"]] if level == "observations" else list(row.get("entity_ids") or [])
        children: list[dict[str, Any]] = []
        if level == "schemas":  # a chapter walks down to the traces it indexes
            found = self._rows_by_id("traces", list(row.get("trace_ids") or [])[:CHAPTER_CHILDREN])
            children = [_public(r) for r in sorted(found.values(), key=lambda r: (r["t_start"], r["id"]))]
        return GetResult(item=_public(row), level=level, before=[_public(r) for r in before],
                         after=[_public(r) for r in after], entities=self._entities_by_id(linked),
                         children=children)

    def _neighbours(self, level: str, where: str, row: dict[str, Any], order: tuple[str, ...],
                    k: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        if k <= 0:
            return [], []
        keys = self._scan(level, where, columns=list(dict.fromkeys(["id", *order])))
        keys.sort(key=lambda r: tuple(r[c] for c in order))
        pos = next(i for i, r in enumerate(keys) if r["id"] == row["id"])
        wanted_before = [r["id"] for r in keys[max(0, pos - k):pos]]
        wanted_after = [r["id"] for r in keys[pos + 1:pos + 1 + k]]
        fetched = self._rows_by_id(level, wanted_before + wanted_after)
        return [fetched[i] for i in wanted_before if i in fetched], [fetched[i] for i in wanted_after if i in fetched]

    def _rows_by_id(self, level: str, ids: Sequence[str], columns: list[str] | None = None) -> dict[str, dict]:
        if not ids:
            return {}
        return {r["id"]: r for r in self._scan(level, f"id IN {sql_in(ids)}", columns=columns)}

    def _entities_by_id(self, ids: Sequence[str]) -> list[Entity]:
        rows = self._rows_by_id("entities", list(dict.fromkeys(ids)))
        return [_model_from_row(Entity, rows[i]) for i in dict.fromkeys(ids) if i in rows]

    def _latest_observations(self, entity_id: str, limit: int | None) -> list[dict[str, Any]]:
        rows = self._scan("observations", f"entity_id = {sql_literal(entity_id)}")
        rows.sort(key=lambda r: (r["wall_start"], r["t_start"], r["id"]), reverse=True)
        return rows[:limit] if limit is not None else rows

    def keyframes(self, ids: Sequence[str]) -> list[Keyframe]:
        """Key frames (with JPEG bytes) in the order of ``ids``; unknown ids are skipped."""
        rows = self._rows_by_id("keyframes", list(ids))
        return [_model_from_row(Keyframe, rows[i]) for i in ids if i in rows]

    def list_entities(self, kind: EntityKind | None = None, limit: int = 50, offset: int = 0) -> list[Entity]:
        """Entities (not merged into another) ordered by id."""
        where = "merged_into IS NULL" + (f" AND kind = {sql_literal(kind)}" if kind else "")
        cols = [c for c in Entity.model_fields]
        rows = sorted(self._scan("entities", where, columns=cols), key=lambda r: r["id"])
        return [_model_from_row(Entity, r) for r in rows[offset:offset + limit]]

    def count_entities(self, kind: EntityKind | None = None) -> int:
        """How many entities (not merged into another) ``list_entities`` can page through."""
        where = "merged_into IS NULL" + (f" AND kind = {sql_literal(kind)}" if kind else "")
        return self._table("entities").count_rows(self._user_where(where))

    def get_entity(self, entity_id: str) -> Entity:
        """The entity ``entity_id`` (following ``merged_into``); raises NotFoundError."""
        seen: set[str] = set()
        current = entity_id
        while True:
            row = self._row("entities", current)
            if row is None:
                raise NotFoundError(entity_id if current == entity_id else current, _ENTITY_HINT)
            seen.add(current)
            target = row.get("merged_into")
            if not target or target in seen:
                return _model_from_row(Entity, row)
            current = target

    def entity_observations(self, entity_id: str, limit: int = 20) -> list[Observation]:
        """The entity's observations, newest (wall time) first."""
        self.get_entity(entity_id)  # raises NotFoundError for unknown ids
        return [_model_from_row(Observation, r) for r in self._latest_observations(entity_id, limit)]

    def timeline(self, source: str | None = None, camera: str | None = None, limit: int = 100,
                 offset: int = 0) -> list[Trace]:
        """Traces ordered by (source, t_start), optionally of one source and/or camera."""
        clauses = []
        if source is not None:
            clauses.append(f"source = {sql_literal(source)}")
        if camera is not None:
            clauses.append(f"camera_id = {sql_literal(camera)}")
        cols = list(Trace.model_fields)
        rows = self._scan("traces", " AND ".join(clauses) or None, columns=cols)
        rows.sort(key=lambda r: (r["source"], r["t_start"], r["wall_start"] or 0.0, r["id"]))  # notes: by time
        return [_model_from_row(Trace, r) for r in rows[offset:offset + limit]]

    def table_names(self) -> list[str]:
        """Every data table of the store."""
        return list(table_schemas(self.embedder.dim))

    def counts(self) -> dict[str, int]:
        """Row count of every data table, for this user."""
        where = self._user_where()
        return {name: self._table(name).count_rows(where) for name in table_schemas(self.embedder.dim)}

    def next_entity_id(self, kind: EntityKind, key: str | None = None) -> str:
        """A new id of ``kind`` (``person_0001``, …), unique across every process writing this store.

        Ids are never reused, even after a forget. With ``key``, the same key always gets the same
        id (a segment re-run after a crash re-creates the same entities); see :mod:`memory.identity.ids`.
        """
        self._table("id_alloc")  # raises when the store is not open
        return self._ids.allocate(kind, key)

    def _highest_number(self, kind: str) -> int:
        """The highest ``kind_NNNN`` number any table refers to (seeds a new id counter)."""
        pattern = re.compile(rf"^{kind}_(\d+)$")
        ids = [r["id"] for r in self._scan("entities", f"kind = {sql_literal(kind)}", columns=["id"])]
        for table in ("gallery_face", "gallery_body", "identity_decisions"):
            ids += [r["entity_id"] for r in self._scan(table, columns=["entity_id"])]
        return max((int(m.group(1)) for i in ids if i and (m := pattern.match(i))), default=0)
