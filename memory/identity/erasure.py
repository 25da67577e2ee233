"""Erasure below the table level: after a forget, no older version still holds the forgotten rows.

LanceDB keeps every table version, and a delete only writes a deletion file beside the data file
that still holds the row (compaction rewrites a file only past a share of deleted rows). A
forgotten face embedding or key frame could therefore be read back with a checkout of an older
version, or straight from the files. :func:`erase_history` rewrites every live row of a table
into fresh files (one update of all rows, committed like any write, so it conflicts with — never
overwrites — a concurrent writer), rebuilds the full-text index, and removes every older version.

Removing older versions makes a reader that is still on one of them fail its current query; the
store's readers re-check the latest version on every read, so they recover on the next call.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from lancedb.index import FTS

__all__ = ["erase_history"]

logger = logging.getLogger(__name__)

_ATTEMPTS = 5


def erase_history(store: Any, tables: Iterable[str], searchable: Iterable[str] = ()) -> None:
    """Rewrite ``tables`` of ``store`` so only their current rows exist on disk, in one version.

    ``searchable`` tables also get a fresh full-text index (the old one indexed the erased text).

    Raises:
        OSError, RuntimeError: LanceDB could not rewrite a table after retrying commit conflicts.
    """
    fts = set(searchable)
    for name in tables:
        table = store._table(name)
        for attempt in range(_ATTEMPTS):
            try:
                if table.count_rows():
                    table.update(where="true", values_sql={"id": "id"})
                if name in fts:
                    table.create_index("text", config=FTS(), replace=True)
                with warnings.catch_warnings():
                    # LanceDB warns that pruning to the latest version fails readers still on an
                    # older one; that is intended here (see the module docstring).
                    warnings.simplefilter("ignore", UserWarning)
                    table.optimize(cleanup_older_than=timedelta(0))
                break
            except (OSError, RuntimeError) as exc:
                if "conflict" not in str(exc).lower() or attempt == _ATTEMPTS - 1:
                    raise
                logger.info("erasing old versions of %s met a concurrent commit; retrying", name)
                time.sleep(0.1 * (attempt + 1))
