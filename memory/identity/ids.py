"""Entity ids that are unique across every process and machine writing one store.

New entity ids (``person_0007``) come from a per-user, per-kind counter row in the ``id_alloc``
table. A process advances it with a *conditional* merge-insert: "set value to n + 1 where value
is still n". LanceDB commits are atomic and a concurrent commit makes the other writer re-check
the condition, so exactly one of two racing writers gets n + 1; the loser reads the counter again.
Duplicates are therefore impossible by construction, and because the counter never goes down, an
id is never handed out twice, not even after its entity was forgotten.

An allocation can carry a *claim key* (for the resolver: source, segment and face position). The
id given for a key is recorded in the same table, so a segment re-run after a crash gets the same
ids again instead of leaving orphaned entities behind.

Row layout (``id`` column): ``counter:<kind>`` rows hold ``value`` (the highest number handed out)
and, in ``entity_id``, a random stamp renewed by every write of the row; ``claim:<key>`` rows hold
``entity_id``.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable

import lancedb
import pyarrow as pa

from ..errors import MemoryStoreError
from ..search.modes import sql_literal

__all__ = ["IdAllocator"]

logger = logging.getLogger(__name__)

_MAX_ATTEMPTS = 200


class IdAllocator:
    """Atomic id allocation over the ``id_alloc`` table (see the module docstring).

    Args:
        table: the open ``id_alloc`` table. user_id: whose ids.
        seed: ``kind -> highest number already in use`` (read once, when a kind's counter is created).
        written: called after each commit (the store's optimise bookkeeping).
    """

    def __init__(self, table: lancedb.table.Table, user_id: str, seed: Callable[[str], int],
                 written: Callable[[], None] = lambda: None) -> None:
        self._table = table
        self._user = user_id
        self._seed = seed
        self._written = written

    def allocate(self, kind: str, key: str | None = None) -> str:
        """A fresh id of ``kind`` (``person_0007``), or the one already given for ``key``.

        Raises:
            MemoryStoreError: the counter could not be advanced (the store is unwritable or
                contended beyond reason).
        """
        if not re.fullmatch(r"[a-z]+", kind):
            raise ValueError(f"entity kind {kind!r} must be lower-case letters")
        if key is not None:
            found = self._claimed(key)
            if found is not None:
                return found
        entity_id = f"{kind}_{self._next_number(kind):04d}"
        if key is None:
            return entity_id
        inserted = self._insert({"id": f"claim:{key}", "kind": kind, "value": None, "entity_id": entity_id})
        if inserted:
            return entity_id
        found = self._claimed(key)  # another process claimed the key first; its id wins, ours is unused
        if found is None:
            raise MemoryStoreError(f"id claim {key!r} vanished while allocating; retry the write")
        return found

    # ------------------------------------------------------------------ internals

    def _rows(self, where: str) -> list[dict[str, object]]:
        clause = f"user_id = {sql_literal(self._user)} AND {where}"
        return self._table.search().where(clause).limit(None).to_list()

    def _claimed(self, key: str) -> str | None:
        rows = self._rows(f"id = {sql_literal('claim:' + key)}")
        return str(rows[0]["entity_id"]) if rows else None

    def _insert(self, row: dict[str, object]) -> bool:
        data = pa.Table.from_pylist([{**row, "user_id": self._user, "created_at": time.time()}],
                                    schema=self._table.schema)
        result = self._table.merge_insert(["user_id", "id"]).when_not_matched_insert_all().execute(data)
        self._written()
        return int(result.num_inserted_rows) == 1

    def _next_number(self, kind: str) -> int:
        counter = f"counter:{kind}"
        for attempt in range(_MAX_ATTEMPTS):
            rows = self._rows(f"id = {sql_literal(counter)}")
            if not rows:
                self._insert({"id": counter, "kind": kind, "value": self._seed(kind), "entity_id": uuid.uuid4().hex})
                continue  # ours or a concurrent writer's seed: read it back either way
            # Two processes that find no counter may both seed it, so there can be several counter rows.
            # The counter is their highest value; an update moves every row at that value that this
            # process read, named by the stamp each row got at its last write. It counts only if it moved
            # all of them: a row another writer advanced meanwhile has a new stamp, and a merge that
            # LanceDB re-runs on that writer's commit then moves fewer rows (or none), so the number
            # read here may have been handed out and is not used. Rows this process never saw (a late
            # seed) stay behind at a lower value, which the highest one outranks.
            current = max(int(r["value"]) for r in rows)  # type: ignore[arg-type]
            top = [r for r in rows if int(r["value"]) == current]  # type: ignore[arg-type]
            stamps = [str(r["entity_id"]) for r in top if r["entity_id"]]
            seen = [f"target.entity_id IN ({', '.join(sql_literal(s) for s in stamps)})"] if stamps else []
            if len(stamps) < len(top):
                seen.append("target.entity_id IS NULL")  # rows written before counters were stamped
            data = pa.Table.from_pylist([{"user_id": self._user, "id": counter, "kind": kind, "value": current + 1,
                                          "entity_id": uuid.uuid4().hex, "created_at": time.time()}],
                                        schema=self._table.schema)
            where = f"target.value = {current} AND ({' OR '.join(seen)})"
            result = self._table.merge_insert(["user_id", "id"]).when_matched_update_all(where=where).execute(data)
            self._written()
            if int(result.num_updated_rows) == len(top):
                return current + 1
            time.sleep(min(0.001 * (attempt + 1), 0.05))  # another writer advanced it: read again
        raise MemoryStoreError(f"could not allocate a new {kind} id after {_MAX_ATTEMPTS} attempts; "
                               "is another process writing the store in a tight loop?")
