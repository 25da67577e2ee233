"""Search cards: the columns a search reads of a row, kept together as one JSON string.

LanceDB reads the rows a search picks column by column, and each column of each row costs about as
much as the next (≈ 25 µs at a million traces): the 24 candidates of a search cost ≈ 8 ms over the
14 columns ranking and hits need, and ≈ 2 ms from one column. So the large, time-series levels
(:data:`CARD_COLUMNS`) carry a ``card`` column: a JSON object of those columns, written with every
row (:func:`card_json`, from ``MemoryStore``'s row builder) and filled in for rows written before it
existed by a SQL expression LanceDB evaluates itself (:func:`card_sql`, migrations 8 and 9), so the
backfill neither moves rows nor touches their indexes. :func:`read_card` turns one back into the
row; a row without a usable card is read column by column.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

__all__ = ["CARD_COLUMN", "CARD_COLUMNS", "add_cards", "card_json", "card_sql", "read_card"]

CARD_COLUMN = "card"

#: per level, the columns its card holds (what a search ranks and shows)
CARD_COLUMNS: dict[str, tuple[str, ...]] = {
    "traces": ("id", "text", "transcript", "quotes", "ocr_text", "objects", "entity_ids", "camera_id", "source",
               "segment_index", "t_start", "t_end", "wall_start", "keyframe_ids"),
    "observations": ("id", "text", "entity_id", "camera_id", "source", "segment_index", "t_start", "t_end",
                     "wall_start", "keyframe_ids"),
}


def _plain(value: Any) -> Any:
    """numpy scalars as Python numbers (json cannot write them)."""
    item = getattr(value, "item", None)
    if item is None:
        raise TypeError(f"{type(value).__name__} is not JSON serialisable")
    return item()


def card_json(level: str, row: dict[str, Any]) -> str:
    """The card of ``row`` (a full row of ``level``)."""
    return json.dumps({c: row.get(c) for c in CARD_COLUMNS[level]}, ensure_ascii=False, separators=(",", ":"),
                      default=_plain)


def add_cards(level: str, rows: pa.Table) -> pa.Table:
    """``rows`` with their ``card`` column (computed from theirs when missing)."""
    if CARD_COLUMN in rows.column_names:
        return rows
    records = rows.select(list(CARD_COLUMNS[level])).to_pylist()
    return rows.append_column(CARD_COLUMN, pa.array([card_json(level, r) for r in records], pa.string()))


def read_card(text: str | None) -> dict[str, Any] | None:
    """The columns a card holds, or None when there is none (or it cannot be read)."""
    if not text:
        return None
    try:
        row = json.loads(text)
    except ValueError:
        return None
    return row if isinstance(row, dict) else None


# ---------------------------------------------------------------------------------------- SQL backfill

_SEP = "chr(31)"  # joins list items before escaping; items holding U+001F are split at it


def _escaped(expr: str, keep_separator: bool = False) -> str:
    """SQL that escapes the string ``expr`` for a JSON string body (other control characters become
    spaces). SQL string literals take backslashes literally."""
    out = f"replace({expr}, '\\', '\\\\')"
    out = f"replace({out}, '\"', '\\\"')"
    for code, escape in ((10, "\\n"), (13, "\\r"), (9, "\\t")):
        out = f"replace({out}, chr({code}), '{escape}')"
    controls = "[\\x00-\\x08\\x0B\\x0C\\x0E-\\x1E]" if keep_separator else "[\\x00-\\x08\\x0B\\x0C\\x0E-\\x1F]"
    return f"regexp_replace({out}, '{controls}', ' ', 'g')"


def _value_sql(column: str, kind: pa.DataType) -> str:
    """SQL for the JSON text of one column's value."""
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return f"CASE WHEN {column} IS NULL THEN 'null' ELSE concat('\"', {_escaped(column)}, '\"') END"
    if pa.types.is_integer(kind) or pa.types.is_floating(kind):
        return f"coalesce(CAST({column} AS VARCHAR), 'null')"
    if pa.types.is_list(kind) and pa.types.is_string(kind.value_type):
        joined = _escaped(f"array_to_string({column}, {_SEP})", keep_separator=True)
        return (f"CASE WHEN {column} IS NULL THEN 'null' WHEN cardinality({column}) = 0 THEN '[]' "
                f"ELSE concat('[\"', replace({joined}, {_SEP}, '\",\"'), '\"]') END")
    raise TypeError(f"no SQL card encoding for column {column!r} of type {kind}")


def card_sql(level: str, schema: pa.Schema) -> str:
    """A SQL expression LanceDB evaluates to each row's card (the same JSON :func:`card_json` writes,
    up to number formatting and control characters other than tab, CR and LF)."""
    parts = []
    for n, column in enumerate(CARD_COLUMNS[level]):
        parts.append(f"'{',' if n else '{'}\"{column}\":'")
        parts.append(_value_sql(column, schema.field(column).type))
    return "concat(" + ", ".join(parts) + ", '}')"
