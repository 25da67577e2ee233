"""Search orchestration: understand the query, gather candidates from LanceDB, rank, explain, collapse.

One search of one level runs up to three LanceDB queries under the same SQL filter (user, camera,
entity, media time, wall-clock window): full-text (BM25 over ``text``), vector (cosine, IVF_PQ once the
table is large, its candidates re-scored on their stored vectors) and — when the question names
entities — a vector query restricted to rows showing them, so a named person's segments are
candidates even when no word matches. The full-text and vector queries return their rows' search
cards (or, for levels without cards, the columns ranking needs) with the row ids and cosines, so a
search reads no row twice; only shortlisted rows found by entity id or filters alone are then taken
by row id. Candidates are scored by :func:`memory.search.ranking.score_row` and folded by
:func:`memory.search.ranking.collapse`.

The queries go to LanceDB's native async API on lancedb's background event loop, several at once:
the full-text queries run while the question is embedded, then the vector and entity queries of
every level together; the synchronous API would cost a hand-over (and a schema look-up) per call.
While the vector queries run, the calling thread scores the full-text rows sure to be shortlisted
(all but the cosine part, :func:`memory.search.ranking.prepare_row`). A row that a concurrent compaction
moved (row ids are addresses) or a delete removed between the queries and a take is missing from
the take; the candidates are then gathered again (:data:`READ_ATTEMPTS`).

The vocabulary (entity names, aliases, ids after merges; camera ids) is read from the store at query
time and cached until this store writes ``entities`` or for at most :data:`VOCAB_TTL_S` seconds, so a
rename, merge or a new camera written by another process is seen almost at once; past the TTL it is
read again only when one of its tables has a new version.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any

import lancedb
import numpy as np
import pyarrow as pa
from lancedb import AsyncTable
from lancedb.background_loop import LOOP
from lancedb.query import AsyncQueryBase

from .cards import CARD_COLUMN, CARD_COLUMNS, read_card
from ..errors import MemoryStoreError
from ..models import QueryUnderstanding, SearchHit
from .query import EntityName, Understood, Vocabulary, understand
from .ranking import Prepared, Scored, collapse, finish_row, prepare_row
from .modes import SearchMode, build_where, sql_in, sql_literal

if TYPE_CHECKING:
    from ..store.facade import MemoryStore

logger = logging.getLogger(__name__)

VOCAB_TTL_S = 2.0
#: candidates per query and way, and rows read in full: one pool for every page up to this depth, so
#: pages of one ranking never overlap (a deeper page gets a pool as deep as it)
PAGE_POOL = 24
#: IVF partitions probed per vector query: at 1M traces 6, 12 and 24 probes lose the same similarity to
#: PQ quantisation (≈ 0.05 cosine over the top 10), so a few probes suffice
NPROBES = 8
#: query embeddings kept (least recently used dropped first)
QUERY_CACHE = 256
#: times a search gathers its candidates when rows moved before they were read
READ_ATTEMPTS = 3

#: the columns a search reads of each level's candidates (traces and observations: from their cards)
_COLUMNS: dict[str, list[str]] = {
    **{level: list(columns) for level, columns in CARD_COLUMNS.items()},
    "entities": ["id", "text", "kind", "name", "aliases", "description", "cameras", "merged_into"],
    "schemas": ["id", "text", "title", "camera_id", "source", "t_start", "t_end", "wall_start", "entity_ids"],
    "facts": ["id", "text", "entity_ids", "importance", "status"],
}
_WALL = {"traces": "wall_start", "observations": "wall_start", "schemas": "wall_start"}


@dataclass
class SearchOutcome:
    """Hits of one search plus what the query was understood to mean."""

    hits: list[SearchHit]
    understood: QueryUnderstanding


class Retriever:
    """Runs searches for one :class:`~memory.store.facade.MemoryStore` (see the module docstring)."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self._vocab: _Vocab | None = None
        self._lock = threading.Lock()
        self._single: dict[str, tuple[float, bool]] = {}
        self._vectors: dict[str, np.ndarray] = {}
        self._cards: dict[str, bool] = {}

    def close(self) -> None:
        """Drop cached state."""
        self._vocab = None
        self._single.clear()

    def invalidate(self) -> None:
        """Forget the cached vocabulary (entities were written)."""
        self._vocab = None

    # ------------------------------------------------------------------ vocabulary

    def vocabulary(self) -> tuple[Vocabulary, dict[str, list[str]], dict[str, str]]:
        """``(vocabulary, entity id → names, merged id → surviving id)``; past the TTL the tables it comes
        from are read again only when one of them has a new version."""
        cached = self._vocab
        if cached is not None and time.monotonic() - cached.at < VOCAB_TTL_S:
            return cached.vocab, cached.names, cached.entity_map
        with self._lock:
            tables = [self._async_table(name) for name in _VOCAB_TABLES]
            versions = tuple(LOOP.run(_gather_all(*(table.version() for table in tables))))
            if cached is not None and cached.versions == versions:
                self._vocab = replace(cached, at=time.monotonic())
                return cached.vocab, cached.names, cached.entity_map
            user = f"user_id = {sql_literal(self.store.user_id)}"
            rows, *camera_rows = LOOP.run(_gather_all(
                _rows(tables[0], user, ["id", "kind", "name", "aliases", "merged_into"]),
                *(_rows(table, user, ["camera_id"]) for table in tables[1:])))
            merged = {r["id"]: r["merged_into"] for r in rows if r.get("merged_into")}

            def final(eid: str) -> str:
                seen = set()
                while eid in merged and eid not in seen:
                    seen.add(eid)
                    eid = merged[eid]
                return eid

            entity_map = {eid: final(eid) for eid in merged}
            names: dict[str, list[str]] = {}
            vocab_names: list[EntityName] = []
            for r in rows:
                target = final(r["id"])
                own = [n for n in [r.get("name"), *(r.get("aliases") or [])] if n]
                names.setdefault(target, [])
                for n in own:
                    if n not in names[target]:
                        names[target].append(n)
                    vocab_names.append(EntityName(target, n, r.get("kind") or "person"))
                vocab_names.append(EntityName(target, r["id"], r.get("kind") or "person"))
            cameras = sorted({r["camera_id"] for found in camera_rows for r in found if r.get("camera_id")})
            vocab = Vocabulary(names=vocab_names, cameras=cameras)
            self._vocab = _Vocab(time.monotonic(), versions, vocab, names, entity_map)
            return vocab, names, entity_map

    # ------------------------------------------------------------------ search

    def search(self, query: str, levels: list[str], camera: str | None, entity: str | list[str] | None,
               start: float | None, end: float | None, limit: int, offset: int, mode: SearchMode,
               tz: str | None = None, now: datetime | None = None, until: float | None = None) -> SearchOutcome:
        """Search ``levels`` and return the page ``[offset, offset + limit)`` of the fused ranking."""
        vocab, names, entity_map = self.vocabulary()
        q = understand(query, vocab, tz, now)
        filter_only = (not q.terms and not q.entities and not q.labels and q.people is None
                       and (q.time is not None or bool(q.cameras) or q.order is not None))
        cameras = [camera] if camera else q.cameras
        entities = list(q.entities) if q.entities else []
        explicit = [entity] if isinstance(entity, str) else list(entity or [])
        explicit = [entity_map.get(e, e) for e in explicit]
        q.notes += [f"no entity has the id {e!r}; call entity_list for ids" for e in explicit if e not in names]
        alias_ids = {i for i, t in entity_map.items() if t in explicit}
        filter_ids = [*explicit, *sorted(alias_ids)] or None
        k = max(PAGE_POOL, limit + offset)
        text_for_vector = q.text.strip() or query.strip()
        fts_text = " ".join([*q.terms, *_expansion(q)])
        wheres: dict[str, str] = {}
        for level in levels:
            where = build_where(level, self.store.user_id, cameras[0] if len(cameras) == 1 else None, filter_ids,
                                start, end)
            if self._single_user(level):  # every row is this user's: skip the per-row user check
                where = where.split(" AND ", 1)[1] if " AND " in where else ""
            extra = []
            if len(cameras) > 1 and level in ("traces", "observations", "schemas"):
                extra.append("camera_id IN (" + ", ".join(sql_literal(c) for c in cameras) + ")")
            if until is not None and level in _WALL:
                extra.append(f"t_end <= {float(until)!r}")
            if q.time is not None and level in _WALL:
                extra.append(f"{_WALL[level]} >= {q.time.start!r} AND {_WALL[level]} < {q.time.end!r}")
            if level == "facts":
                extra.append("(status IS NULL OR status = 'active')")
            if level == "entities":
                extra.append("merged_into IS NULL")
            wheres[level] = " AND ".join([w for w in [where, *extra] if w])
        vector_text = text_for_vector if mode is not SearchMode.FTS and not filter_only else ""
        plan = _Plan(
            tables={level: self._async_table(level) for level in levels}, wheres=wheres, k=k,
            fts_text=fts_text if mode is not SearchMode.VECTOR and not filter_only else "", vector_text=vector_text,
            entities=entities, entity_ids=[*entities, *(i for i, t in entity_map.items() if t in entities)],
            latest=filter_only or (not vector_text and not fts_text), order=q.order, user_where=self._user_clause)
        def early(level: str, row: dict[str, Any]) -> Prepared:
            return prepare_row(level, row, q, names, entity_map)

        for attempt in range(READ_ATTEMPTS):
            gathered = self._gather(plan, early)
            found, cosines, read, prepared = gathered.found, gathered.cosines, gathered.read, gathered.prepared
            if all(len(rows) == len(gathered.shortlists[level]) for level, rows in zip(levels, read)):
                break
            # a compaction moved rows (or a delete removed them) between the queries and the read
            logger.info("search candidates moved while being read (attempt %d); gathering them again", attempt + 1)
        has_vector = bool(plan.vector_text)
        candidates: dict[tuple[str, str], tuple[dict[str, Any], int]] = {}
        for level, rows in zip(levels, read):
            for row in rows:
                candidates[(level, row["id"])] = (row, row.pop("_rowid"))
        bound = {level: min(cosines[level][r] for r in near) for level in levels
                 if len(near := found[level].get("meaning", [])) >= k}  # outside the k nearest: at most the k-th
        scored = [finish_row(prepared[level].get(rowid) or early(level, row),
                             cosines[level].get(rowid, bound.get(level, 0.0)) if has_vector else None)
                  for (level, _), (row, rowid) in candidates.items()]
        ranked = _order(scored, q)
        # a row passing the camera or time asked for answers that part even when nothing else matched
        answering = ranked if cameras or q.time or start is not None or end is not None else [
            s for s in ranked if s.score > 0]
        if ranked and not answering:
            q.notes.append("nothing stored answers any part of the question; try other words, a name from "
                           "entity_list, a camera or a time")
        ranked = answering
        head = max(3 * (offset + limit), 30)  # near-duplicates only matter where a page can show them
        ranked = collapse(ranked[:head]) + ranked[head:]
        page = ranked[offset:offset + limit]
        return SearchOutcome(hits=[_hit(s) for s in page], understood=_understood(q, cameras))

    def _gather(self, plan: _Plan, early: Callable[[str, dict[str, Any]], Prepared] | None = None) -> _Gathered:
        """Candidates of every level (see :class:`_Gathered`).

        The full-text queries start first and run while the question is embedded; the vector,
        entity and filter queries of every level then run together. The queries return their rows'
        cards, so only shortlisted rows none of them returned are read afterwards. While the vector
        queries run, ``early`` prepares the scores of the full-text rows sure to be shortlisted.
        """
        levels = list(plan.tables)
        carded = {level: self._carded(level) for level in levels}  # not from the loop: it asks the loop
        columns = {level: [CARD_COLUMN] if carded[level] else _COLUMNS[level] for level in levels}
        words: Future[list[_Found]] | None = None
        if plan.fts_text:
            words = asyncio.run_coroutine_threadsafe(_gather_all(*(
                _fts(plan.tables[level], plan.fts_text, plan.wheres[level], plan.k, columns[level])
                for level in levels)), LOOP.loop)
        try:
            vector = self._query_vector(plan.vector_text) if plan.vector_text else None
        except BaseException:
            if words is not None:
                words.cancel()
            raise
        jobs: list[tuple[str, str, Callable[[], Awaitable[_Found | list[int]]]]] = []
        for level in levels:
            table, where = plan.tables[level], plan.wheres[level]
            if vector is not None:
                jobs.append((level, "meaning", partial(_nearest, table, vector, where, plan.k, columns[level])))
            if plan.entities and level == "entities":
                jobs.append((level, "entities", partial(_by_ids, table, plan.entities, plan.user_where(level))))
            elif plan.entities:
                clause = build_where(level, self.store.user_id, entity=plan.entity_ids).split(" AND ", 1)[1]
                restricted = " AND ".join(w for w in (where, clause) if w)
                jobs.append((level, "entities", partial(_nearest, table, vector, restricted, plan.k, columns[level])
                             if vector is not None else partial(_latest, table, level, restricted, plan.k, plan.order)))
            if plan.latest:
                # only filters asked for: the newest (or, for "first", oldest) rows passing them
                jobs.append((level, "filters", partial(_latest, table, level, where, plan.k, plan.order)))
        found: dict[str, dict[str, list[int]]] = {level: {} for level in levels}
        cosines: dict[str, dict[int, float]] = {level: {} for level in levels}
        fetched: dict[str, dict[int, Any]] = {level: {} for level in levels}
        parsed: dict[str, dict[int, dict[str, Any]]] = {level: {} for level in levels}
        prepared: dict[str, dict[int, Prepared]] = {level: {} for level in levels}

        def note(level: str, source: str, result: _Found | list[int]) -> None:
            if isinstance(result, list):  # row ids only
                found[level][source] = result
                return
            found[level][source] = result.rowids
            cosines[level].update(result.cosines)
            fetched[level].update(result.rows)

        queries: Future[list[Any]] | None = None
        if jobs:
            queries = asyncio.run_coroutine_threadsafe(_gather_all(*(job() for _, _, job in jobs)), LOOP.loop)
        try:
            if words is not None:
                for level, result in zip(levels, words.result()):
                    note(level, "words", result)
                if early is not None and vector is not None and not plan.entities and not plan.latest:
                    # while the vector queries run: the full-text rows sure to be shortlisted
                    for level in levels:
                        for rowid in found[level]["words"][:plan.k // 2]:
                            row = _parsed(fetched[level].get(rowid), carded[level])
                            if row is not None:
                                parsed[level][rowid] = row
                                prepared[level][rowid] = early(level, row)
            results = queries.result() if queries is not None else []
        except BaseException:
            for future in (words, queries):
                if future is not None:
                    future.cancel()
            raise
        for (level, source, _), result in zip(jobs, results):
            note(level, source, result)
        shortlists = {level: _shortlist(found[level], plan.k) for level in levels}
        read: list[list[dict[str, Any]]] = []
        takes: list[tuple[int, list[int]]] = []
        for n, level in enumerate(levels):
            rows, take = _assemble(shortlists[level], carded[level], fetched[level], parsed[level])
            read.append(rows)
            if take:
                takes.append((n, take))
        if takes:  # rows no query returned (entity and filter candidates), read by row id
            taken = LOOP.run(_gather_all(*(_take(plan.tables[levels[n]], _COLUMNS[levels[n]], take, carded[levels[n]])
                                           for n, take in takes)))
            for (n, _), rows in zip(takes, taken):
                read[n] += rows
        return _Gathered(found, cosines, shortlists, read, prepared)

    def _query_vector(self, text: str) -> np.ndarray:
        """The query's embedding; an agent often repeats a query over levels and pages, so recent ones are kept."""
        vector = self._vectors.pop(text, None)
        if vector is None:
            embed_query = getattr(self.store.embedder, "embed_query", None)  # a model meant for questions
            vector = embed_query(text) if embed_query is not None else self.store._embed([text])[0]
        self._vectors[text] = vector
        while len(self._vectors) > QUERY_CACHE:
            self._vectors.pop(next(iter(self._vectors)))
        return vector

    def _carded(self, level: str) -> bool:
        """Whether ``level``'s rows carry search cards (``memory/search/cards.py``; fixed once the store is open)."""
        carded = self._cards.get(level)
        if carded is None:
            carded = self._cards[level] = (level in CARD_COLUMNS
                                           and CARD_COLUMN in self.store._table(level).schema.names)
        return carded

    def _single_user(self, level: str) -> bool:
        cached = self._single.get(level)
        if cached is not None and time.monotonic() - cached[0] < VOCAB_TTL_S:
            return cached[1]
        table = self._async_table(level)
        own = f"user_id = {sql_literal(self.store.user_id)}"
        total, mine = LOOP.run(_gather_all(table.count_rows(), table.count_rows(own)))
        single = total == mine
        self._single[level] = (time.monotonic(), single)
        return single

    def _user_clause(self, level: str) -> str:
        """The per-row user filter of ``level`` ("" when every row is this user's)."""
        return "" if self._single_user(level) else f"user_id = {sql_literal(self.store.user_id)}"

    def _async_table(self, name: str) -> AsyncTable:
        """The native async handle behind the store's search table (see ``MemoryStore._search_table``)."""
        inner = getattr(self.store._search_table(name), "_table", None)
        if not isinstance(inner, AsyncTable):
            raise MemoryStoreError(f"this lancedb ({lancedb.__version__}) does not expose the async table behind "
                                   "a table handle; install a lancedb version within pyproject.toml's range")
        return inner


#: the tables the vocabulary is read from (entities first)
_VOCAB_TABLES = ("entities", "ingest_log", "camera_context")


@dataclass(frozen=True)
class _Vocab:
    """The vocabulary as read at ``at`` (monotonic) from tables at ``versions``."""

    at: float
    versions: tuple[int, ...]
    vocab: Vocabulary
    names: dict[str, list[str]]
    entity_map: dict[str, str]


@dataclass(frozen=True)
class _Plan:
    """What one search asks LanceDB for (see :meth:`Retriever._gather`)."""

    tables: dict[str, AsyncTable]
    wheres: dict[str, str]
    k: int
    fts_text: str
    vector_text: str
    entities: list[str]
    entity_ids: list[str]
    #: only filters were asked for (or nothing to match): the newest rows passing them are candidates
    latest: bool
    order: str | None
    user_where: Callable[[str], str]


@dataclass
class _Gathered:
    """What :meth:`Retriever._gather` found of every level."""

    #: candidate row ids per level and source (words, meaning, entities, filters), in rank order
    found: dict[str, dict[str, list[int]]]
    #: exact cosine similarity per level and row id of vector hits
    cosines: dict[str, dict[int, float]]
    #: per level, the candidates worth reading (:func:`_shortlist`)
    shortlists: dict[str, list[int]]
    #: per level (in plan order), the shortlisted rows as read, with ``_rowid``; a row moved since is missing
    read: list[list[dict[str, Any]]]
    #: per level and row id, scores prepared while the vector queries ran
    prepared: dict[str, dict[int, Prepared]]


@dataclass
class _Found:
    """A candidate query's row ids in rank order, with what it returned of them: cosine similarities
    (vector queries) and each row's card or search columns (see :func:`_assemble`)."""

    rowids: list[int]
    cosines: dict[int, float] = field(default_factory=dict)
    rows: dict[int, Any] = field(default_factory=dict)


async def _gather_all(*jobs: Awaitable[Any]) -> list[Any]:
    return list(await asyncio.gather(*jobs))


async def _arrow(query: AsyncQueryBase, rows: int | None = None) -> pa.Table:
    """The rows of ``query``, run by LanceDB's native query object; reading stops once ``rows`` rows are in.

    ``to_arrow`` first looks up the table's schema (for blob columns, which no searched table has):
    a round trip to LanceDB's runtime and a check for a newer table version per query. Each batch
    of the result stream is a round trip too, and so is the end of the stream, which a read of
    known size need not wait for.
    """
    inner = getattr(query, "_inner", None)
    if not callable(getattr(inner, "execute", None)):
        return await query.to_arrow()
    stream = await inner.execute()
    batches: list[pa.RecordBatch] = []
    count = 0
    while rows is None or count < rows:
        try:
            batch = await stream.__anext__()
        except StopAsyncIteration:
            break
        batches.append(batch)
        count += batch.num_rows
    return pa.Table.from_batches(batches, schema=stream.schema)


async def _fts(table: AsyncTable, text: str, where: str, k: int, columns: list[str]) -> _Found:
    """Row ids of the ``k`` best BM25 matches of ``text``, best first, with their ``columns``."""
    query = (table.query().nearest_to_text(text, columns="text").select(["_score", *columns]).with_row_id()
             .limit(k))
    if where:
        query = query.where(where)
    try:
        batch = await _arrow(query, k)
    except ValueError:  # a query the full-text parser rejects is matched by meaning only
        logger.info("full-text query %r rejected; using vector search only", text)
        return _Found([])
    rowids = batch["_rowid"].to_pylist()
    return _Found(rowids, rows=_fetched(batch, rowids, columns))


async def _nearest(table: AsyncTable, vector: np.ndarray, where: str, k: int, columns: list[str]) -> _Found:
    """Row ids of the ``k`` nearest rows, nearest first, with their ``columns`` and cosine similarity;
    the IVF_PQ candidates are re-scored on their stored vectors (``refine_factor(1)``), so the
    similarities are exact."""
    query = (table.vector_search(vector).column("vector").distance_type("cosine").nprobes(NPROBES)
             .refine_factor(1).select(["_distance", *columns]).with_row_id().limit(k))
    if where:
        query = query.where(where)  # a prefilter: the k nearest rows that pass it
    batch = await _arrow(query, k)
    rowids = batch["_rowid"].to_pylist()
    return _Found(rowids, dict(zip(rowids, (1.0 - d for d in batch["_distance"].to_pylist()))),
                  _fetched(batch, rowids, columns))


def _fetched(batch: pa.Table, rowids: list[int], columns: list[str]) -> dict[int, Any]:
    """Per row id, the card (one column) or the row (several) a query returned with its candidates."""
    if columns == [CARD_COLUMN]:
        return dict(zip(rowids, batch[CARD_COLUMN].to_pylist()))
    return dict(zip(rowids, batch.select(columns).to_pylist()))


async def _latest(table: AsyncTable, level: str, where: str, k: int, order_by: str | None) -> list[int]:
    """Row ids of the ``k`` newest rows passing ``where`` (oldest for ``order_by="first"``)."""
    order = _WALL.get(level)
    query = table.query().with_row_id()
    if where:
        query = query.where(where)
    if order is None:
        return (await _arrow(query.select(["id"]).limit(k)))["_rowid"].to_pylist()
    batch = await _arrow(query.select([order]))
    sign = 1 if order_by == "first" else -1
    keys = sorted(zip(batch[order].to_pylist(), batch["_rowid"].to_pylist()), key=lambda r: (r[0] or 0) * sign)
    return [rowid for _, rowid in keys[:k]]


async def _rows(table: AsyncTable, where: str, columns: list[str]) -> list[dict[str, Any]]:
    """Every row passing ``where``."""
    return (await _arrow(table.query().where(where).select(columns))).to_pylist()


async def _by_ids(table: AsyncTable, ids: list[str], user_where: str) -> list[int]:
    """Row ids of the rows with these ``id``s, in the order of ``ids``."""
    where = " AND ".join(w for w in (user_where, f"id IN {sql_in(ids)}") if w)
    batch = await _arrow(table.query().where(where).select(["id"]).with_row_id())
    rowids = dict(zip(batch["id"].to_pylist(), batch["_rowid"].to_pylist()))
    return [rowids[i] for i in ids if i in rowids]


def _parsed(value: Any, carded: bool) -> dict[str, Any] | None:
    """The row a query returned (``value``: its card where ``carded``, else its columns); None when
    there is none or its card cannot be read."""
    if value is None:
        return None
    return read_card(value) if carded else dict(value)


def _assemble(rowids: list[int], carded: bool, fetched: dict[int, Any],
              parsed: dict[int, dict[str, Any]]) -> tuple[list[dict[str, Any]], list[int]]:
    """The rows at ``rowids`` that a query returned (``fetched``; ``parsed`` holds those already turned
    into rows), each with ``_rowid``, and the row ids still to be read."""
    rows: list[dict[str, Any]] = []
    take: list[int] = []
    for rowid in rowids:
        row = parsed.get(rowid)
        if row is None:
            row = _parsed(fetched.get(rowid), carded)
        if row is None:
            take.append(rowid)
        else:
            row["_rowid"] = rowid
            rows.append(row)
    return rows, take


async def _take(table: AsyncTable, columns: list[str], rowids: list[int], carded: bool) -> list[dict[str, Any]]:
    """The ``columns`` of the rows at ``rowids`` (with ``_rowid``); a row moved or deleted since is missing.

    From their cards where ``carded`` (one column instead of a dozen); a row without a usable card
    is read column by column.
    """
    if not carded:
        return (await _arrow(table.take_row_ids(sorted(rowids)).select(columns).with_row_id(), len(rowids))).to_pylist()
    batch = await _arrow(table.take_row_ids(sorted(rowids)).select([CARD_COLUMN]).with_row_id(), len(rowids))
    rows: list[dict[str, Any]] = []
    missing: list[int] = []
    for text, rowid in zip(batch[CARD_COLUMN].to_pylist(), batch["_rowid"].to_pylist()):
        row = read_card(text)
        if row is None:
            missing.append(rowid)
        else:
            row["_rowid"] = rowid
            rows.append(row)
    if missing:
        rows += (await _arrow(table.take_row_ids(missing).select(columns).with_row_id(), len(missing))).to_pylist()
    return rows


def _shortlist(sources: dict[str, list[int]], n: int) -> list[int]:
    """The ``n`` candidates worth reading in full: rows showing a named entity first, then the best of
    both rankings taken in turn (full-text rank 1, meaning rank 1, full-text rank 2, …).

    Reading a row costs far more than ranking it, and the final score rarely lifts a row from the
    bottom of both rankings into a page; so the tails are not read.
    """
    out: dict[int, None] = {}
    for key in ("entities", "filters"):
        for rowid in sources.get(key, []):
            if len(out) >= n and key != "entities":
                break
            out.setdefault(rowid)
    lists = [sources.get(key, []) for key in ("words", "meaning")]
    for rank in range(max((len(x) for x in lists), default=0)):
        for ranked in lists:
            if rank < len(ranked) and len(out) < n:
                out.setdefault(ranked[rank])
    return list(out)


_COUNT_WORDS = ["no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


def _expansion(q: Understood) -> list[str]:
    """Words that rows answering the question's counts and objects contain (full-text candidates only)."""
    extra = [w for labels in q.labels.values() for label in labels for w in label.split() if w != "person"]
    if q.people is not None:
        lo, hi = q.people
        extra += ["group", "people"] if lo >= 3 else [_COUNT_WORDS[lo] if lo < 10 else str(lo),
                                                      "person" if lo == 1 else "people"]
    return list(dict.fromkeys(extra))


def _order(scored: list[Scored], q: Understood) -> list[Scored]:
    """Best score first; for "the first/last time", the earliest/latest of the relevant hits first."""
    scored.sort(key=lambda s: (-s.score, -s.cosine, -(s.row.get("wall_start") or 0), s.row["id"]))
    if q.order is None or not scored:
        return scored
    top = scored[0].score
    relevant = [s for s in scored if s.score >= max(0.3, 0.8 * top)]
    rest = [s for s in scored if s.score < max(0.3, 0.8 * top)]
    sign = 1 if q.order == "first" else -1
    relevant.sort(key=lambda s: sign * ((s.row.get("wall_start") or 0) + (s.row.get("t_start") or 0) * 1e-6))
    return relevant + rest


def _hit(s: Scored) -> SearchHit:
    row = s.row
    if s.level == "entities":
        entity_ids = [row["id"]]
    elif s.level == "observations":
        entity_ids = [row["entity_id"]]
    else:
        entity_ids = list(row.get("entity_ids") or [])
    return SearchHit(id=row["id"], level=s.level, text=row.get("text") or "", score=s.score,
                     camera_id=row.get("camera_id"), source=row.get("source"), t_start=row.get("t_start"),
                     t_end=row.get("t_end"), wall_start=row.get("wall_start"), entity_ids=entity_ids,
                     keyframe_ids=list(row.get("keyframe_ids") or []), why=s.why, collapsed=s.collapsed)


def _understood(q: Understood, cameras: list[str]) -> QueryUnderstanding:
    return QueryUnderstanding(
        query=q.raw, text=q.text, entities=q.entities, cameras=cameras,
        time_label=q.time.label if q.time else None, wall_start=q.time.start if q.time else None,
        wall_end=q.time.end if q.time else None, order=q.order, labels=sorted(q.labels),
        people=list(q.people) if q.people else None, notes=q.notes, summary=q.summary())
