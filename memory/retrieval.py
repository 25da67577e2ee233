"""Search orchestration: understand the query, gather candidates from LanceDB, rank, explain, collapse.

One search of one level runs up to three LanceDB queries under the same SQL filter (user, camera,
entity, media time, wall-clock window): full-text (BM25 over ``text``), vector (cosine, IVF_PQ once the
table is large) and — when the question names entities — a vector query restricted to rows showing
them, so a named person's segments are candidates even when no word matches. Each query
returns ids and row ids only, and the union of candidates is read in one take by row id (a row moved
by a concurrent compaction is looked up by ``id`` instead). Candidates are scored by
:func:`memory.ranking.score_row` and folded by :func:`memory.ranking.collapse`.

The vocabulary (entity names, aliases, ids after merges; camera ids) is read from the store at query
time and cached until this store writes ``entities`` or for at most :data:`VOCAB_TTL_S` seconds, so a
rename, merge or a new camera written by another process is seen almost at once.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from .models import QueryUnderstanding, SearchHit
from .query import EntityName, Understood, Vocabulary, understand
from .ranking import Scored, collapse, score_row
from .search import SearchMode, build_where, sql_literal

if TYPE_CHECKING:
    from .store import MemoryStore

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

_COLUMNS: dict[str, list[str]] = {
    "traces": ["id", "text", "transcript", "ocr_text", "objects", "entity_ids", "camera_id",
               "source", "segment_index", "t_start", "t_end", "wall_start", "keyframe_ids"],
    "observations": ["id", "text", "entity_id", "camera_id", "source", "segment_index", "t_start", "t_end",
                     "wall_start", "keyframe_ids"],
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
    """Runs searches for one :class:`~memory.store.MemoryStore` (see the module docstring)."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self._vocab: tuple[float, Vocabulary, dict[str, list[str]], dict[str, str]] | None = None
        self._lock = threading.Lock()
        self._single: dict[str, tuple[float, bool]] = {}
        self._vectors: dict[str, np.ndarray] = {}

    def close(self) -> None:
        """Drop cached state."""
        self._vocab = None
        self._single.clear()

    def invalidate(self) -> None:
        """Forget the cached vocabulary (entities were written)."""
        self._vocab = None

    # ------------------------------------------------------------------ vocabulary

    def vocabulary(self) -> tuple[Vocabulary, dict[str, list[str]], dict[str, str]]:
        """``(vocabulary, entity id → names, merged id → surviving id)``, read at most every TTL."""
        cached = self._vocab
        if cached is not None and time.monotonic() - cached[0] < VOCAB_TTL_S:
            return cached[1], cached[2], cached[3]
        with self._lock:
            rows = self.store._scan("entities", columns=["id", "kind", "name", "aliases", "merged_into"])
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
            cameras = sorted({r["camera_id"] for name in ("ingest_log", "camera_context")
                              for r in self.store._scan(name, columns=["camera_id"]) if r.get("camera_id")})
            vocab = Vocabulary(names=vocab_names, cameras=cameras)
            self._vocab = (time.monotonic(), vocab, names, entity_map)
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
        # per level and source, candidate ids in rank order (id → row id)
        found: dict[str, dict[str, dict[str, int | None]]] = {level: {} for level in levels}
        if mode is not SearchMode.VECTOR and fts_text and not filter_only:
            for level in levels:
                found[level]["words"] = self._fts(level, fts_text, wheres[level], k)
        vector = (self._query_vector(text_for_vector)
                  if mode is not SearchMode.FTS and not filter_only and text_for_vector else None)
        entity_ids = [*entities, *(i for i, t in entity_map.items() if t in entities)]
        cosines: dict[tuple[str, str], float] = {}
        bound: dict[str, float] = {}
        for level in levels:
            if vector is not None:
                near = self._vector(level, vector, wheres[level], k, cosines)
                found[level]["meaning"] = near
                if len(near) >= k:  # a row outside the k nearest is at most as similar as the k-th
                    bound[level] = min(cosines[(level, i)] for i in near)
            if entities and level == "entities":
                found[level]["entities"] = {e: None for e in entities}
            elif entities:
                clause = build_where(level, self.store.user_id, entity=entity_ids).split(" AND ", 1)[1]
                where = " AND ".join(w for w in (wheres[level], clause) if w)
                found[level]["entities"] = (self._vector(level, vector, where, k, cosines) if vector is not None
                                            else self._latest_ids(level, where, k, q.order))
            if filter_only or (vector is None and not fts_text):
                # only filters asked for: the newest (or, for "first", oldest) rows passing them
                found[level]["filters"] = self._latest_ids(level, wheres[level], k, q.order)
        candidates = {(level, r["id"]): r for level in levels
                      for r in self._take(level, _shortlist(found[level], k))}
        scored = [score_row(level, row, cosines.get((level, i), bound.get(level, 0.0)) if vector is not None else None,
                            q, names, entity_map) for (level, i), row in candidates.items()]
        ranked = _order(scored, q)
        head = max(3 * (offset + limit), 30)  # near-duplicates only matter where a page can show them
        ranked = collapse(ranked[:head]) + ranked[head:]
        page = ranked[offset:offset + limit]
        return SearchOutcome(hits=[_hit(s) for s in page], understood=_understood(q, cameras))

    def _query_vector(self, text: str) -> np.ndarray:
        """The query's embedding; an agent often repeats a query over levels and pages, so recent ones are kept."""
        vector = self._vectors.pop(text, None)
        if vector is None:
            vector = self.store._embed([text])[0]
        self._vectors[text] = vector
        while len(self._vectors) > QUERY_CACHE:
            self._vectors.pop(next(iter(self._vectors)))
        return vector

    def _single_user(self, level: str) -> bool:
        cached = self._single.get(level)
        if cached is not None and time.monotonic() - cached[0] < VOCAB_TTL_S:
            return cached[1]
        table = self.store._table(level)
        single = table.count_rows() == table.count_rows(f"user_id = {sql_literal(self.store.user_id)}")
        self._single[level] = (time.monotonic(), single)
        return single

    def _fts(self, level: str, text: str, where: str, k: int) -> dict[str, int | None]:
        query = self.store._table(level).search(text, query_type="fts", fts_columns="text").with_row_id(True)
        if where:
            query = query.where(where)
        try:
            return {r["id"]: r["_rowid"] for r in query.select(["id", "_score"]).limit(k).to_list()}
        except ValueError:  # a query the full-text parser rejects is matched by meaning only
            logger.info("full-text query %r rejected; using vector search only", text)
            return {}

    def _vector(self, level: str, vector: np.ndarray, where: str, k: int,
                cosines: dict[tuple[str, str], float]) -> dict[str, int | None]:
        """The ``k`` nearest rows (ids → row ids); their exact cosine similarities go into ``cosines``."""
        query = (self.store._table(level).search(vector, vector_column_name="vector").distance_type("cosine")
                 .nprobes(NPROBES).refine_factor(1).with_row_id(True))
        if where:
            query = query.where(where, prefilter=True)
        rows = query.select(["id", "_distance"]).limit(k).to_list()
        for r in rows:
            cosines[(level, r["id"])] = 1.0 - float(r["_distance"])
        return {r["id"]: r["_rowid"] for r in rows}

    def _latest_ids(self, level: str, where: str, k: int, order_by: str | None = None) -> dict[str, int | None]:
        order = _WALL.get(level)
        query = self.store._table(level).search().with_row_id(True)
        if where:
            query = query.where(where)
        if order is None:
            return {r["id"]: r["_rowid"] for r in query.select(["id"]).limit(k).to_list()}
        keys = query.select(["id", order]).limit(None).to_list()
        keys.sort(key=lambda r: (r[order] or 0) * (1 if order_by == "first" else -1))
        return {r["id"]: r["_rowid"] for r in keys[:k]}

    def _take(self, level: str, found: dict[str, int | None]) -> list[dict[str, Any]]:
        """The candidate rows: by row id (cheap), falling back to an ``id IN`` lookup for any row that
        moved in between (a compaction rewrites row addresses)."""
        if not found:
            return []
        table = self.store._table(level)
        cols = _COLUMNS[level]
        rows: list[dict[str, Any]] = []
        by_rowid = sorted({rid for rid in found.values() if rid is not None})
        if by_rowid:
            try:
                rows = [r for r in table.take_row_ids(by_rowid).select(cols).to_list() if r["id"] in found]
            except (OSError, ValueError, RuntimeError):
                rows = []
        missing = [i for i in found if i not in {r["id"] for r in rows}]
        if missing:
            where = "id IN (" + ", ".join(sql_literal(i) for i in missing) + ")"
            if not self._single_user(level):
                where = f"user_id = {sql_literal(self.store.user_id)} AND {where}"
            rows += table.search().where(where).select(cols).limit(None).to_list()
        return rows


def _shortlist(sources: dict[str, dict[str, int | None]], n: int) -> dict[str, int | None]:
    """The ``n`` candidates worth reading in full: rows showing a named entity first, then the best of
    both rankings taken in turn (full-text rank 1, meaning rank 1, full-text rank 2, …).

    Reading a row costs far more than ranking it, and the final score rarely lifts a row from the
    bottom of both rankings into a page; so the tails are not read.
    """
    out: dict[str, int | None] = {}
    for key in ("entities", "filters"):
        for i, rid in sources.get(key, {}).items():
            if len(out) >= n and key != "entities":
                break
            out.setdefault(i, rid)
    lists = [list(sources.get(key, {}).items()) for key in ("words", "meaning")]
    for rank in range(max((len(x) for x in lists), default=0)):
        for ranked in lists:
            if rank < len(ranked) and len(out) < n:
                out.setdefault(*ranked[rank])
    return out


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
