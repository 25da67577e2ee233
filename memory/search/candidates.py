"""The LanceDB queries that gather a search's candidates, on LanceDB's public async API.

Full-text (BM25) and vector (cosine, exact on the stored vectors) queries return their rows' search
cards or columns with the row ids; the newest rows passing a filter, rows by ``id``, and the rows at
given row ids are read here too. :class:`~memory.search.retrieval.Retriever` runs them several at
once on lancedb's background event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
from lancedb import AsyncTable
from lancedb.query import AsyncQueryBase

from .cards import CARD_COLUMN, read_card
from .modes import sql_in

logger = logging.getLogger(__name__)

#: IVF partitions probed per vector query: at 1M traces 6, 12 and 24 probes lose the same similarity to
#: PQ quantisation (≈ 0.05 cosine over the top 10), so a few probes suffice
NPROBES = 8
#: the wall-clock column of each level that has one (newest rows first when only filters are asked for)
WALL_COLUMN = {"traces": "wall_start", "observations": "wall_start", "schemas": "wall_start"}


@dataclass
class Found:
    """A candidate query's row ids in rank order, with what it returned of them: cosine similarities
    (vector queries) and each row's card or search columns (see :func:`assemble_rows`)."""

    rowids: list[int]
    cosines: dict[int, float] = field(default_factory=dict)
    rows: dict[int, Any] = field(default_factory=dict)


async def gather_all(*jobs: Awaitable[Any]) -> list[Any]:
    return list(await asyncio.gather(*jobs))


async def arrow_of(query: AsyncQueryBase, rows: int | None = None) -> pa.Table:
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


async def fts_query(table: AsyncTable, text: str, where: str, k: int, columns: list[str]) -> Found:
    """Row ids of the ``k`` best BM25 matches of ``text``, best first, with their ``columns``."""
    query = (table.query().nearest_to_text(text, columns="text").select(["_score", *columns]).with_row_id()
             .limit(k))
    if where:
        query = query.where(where)
    try:
        batch = await arrow_of(query, k)
    except ValueError:  # a query the full-text parser rejects is matched by meaning only
        logger.info("full-text query %r rejected; using vector search only", text)
        return Found([])
    rowids = batch["_rowid"].to_pylist()
    return Found(rowids, rows=fetched_rows(batch, rowids, columns))


async def nearest_query(table: AsyncTable, vector: np.ndarray, where: str, k: int, columns: list[str]) -> Found:
    """Row ids of the ``k`` nearest rows, nearest first, with their ``columns`` and cosine similarity;
    the IVF_PQ candidates are re-scored on their stored vectors (``refine_factor(1)``), so the
    similarities are exact."""
    query = (table.vector_search(vector).column("vector").distance_type("cosine").nprobes(NPROBES)
             .refine_factor(1).select(["_distance", *columns]).with_row_id().limit(k))
    if where:
        query = query.where(where)  # a prefilter: the k nearest rows that pass it
    batch = await arrow_of(query, k)
    rowids = batch["_rowid"].to_pylist()
    return Found(rowids, dict(zip(rowids, (1.0 - d for d in batch["_distance"].to_pylist()))),
                  fetched_rows(batch, rowids, columns))


def fetched_rows(batch: pa.Table, rowids: list[int], columns: list[str]) -> dict[int, Any]:
    """Per row id, the card (one column) or the row (several) a query returned with its candidates."""
    if columns == [CARD_COLUMN]:
        return dict(zip(rowids, batch[CARD_COLUMN].to_pylist()))
    return dict(zip(rowids, batch.select(columns).to_pylist()))


async def latest_rowids(table: AsyncTable, level: str, where: str, k: int, order_by: str | None) -> list[int]:
    """Row ids of the ``k`` newest rows passing ``where`` (oldest for ``order_by="first"``)."""
    order = WALL_COLUMN.get(level)
    query = table.query().with_row_id()
    if where:
        query = query.where(where)
    if order is None:
        return (await arrow_of(query.select(["id"]).limit(k)))["_rowid"].to_pylist()
    batch = await arrow_of(query.select([order]))
    sign = 1 if order_by == "first" else -1
    keys = sorted(zip(batch[order].to_pylist(), batch["_rowid"].to_pylist()), key=lambda r: (r[0] or 0) * sign)
    return [rowid for _, rowid in keys[:k]]


async def read_rows(table: AsyncTable, where: str, columns: list[str]) -> list[dict[str, Any]]:
    """Every row passing ``where``."""
    return (await arrow_of(table.query().where(where).select(columns))).to_pylist()


async def rowids_by_id(table: AsyncTable, ids: list[str], user_where: str) -> list[int]:
    """Row ids of the rows with these ``id``s, in the order of ``ids``."""
    where = " AND ".join(w for w in (user_where, f"id IN {sql_in(ids)}") if w)
    batch = await arrow_of(table.query().where(where).select(["id"]).with_row_id())
    rowids = dict(zip(batch["id"].to_pylist(), batch["_rowid"].to_pylist()))
    return [rowids[i] for i in ids if i in rowids]


def parse_row(value: Any, carded: bool) -> dict[str, Any] | None:
    """The row a query returned (``value``: its card where ``carded``, else its columns); None when
    there is none or its card cannot be read."""
    if value is None:
        return None
    return read_card(value) if carded else dict(value)


def assemble_rows(rowids: list[int], carded: bool, fetched: dict[int, Any],
              parsed: dict[int, dict[str, Any]]) -> tuple[list[dict[str, Any]], list[int]]:
    """The rows at ``rowids`` that a query returned (``fetched``; ``parsed`` holds those already turned
    into rows), each with ``_rowid``, and the row ids still to be read."""
    rows: list[dict[str, Any]] = []
    take: list[int] = []
    for rowid in rowids:
        row = parsed.get(rowid)
        if row is None:
            row = parse_row(fetched.get(rowid), carded)
        if row is None:
            take.append(rowid)
        else:
            row["_rowid"] = rowid
            rows.append(row)
    return rows, take


async def take_rows(table: AsyncTable, columns: list[str], rowids: list[int], carded: bool) -> list[dict[str, Any]]:
    """The ``columns`` of the rows at ``rowids`` (with ``_rowid``); a row moved or deleted since is missing.

    From their cards where ``carded`` (one column instead of a dozen); a row without a usable card
    is read column by column.
    """
    if not carded:
        return (await arrow_of(table.take_row_ids(sorted(rowids)).select(columns).with_row_id(), len(rowids))).to_pylist()
    batch = await arrow_of(table.take_row_ids(sorted(rowids)).select([CARD_COLUMN]).with_row_id(), len(rowids))
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
        rows += (await arrow_of(table.take_row_ids(missing).select(columns).with_row_id(), len(missing))).to_pylist()
    return rows
