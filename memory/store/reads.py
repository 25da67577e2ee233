"""The store's reads: search, get with neighbours, traces, facts, galleries, entities, ingest state.

:class:`StoreReads` is one half of :class:`~memory.store.facade.MemoryStore` (the other is
:class:`~memory.store.writes.StoreWrites`). Records leave the store as pydantic models or plain
dicts without ``vector`` (and without ``jpeg`` except through :meth:`StoreReads.keyframes`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal

from ..errors import NotFoundError
from ..models import (
    ID_PREFIXES,
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
    Trace,
)
from ..search.modes import SearchMode, sql_in, sql_literal
from ..search.retrieval import Retriever, SearchOutcome
from .rows import model_from_row, public_row
from .schema import SEARCHABLE, table_schemas

_ENTITY_HINT = "call entity_list or memory_search to find entity ids"
#: most traces ``get`` returns under a chapter
CHAPTER_CHILDREN = 100


class StoreReads:
    """The read methods of :class:`~memory.store.facade.MemoryStore`."""

    # ------------------------------------------------------------------ plain reads

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

    def _rows_by_id(self, level: str, ids: Sequence[str], columns: list[str] | None = None) -> dict[str, dict]:
        if not ids:
            return {}
        return {r["id"]: r for r in self._scan(level, f"id IN {sql_in(ids)}", columns=columns)}

    # ------------------------------------------------------------------ search

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

    # ------------------------------------------------------------------ get with neighbours

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
            after = [public_row(r) for r in self._latest_observations(item_id, max(neighbors, 1))]
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
            children = [public_row(r) for r in sorted(found.values(), key=lambda r: (r["t_start"], r["id"]))]
        return GetResult(item=public_row(row), level=level, before=[public_row(r) for r in before],
                         after=[public_row(r) for r in after], entities=self._entities_by_id(linked),
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

    def _entities_by_id(self, ids: Sequence[str]) -> list[Entity]:
        rows = self._rows_by_id("entities", list(dict.fromkeys(ids)))
        return [model_from_row(Entity, rows[i]) for i in dict.fromkeys(ids) if i in rows]

    def _latest_observations(self, entity_id: str, limit: int | None) -> list[dict[str, Any]]:
        rows = self._scan("observations", f"entity_id = {sql_literal(entity_id)}")
        rows.sort(key=lambda r: (r["wall_start"], r["t_start"], r["id"]), reverse=True)
        return rows[:limit] if limit is not None else rows

    def keyframes(self, ids: Sequence[str]) -> list[Keyframe]:
        """Key frames (with JPEG bytes) in the order of ``ids``; unknown ids are skipped."""
        rows = self._rows_by_id("keyframes", list(ids))
        return [model_from_row(Keyframe, rows[i]) for i in ids if i in rows]

    # ------------------------------------------------------------------ traces and facts

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
        return [model_from_row(Trace, r) for r in sorted(rows.values(), key=lambda r: (r["t_start"], r["id"]))]

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
        return {(r["source"], int(r["segment_index"])): model_from_row(Trace, r) for r in rows}

    def traces_after(self, source: str, camera: str, after_t: float, limit: int) -> list[Trace]:
        """Up to ``limit`` traces of ``source``/``camera`` starting after media second ``after_t``, oldest first."""
        where = (f"source = {sql_literal(source)} AND camera_id = {sql_literal(camera)} "
                 f"AND t_start > {float(after_t)!r}")
        rows = sorted(self._scan("traces", where, columns=list(Trace.model_fields)), key=lambda r: (r["t_start"], r["id"]))
        return [model_from_row(Trace, r) for r in rows[:limit]]

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
        return [model_from_row(Trace, r) for r in rows[offset:offset + limit]]

    # ------------------------------------------------------------------ galleries

    def face_gallery(self) -> list[GalleryFace]:
        """All face-gallery slots of this user (for identity matching)."""
        return [model_from_row(GalleryFace, r) for r in self._slots("gallery_face")]

    def body_gallery(self) -> list[GalleryBody]:
        """All body-gallery slots of this user (for re-identification)."""
        return [model_from_row(GalleryBody, r) for r in self._slots("gallery_body")]

    def voice_gallery(self) -> list[GalleryVoice]:
        """All voice-gallery slots of this user (speaker identification)."""
        return [model_from_row(GalleryVoice, r) for r in self._slots("gallery_voice")]

    def object_gallery(self) -> list[GalleryObject]:
        """All object-appearance slots of this user (object re-identification)."""
        return [model_from_row(GalleryObject, r) for r in self._slots("gallery_object")]

    # ------------------------------------------------------------------ entities

    def list_entities(self, kind: EntityKind | None = None, limit: int = 50, offset: int = 0) -> list[Entity]:
        """Entities (not merged into another) ordered by id."""
        where = "merged_into IS NULL" + (f" AND kind = {sql_literal(kind)}" if kind else "")
        cols = [c for c in Entity.model_fields]
        rows = sorted(self._scan("entities", where, columns=cols), key=lambda r: r["id"])
        return [model_from_row(Entity, r) for r in rows[offset:offset + limit]]

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
                return model_from_row(Entity, row)
            current = target

    def entity_observations(self, entity_id: str, limit: int = 20) -> list[Observation]:
        """The entity's observations, newest (wall time) first."""
        self.get_entity(entity_id)  # raises NotFoundError for unknown ids
        return [model_from_row(Observation, r) for r in self._latest_observations(entity_id, limit)]

    # ------------------------------------------------------------------ ingest state

    def ingest_state(self, source: str) -> IngestState | None:
        """The resume record of ``source``, or None if it was never written."""
        rows = self._scan("ingest_log", f"source = {sql_literal(source)}", limit=1)
        return model_from_row(IngestState, rows[0]) if rows else None

    def ingest_sources(self) -> list[IngestState]:
        """Every source in the ingest log (files and live sources), with its camera id."""
        return [model_from_row(IngestState, r) for r in self._scan("ingest_log")]

    def resume_point(self, source: str) -> int | None:
        """The last committed segment index of ``source``, or None when nothing was committed."""
        state = self.ingest_state(source)
        if state is None or state.last_segment_index < 0:
            return None
        return state.last_segment_index

    # ------------------------------------------------------------------ tables

    def table_names(self) -> list[str]:
        """Every data table of the store."""
        return list(table_schemas(self.embedder.dim))

    def counts(self) -> dict[str, int]:
        """Row count of every data table, for this user."""
        where = self._user_where()
        return {name: self._table(name).count_rows(where) for name in table_schemas(self.embedder.dim)}
