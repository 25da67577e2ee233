"""Search as data: modes and SQL filter building.

The retriever (``memory/search/retrieval.py``) runs LanceDB queries per level; this module decides *what*
they filter on:

* :class:`SearchMode` — which candidate sources a search uses: ``vector`` (cosine over the ``vector``
  column), ``fts`` (BM25 over the ``text`` column's inverted index; rows added after the index was
  built are found by a flat scan of unindexed fragments) or ``hybrid`` (both). Candidates from either
  are ranked together by ``memory/search/ranking.py``.
* :func:`build_where` — the per-level filter for user, camera, entity and media-time range.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from enum import Enum


class SearchMode(str, Enum):
    """How a query is matched."""

    VECTOR = "vector"
    FTS = "fts"
    HYBRID = "hybrid"


#: columns each searchable level can be filtered on.
_CAMERA_COLUMN = {"traces": "camera_id", "observations": "camera_id", "schemas": "camera_id"}
_CAMERA_LIST_COLUMN = {"entities": "cameras"}
_ENTITY_COLUMN = {"observations": "entity_id", "entities": "id"}
_ENTITY_LIST_COLUMN = {"traces": "entity_ids", "schemas": "entity_ids", "facts": "entity_ids"}
_TIMED = {"traces", "observations", "schemas"}


def sql_literal(value: str) -> str:
    """Quote ``value`` as a SQL string literal (single quotes doubled)."""
    return "'" + str(value).replace("'", "''") + "'"


def sql_list(values: Iterable[str]) -> str:
    """Quote ``values`` as a SQL array literal ``['a', 'b']``."""
    return "[" + ", ".join(sql_literal(v) for v in values) + "]"


def sql_in(values: Iterable[str]) -> str:
    """Quote ``values`` as the parenthesised list of a SQL ``IN``."""
    return "(" + ", ".join(sql_literal(v) for v in values) + ")"


def build_where(level: str, user_id: str, camera: str | None = None, entity: str | Sequence[str] | None = None,
                start: float | None = None, end: float | None = None) -> str:
    """Return the SQL filter for ``level``.

    Filters that a level has no column for are not applied to it (entities and facts have no media
    time; facts have no camera), so ``level="all"`` can share one set of filters. The time range
    keeps rows that overlap ``[start, end]``.
    """
    clauses = [f"user_id = {sql_literal(user_id)}"]
    if camera is not None:
        if level in _CAMERA_COLUMN:
            clauses.append(f"{_CAMERA_COLUMN[level]} = {sql_literal(camera)}")
        elif level in _CAMERA_LIST_COLUMN:
            clauses.append(f"array_has_any({_CAMERA_LIST_COLUMN[level]}, {sql_list([camera])})")
    if entity:
        ids = [entity] if isinstance(entity, str) else list(entity)
        if level in _ENTITY_COLUMN:
            clauses.append(f"{_ENTITY_COLUMN[level]} IN {sql_in(ids)}")
        elif level in _ENTITY_LIST_COLUMN:
            clauses.append(f"array_has_any({_ENTITY_LIST_COLUMN[level]}, {sql_list(ids)})")
    if level in _TIMED:
        if start is not None:
            clauses.append(f"t_end >= {float(start)!r}")
        if end is not None:
            clauses.append(f"t_start <= {float(end)!r}")
    return " AND ".join(clauses)
