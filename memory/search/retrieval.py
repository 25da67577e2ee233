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
from dataclasses import dataclass, replace
from datetime import datetime
from functools import partial
from typing import Any, Protocol

import numpy as np
from lancedb import AsyncTable
from lancedb.background_loop import LOOP

from ..embedders import Embedder
from ..models import QueryUnderstanding, SearchHit
from .candidates import (
    WALL_COLUMN,
    Found,
    assemble_rows,
    fts_query,
    gather_all,
    latest_rowids,
    nearest_query,
    parse_row,
    read_rows,
    rowids_by_id,
    take_rows,
)
from .cards import CARD_COLUMN, CARD_COLUMNS
from .modes import SearchMode, build_where, sql_literal
from .query import EntityName, Understood, Vocabulary, understand
from .ranking import Prepared, Scored, collapse, finish_row, prepare_row

logger = logging.getLogger(__name__)

VOCAB_TTL_S = 2.0
#: candidates per query and way, and rows read in full: one pool for every page up to this depth, so
#: pages of one ranking never overlap (a deeper page gets a pool as deep as it)
PAGE_POOL = 24
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


@dataclass
class SearchOutcome:
    """Hits of one search plus what the query was understood to mean."""

    hits: list[SearchHit]
    understood: QueryUnderstanding


class SearchSource(Protocol):
    """What a :class:`Retriever` reads of its store (a :class:`~memory.store.facade.MemoryStore`)."""

    user_id: str
    embedder: Embedder

    def _embed(self, texts: list[str]) -> np.ndarray: ...
    def _table(self, name: str) -> Any: ...
    def _search_table(self, name: str) -> AsyncTable: ...


class Retriever:
    """Runs searches for one :class:`~memory.store.facade.MemoryStore` (see the module docstring)."""

    def __init__(self, store: SearchSource) -> None:
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
            versions = tuple(LOOP.run(gather_all(*(table.version() for table in tables))))
            if cached is not None and cached.versions == versions:
                self._vocab = replace(cached, at=time.monotonic())
                return cached.vocab, cached.names, cached.entity_map
            user = f"user_id = {sql_literal(self.store.user_id)}"
            rows, *camera_rows = LOOP.run(gather_all(
                read_rows(tables[0], user, ["id", "kind", "name", "aliases", "merged_into"]),
                *(read_rows(table, user, ["camera_id"]) for table in tables[1:])))
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
            if until is not None and level in WALL_COLUMN:
                extra.append(f"t_end <= {float(until)!r}")
            if q.time is not None and level in WALL_COLUMN:
                extra.append(f"{WALL_COLUMN[level]} >= {q.time.start!r} AND {WALL_COLUMN[level]} < {q.time.end!r}")
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
        words: Future[list[Found]] | None = None
        if plan.fts_text:
            words = asyncio.run_coroutine_threadsafe(gather_all(*(
                fts_query(plan.tables[level], plan.fts_text, plan.wheres[level], plan.k, columns[level])
                for level in levels)), LOOP.loop)
        try:
            vector = self._query_vector(plan.vector_text) if plan.vector_text else None
        except BaseException:
            if words is not None:
                words.cancel()
            raise
        jobs: list[tuple[str, str, Callable[[], Awaitable[Found | list[int]]]]] = []
        for level in levels:
            table, where = plan.tables[level], plan.wheres[level]
            if vector is not None:
                jobs.append((level, "meaning", partial(nearest_query, table, vector, where, plan.k, columns[level])))
            if plan.entities and level == "entities":
                jobs.append((level, "entities", partial(rowids_by_id, table, plan.entities, plan.user_where(level))))
            elif plan.entities:
                clause = build_where(level, self.store.user_id, entity=plan.entity_ids).split(" AND ", 1)[1]
                restricted = " AND ".join(w for w in (where, clause) if w)
                jobs.append((level, "entities", partial(nearest_query, table, vector, restricted, plan.k, columns[level])
                             if vector is not None else partial(latest_rowids, table, level, restricted, plan.k, plan.order)))
            if plan.latest:
                # only filters asked for: the newest (or, for "first", oldest) rows passing them
                jobs.append((level, "filters", partial(latest_rowids, table, level, where, plan.k, plan.order)))
        found: dict[str, dict[str, list[int]]] = {level: {} for level in levels}
        cosines: dict[str, dict[int, float]] = {level: {} for level in levels}
        fetched: dict[str, dict[int, Any]] = {level: {} for level in levels}
        parsed: dict[str, dict[int, dict[str, Any]]] = {level: {} for level in levels}
        prepared: dict[str, dict[int, Prepared]] = {level: {} for level in levels}

        def note(level: str, source: str, result: Found | list[int]) -> None:
            if isinstance(result, list):  # row ids only
                found[level][source] = result
                return
            found[level][source] = result.rowids
            cosines[level].update(result.cosines)
            fetched[level].update(result.rows)

        queries: Future[list[Any]] | None = None
        if jobs:
            queries = asyncio.run_coroutine_threadsafe(gather_all(*(job() for _, _, job in jobs)), LOOP.loop)
        try:
            if words is not None:
                for level, result in zip(levels, words.result()):
                    note(level, "words", result)
                if early is not None and vector is not None and not plan.entities and not plan.latest:
                    # while the vector queries run: the full-text rows sure to be shortlisted
                    for level in levels:
                        for rowid in found[level]["words"][:plan.k // 2]:
                            row = parse_row(fetched[level].get(rowid), carded[level])
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
            rows, take = assemble_rows(shortlists[level], carded[level], fetched[level], parsed[level])
            read.append(rows)
            if take:
                takes.append((n, take))
        if takes:  # rows no query returned (entity and filter candidates), read by row id
            taken = LOOP.run(gather_all(*(take_rows(plan.tables[levels[n]], _COLUMNS[levels[n]], take, carded[levels[n]])
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
        total, mine = LOOP.run(gather_all(table.count_rows(), table.count_rows(own)))
        single = total == mine
        self._single[level] = (time.monotonic(), single)
        return single

    def _user_clause(self, level: str) -> str:
        """The per-row user filter of ``level`` ("" when every row is this user's)."""
        return "" if self._single_user(level) else f"user_id = {sql_literal(self.store.user_id)}"

    def _async_table(self, name: str) -> AsyncTable:
        """The store's search table ``name``, opened on its async connection (``MemoryStore._search_table``)."""
        return self.store._search_table(name)


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
