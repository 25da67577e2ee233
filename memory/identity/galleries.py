"""Gallery slots a segment writes count for identity only once the segment is committed.

:meth:`~memory.store.facade.MemoryStore.write_segment` commits a segment as one write per table, with
``ingest_log`` (the resume point) last. Should a process die after the gallery writes and before
``ingest_log``, the resumed run analyses that segment again, and if the galleries then held the
slots its first attempt wrote, its faces would match themselves (cosine 1.0) where the first
attempt created or extended entities: the re-run would decide differently from an uninterrupted run.

So every slot row a segment writes names that segment (``source``, ``segment_index``) and keeps the
content it replaced (``prior``: JSON, null for a slot the segment created). A row counts as written
once its segment is at or before its source's resume point; until then readers see its prior, and
a slot the segment created not at all. Slots written outside segments (enrolment, merges) name no
segment and always count. A re-run of the segment overwrites its rows and restores the ones it no
longer writes (:func:`restored`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["GALLERY_TABLES", "committed", "restored", "stamped", "visible"]

GALLERY_TABLES = ("gallery_face", "gallery_body", "gallery_voice", "gallery_object")

#: the columns a segment's write sets and a prior restores (a slot's id and entity stay: merges move
#: slots between entities after the fact, and restoring must not undo that)
CONTENT = ("embedding", "quality", "keyframe_id", "created_at", "turn", "label", "camera_id", "source",
           "segment_index")

#: ``source -> last committed segment index``
Points = Mapping[str, int]


def committed(row: Mapping[str, Any], points: Points) -> bool:
    """Whether the segment that wrote ``row`` is committed (rows of identity edits always are)."""
    source = row.get("source")
    if not source:
        return True
    last, index = points.get(source), row.get("segment_index")
    return last is not None and index is not None and index <= last


def restored(row: Mapping[str, Any]) -> dict[str, Any] | None:
    """``row`` as it was before its segment wrote it; ``None`` when that segment created the slot."""
    prior = row.get("prior")
    if not prior:
        return None
    return {**row, **json.loads(prior), "prior": None}


def visible(row: Mapping[str, Any], points: Points) -> dict[str, Any] | None:
    """What identity sees of ``row``: itself when committed, else its prior (``None``: nothing)."""
    return dict(row) if committed(row, points) else restored(row)


def stamped(rows: Sequence[Mapping[str, Any]], stored: Mapping[str, Mapping[str, Any]], source: str,
            segment_index: int, points: Callable[[], Points]) -> list[dict[str, Any]]:
    """One segment's slot rows, each naming the segment and keeping the content it replaces.

    ``stored``: the rows with the same ids already in the table. A row this segment wrote before
    (a re-run) keeps the prior it had; any other stored row becomes the prior, as identity saw it.
    ``points`` is only called when a stored row's own segment must be checked.
    """
    out = []
    for row in rows:
        old = stored.get(row["id"])
        if old is None:
            prior = None
        elif old.get("source") == source and old.get("segment_index") == segment_index:
            prior = old.get("prior")
        else:
            seen = visible(old, points())
            prior = json.dumps({k: _plain(seen[k]) for k in CONTENT if k in seen}) if seen is not None else None
        out.append({**row, "source": source, "segment_index": segment_index, "prior": prior})
    return out


def _plain(value: Any) -> Any:
    """A JSON-ready copy of a column value (embeddings arrive as lists or numpy arrays)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    return value
