"""A read-only view of a store as it stood at a media second: nothing dated after the cut gets through.

Benchmarks ask a question at time ``T`` of a video and must answer from what was seen up to ``T``.
Filtering the trace search alone is not enough: facts, entities, chapters, neighbours and key frames
all carry information from later. :class:`TimeCut` applies the cut to every level and every way in:

* **traces, observations, chapters** — only rows that *ended* by ``until`` (``t_end <= until``);
* **key frames** — only frames taken by ``until``;
* **facts** — only facts whose evidence (trace / observation ids) is all admissible; a fact without
  evidence (a name the user gave) only when every entity it is about is admissible;
* **entities** — only entities with an admissible observation, shown redacted: id, kind, names, and
  first/last seen and sightings recounted from admissible observations (a consolidated description,
  written from later evidence, is withheld);
* **get** — the item must be admissible; its neighbours, children and linked entities are filtered
  the same way; an entity's "latest observations" are its latest admissible ones.

``camera`` optionally limits the view to one camera; ``levels`` switches levels off (ablations).
An inadmissible id is reported as unknown, exactly like an id that does not exist.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import NotFoundError
from ..models import ID_PREFIXES, Entity, GetResult, Keyframe, SearchHit
from ..store.facade import MemoryStore
from .modes import sql_in, sql_literal

__all__ = ["TimeCut"]

_TIMED = ("traces", "observations", "schemas")
_EPS = 1e-6


class TimeCut:
    """``store`` seen at media second ``until`` (None: no cut), optionally one ``camera`` and some ``levels``."""

    def __init__(self, store: MemoryStore, until: float | None = None, camera: str | None = None,
                 levels: Sequence[str] | None = None) -> None:
        self.store, self.until, self.camera = store, until, camera
        self.levels = set(levels) if levels is not None else {"traces", "observations", "entities", "schemas", "facts"}

    # ------------------------------------------------------------------ admissibility

    def _timed_ok(self, row: dict[str, Any]) -> bool:
        if self.camera is not None and row.get("camera_id") not in (None, self.camera):
            return False
        if self.until is None:
            return True
        end = row.get("t_end", row.get("t"))
        return end is not None and float(end) <= self.until + _EPS

    def _admissible_ids(self, ids: Sequence[str]) -> set[str]:
        """The subset of trace / observation / chapter ids that pass the cut."""
        out: set[str] = set()
        by_level: dict[str, list[str]] = {}
        for i in ids:
            level = _level_of(i)
            if level in _TIMED:
                by_level.setdefault(level, []).append(i)
        for level, group in by_level.items():
            rows = self.store._scan(level, f"id IN {sql_in(group)}", columns=["id", "camera_id", "t_end"])
            out.update(r["id"] for r in rows if self._timed_ok(r))
        return out

    def _entity_observations(self, entity_id: str, limit: int | None = None) -> list[dict[str, Any]]:
        where = f"entity_id = {sql_literal(entity_id)}"
        if self.until is not None:
            where += f" AND t_end <= {self.until + _EPS!r}"
        if self.camera is not None:
            where += f" AND camera_id = {sql_literal(self.camera)}"
        rows = self.store._scan("observations", where)
        rows.sort(key=lambda r: (r["wall_start"], r["t_start"], r["id"]), reverse=True)
        return rows[:limit] if limit is not None else rows

    def _entity(self, entity_id: str) -> Entity | None:
        """The entity as known at the cut (redacted), or None when it was not seen by then."""
        try:
            entity = self.store.get_entity(entity_id)
        except NotFoundError:
            return None
        if self.until is None and self.camera is None:
            return entity
        seen = self._entity_observations(entity.id)
        if not seen:
            return None
        walls = [float(r["wall_start"]) for r in seen]
        return Entity(id=entity.id, kind=entity.kind, name=entity.name, aliases=entity.aliases,
                      first_seen=min(walls), last_seen=max(walls), sightings=len({(r["source"], r["segment_index"])
                                                                                  for r in seen}),
                      cameras=sorted({r["camera_id"] for r in seen}))

    def _fact_ok(self, row: dict[str, Any]) -> bool:
        if self.until is None and self.camera is None:
            return True
        evidence = list(row.get("evidence_ids") or [])
        if evidence:
            return self._admissible_ids(evidence) == set(evidence)
        return bool(row.get("entity_ids")) and all(self._entity(e) is not None for e in row["entity_ids"])

    def _row_ok(self, level: str, row: dict[str, Any]) -> bool:
        if level in _TIMED:
            return self._timed_ok(row)
        if level == "facts":
            return self._fact_ok(row)
        if level == "entities":
            return self._entity(row["id"]) is not None
        return True

    def _check_level(self, level: str) -> None:
        if level not in self.levels:
            raise ValueError(f"the {level} level is switched off in this run; search "
                             f"{' or '.join(sorted(self.levels))} instead")

    # ------------------------------------------------------------------ reads

    def search(self, query: str, level: str = "traces", camera: str | None = None, entity: str | None = None,
               start: float | None = None, end: float | None = None, limit: int = 5) -> list[SearchHit]:
        """Search one level inside the cut (see the module docstring)."""
        self._check_level(level)
        if self.camera is not None and camera not in (None, self.camera):
            return []
        camera = self.camera or camera
        if level in _TIMED:
            return self.store.search(query, level=level, camera=camera, entity=entity, start=start, end=end,
                                     limit=limit, until=self.until)  # type: ignore[arg-type]
        pool = self.store.search(query, level=level, camera=camera, entity=entity,  # type: ignore[arg-type]
                                 limit=limit * 4)
        hits: list[SearchHit] = []
        for hit in pool:
            if level == "entities":
                known = self._entity(hit.id)
                if known is None:
                    continue
                names = " ".join(n for n in [known.name, *known.aliases] if n)
                hit = hit.model_copy(update={"text": f"{known.id} {known.kind} {names}".strip()})
            elif not self._fact_ok(self.store._row("facts", hit.id) or {}):
                continue
            hits.append(hit)
            if len(hits) == limit:
                break
        return hits

    def get(self, item_id: str, neighbors: int = 1) -> GetResult:
        """Open an admissible item with its admissible neighbours, children and entities.

        Raises:
            NotFoundError: the id does not exist, or not by the cut, or its level is switched off.
        """
        level = _level_of(item_id)
        if level is None or level not in self.levels:
            raise NotFoundError(item_id)
        if level == "entities":
            entity = self._entity(item_id)
            if entity is None:
                raise NotFoundError(item_id)
            latest = [_public(r) for r in self._entity_observations(entity.id, max(neighbors, 1))]
            return GetResult(item=entity.model_dump(), level="entities", after=latest, entities=[])
        row = self.store._row(level, item_id)
        if row is None or not self._row_ok(level, row):
            raise NotFoundError(item_id)
        # ask for extra neighbours: later ones past the cut are dropped below
        result = self.store.get(item_id, neighbors=neighbors)
        before = [r for r in result.before if self._row_ok(level, r)]
        after = [r for r in result.after if self._row_ok(level, r)]
        children = [r for r in result.children if self._timed_ok(r)]
        entities = [e for e in (self._entity(x.id) for x in result.entities) if e is not None]
        item = dict(result.item)
        return GetResult(item=item, level=result.level, before=before, after=after, entities=entities,
                         children=children)

    def keyframes(self, ids: Sequence[str]) -> list[Keyframe]:
        """Key frames taken by the cut (others are skipped like unknown ids)."""
        return [kf for kf in self.store.keyframes(ids)
                if (self.until is None or kf.t <= self.until + _EPS) and self.camera in (None, kf.camera_id)]

    def keyframe_ids(self, item_id: str) -> list[str]:
        """Key-frame ids behind an admissible memory (a key-frame id stands for itself)."""
        if item_id.startswith("kf_"):
            return [item_id]
        result = self.get(item_id, neighbors=0)
        ids = list(result.item.get("keyframe_ids") or [])  # type: ignore[call-overload]
        if not ids and result.level == "entities":
            for obs in result.after:
                ids.extend(obs.get("keyframe_ids") or [])  # type: ignore[call-overload]
        return list(dict.fromkeys(str(i) for i in ids))


def _level_of(item_id: str) -> str | None:
    return next((lv for prefix, lv in ID_PREFIXES.items() if item_id.startswith(prefix)), None)


def _public(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in ("vector", "user_id", "jpeg") and not k.startswith("_")}
