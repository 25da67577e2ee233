"""Already spoken: which memories a proactive reminder has cited, so none is said twice.

Table ``spoken`` (one row per evidence id and reminder, ids ``spk_<12 hex>``): the evidence id, the
reminder's notification id and text, the camera and the wall time it was said. Rows survive
restarts; the set is cached in memory and re-read when the table's version changes (another
process said something; looked at every ``check_s``). Forgetting an entity deletes the notes that name it and these rows with
them (``memory/identity/identity_ops.py``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

from ..models import stable_id
from ..search.modes import sql_in

__all__ = ["SPOKEN_TABLE", "SpokenMemory"]

SPOKEN_TABLE = "spoken"


class SpokenMemory:
    """The evidence ids already said, over an open store."""

    def __init__(self, store: Any, check_s: float = 2.0) -> None:
        self.store = store
        #: how often the table's version is looked at (this process's own records apply at once)
        self.check_s = check_s
        self._lock = threading.Lock()
        self._version: int | None = None
        self._checked = float("-inf")
        self._said: dict[str, float] = {}

    def said(self, horizon_s: float | None = None, now: float | None = None) -> set[str]:
        """Evidence ids said (within ``horizon_s`` of ``now`` when given: older ones may be said again)."""
        with self._lock:
            now_m = time.monotonic()
            version = self._version
            if now_m - self._checked >= self.check_s:
                self._checked, version = now_m, self.store.table_version(SPOKEN_TABLE)
            if version != self._version:
                said: dict[str, float] = {}
                for row in self.store.scan_rows(SPOKEN_TABLE):
                    said[row["evidence_id"]] = max(said.get(row["evidence_id"], 0.0), row["spoken_at"] or 0.0)
                self._said, self._version = said, version
            if horizon_s is None:
                return set(self._said)
            cut = (now if now is not None else time.time()) - horizon_s
            return {e for e, at in self._said.items() if at >= cut}

    def record(self, evidence_ids: Sequence[str], notification_id: str, camera_id: str, text: str,
               spoken_at: float) -> None:
        """Remember that ``evidence_ids`` were said in notification ``notification_id``."""
        rows = [{"id": stable_id("spk_", self.store.user_id, e, notification_id), "evidence_id": e,
                 "notification_id": notification_id, "camera_id": camera_id, "text": text, "spoken_at": spoken_at,
                 "created_at": time.time()} for e in dict.fromkeys(evidence_ids)]
        self.store.upsert_rows(SPOKEN_TABLE, rows)
        with self._lock:
            for e in evidence_ids:
                self._said[e] = max(self._said.get(e, 0.0), spoken_at)

    def forget(self, evidence_ids: Iterable[str]) -> int:
        """Delete the rows of ``evidence_ids`` (their memories were erased)."""
        ids = sorted(set(evidence_ids))
        return self.store.delete_rows(SPOKEN_TABLE, f"evidence_id IN {sql_in(ids)}") if ids else 0
