"""Per-camera semantic context: scene type, routines and an anomaly baseline (DESIGN §4, §5).

A camera's context is derived from its recent traces and revised once enough new traces exist
(:func:`maybe_revise`): the first revision needs ``min_traces`` traces, each later one
``revise_every`` more. A user (the ``context_set`` tool) may set any field; a field set by hand
is *locked* and later revisions leave it alone. The scene type doubles as the camera's place
name for the consolidator ("usually at the cafe in the morning").

Derivation (deterministic, no model): the scene type is the vocabulary of
:data:`SCENE_WORDS` best matched by the traces' objects, summaries and OCR; routines are the
time-of-day buckets that are busy on at least two days, and the entities seen on at least two
days with their usual bucket; the baseline records people per segment and active hours, so
"someone at 3 am" or "six people" reads as unusual against it.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime, tzinfo
from typing import Any

from pydantic import BaseModel, Field

from ..models import Trace, stable_id
from ..search.modes import sql_literal
from ..store.facade import MemoryStore

__all__ = ["CameraContext", "ContextSettings", "SCENE_WORDS", "derive_context", "get_context", "list_contexts",
           "maybe_revise", "places", "set_context", "time_bucket", "traces_until_revision"]

logger = logging.getLogger(__name__)

TABLE = "camera_context"
#: fields a user may set (and thereby lock)
EDITABLE = ("scene_type", "routines", "anomaly_baseline", "notes")

#: scene type → words that suggest it (object labels, summary and OCR words)
SCENE_WORDS: dict[str, tuple[str, ...]] = {
    "kitchen": ("kitchen", "kettle", "stove", "oven", "fridge", "refrigerator", "sink", "microwave"),
    "cafe": ("cafe", "coffee", "espresso", "latte", "barista", "mug", "coffee cup", "menu"),
    "gym": ("gym", "treadmill", "dumbbell", "stationary bicycle", "workout", "weights", "exercise"),
    "office": ("office", "laptop", "computer monitor", "computer mouse", "keyboard", "desk", "meeting"),
    "living room": ("living room", "sofa", "couch", "television", "tv", "armchair"),
    "street": ("street", "car", "vehicle", "traffic", "sidewalk", "bus", "road"),
    "entrance": ("entrance", "front door", "doorbell", "porch", "hallway", "door"),
    "stage": ("stage", "microphone", "audience", "podium", "spotlight", "singer"),
}

BUCKETS = (("night", 0, 5), ("morning", 5, 12), ("afternoon", 12, 17), ("evening", 17, 22), ("night", 22, 24))


def time_bucket(wall: float, tz: tzinfo | None) -> str:
    """Time of day of a wall-clock epoch second: morning, afternoon, evening or night."""
    hour = datetime.fromtimestamp(wall, tz).hour
    return next(name for name, lo, hi in BUCKETS if lo <= hour < hi)


def day_of(wall: float, tz: tzinfo | None) -> str:
    """The calendar day of a wall-clock epoch second (``YYYY-MM-DD``)."""
    return datetime.fromtimestamp(wall, tz).strftime("%Y-%m-%d")


class CameraContext(BaseModel):
    """What is normal for one camera."""

    camera_id: str
    scene_type: str = Field("", description="what the camera shows, e.g. kitchen, cafe, entrance")
    routines: list[str] = Field(default_factory=list, description="what usually happens, and when")
    anomaly_baseline: str = Field("", description="what counts as normal, so the unusual stands out")
    notes: str = Field("", description="free text from the user")
    locked: list[str] = Field(default_factory=list, description="fields set by hand; revisions keep them")
    revision: int = Field(0, description="automatic revisions so far")
    trace_count: int = Field(0, description="traces of the camera at the last revision")
    baseline: dict[str, Any] = Field(default_factory=dict, description="numbers behind the baseline")
    updated_at: float = 0.0


@dataclass(frozen=True)
class ContextSettings:
    """When a camera's context is revised, and how much history one revision reads."""

    min_traces: int = 20
    revise_every: int = 50
    history_limit: int = 500
    timezone: tzinfo | None = None  # None: the machine's local time


def _row(ctx: CameraContext) -> dict[str, Any]:
    data = ctx.model_dump(exclude={"baseline"})
    return {**data, "id": stable_id("ctx_", ctx.camera_id), "baseline_json": json.dumps(ctx.baseline)}


def _from_row(row: dict[str, Any]) -> CameraContext:
    data = {k: v for k, v in row.items() if k in CameraContext.model_fields and v is not None}
    data["baseline"] = json.loads(row.get("baseline_json") or "{}")
    return CameraContext.model_validate(data)


def get_context(store: MemoryStore, camera_id: str) -> CameraContext | None:
    """The stored context of ``camera_id``, or None."""
    rows = store.scan_rows(TABLE, f"camera_id = {sql_literal(camera_id)}", limit=1)
    return _from_row(rows[0]) if rows else None


def list_contexts(store: MemoryStore, limit: int = 50) -> list[CameraContext]:
    """Stored camera contexts, by camera id."""
    return sorted((_from_row(r) for r in store.scan_rows(TABLE)), key=lambda c: c.camera_id)[:limit]


def places(store: MemoryStore) -> dict[str, str]:
    """``{camera id: scene type}`` for cameras whose scene type is known."""
    return {c.camera_id: c.scene_type for c in list_contexts(store, limit=10_000) if c.scene_type}


def set_context(store: MemoryStore, camera_id: str, **fields: Any) -> CameraContext:
    """Set fields of a camera's context by hand (they become locked); ``None`` values are ignored.

    An empty string or list unlocks the field, so the next revision derives it again.
    """
    unknown = set(fields) - set(EDITABLE)
    if unknown:
        raise ValueError(f"cannot set {', '.join(sorted(unknown))}; settable fields: {', '.join(EDITABLE)}")
    ctx = get_context(store, camera_id) or CameraContext(camera_id=camera_id)
    locked = set(ctx.locked)
    updates: dict[str, Any] = {}
    for name, value in fields.items():
        if value is None:
            continue
        updates[name] = value
        if value in ("", []):
            locked.discard(name)
        else:
            locked.add(name)
    ctx = ctx.model_copy(update={**updates, "locked": sorted(locked), "updated_at": time.time()})
    store.upsert_rows(TABLE, [_row(ctx)])
    return ctx


def derive_context(camera_id: str, traces: list[Trace], tz: tzinfo | None) -> CameraContext:
    """Derive scene type, routines and baseline from ``traces`` (pure)."""
    words: Counter[str] = Counter()
    for t in traces:
        text = " ".join([t.summary, t.ocr_text, *t.objects]).lower()
        for scene, vocab in SCENE_WORDS.items():
            words[scene] += sum(1 for w in vocab if re.search(rf"\b{re.escape(w)}\b", text))
    best = words.most_common(2)
    scene = best[0][0] if best and best[0][1] > 0 and (len(best) < 2 or best[0][1] > best[1][1]) else ""

    days_per_bucket: dict[str, set[str]] = defaultdict(set)
    entity_days: dict[str, set[str]] = defaultdict(set)
    entity_buckets: dict[str, Counter[str]] = defaultdict(Counter)
    hours: Counter[int] = Counter()
    people = []
    for t in traces:
        bucket, day = time_bucket(t.wall_start, tz), day_of(t.wall_start, tz)
        days_per_bucket[bucket].add(day)
        hours[datetime.fromtimestamp(t.wall_start, tz).hour] += 1
        persons = [e for e in t.entity_ids if e.startswith("person_")]
        people.append(len(persons))
        for e in t.entity_ids:
            entity_days[e].add(day)
            entity_buckets[e][bucket] += 1
    routines = [f"usually active in the {b} ({len(d)} days)" for b, d in
                sorted(days_per_bucket.items(), key=lambda kv: -len(kv[1])) if len(d) >= 2]
    for e, d in sorted(entity_days.items(), key=lambda kv: (-len(kv[1]), kv[0]))[:8]:
        if len(d) >= 2:
            routines.append(f"{e} appears most days in the {entity_buckets[e].most_common(1)[0][0]} ({len(d)} days)")
    active = sorted(h for h, n in hours.items() if n >= max(1, 0.05 * len(traces)))
    baseline = {"traces": len(traces), "people_mean": round(sum(people) / len(people), 2) if people else 0.0,
                "people_max": max(people, default=0), "active_hours": active}
    text = (f"typically {baseline['people_mean']} people per segment (at most {baseline['people_max']}); "
            f"active hours {', '.join(f'{h:02d}h' for h in active) or 'none yet'}; "
            "activity outside these hours or more people than usual is unusual")
    return CameraContext(camera_id=camera_id, scene_type=scene, routines=routines, anomaly_baseline=text,
                         baseline=baseline)


def _progress(store: MemoryStore, camera_id: str, settings: ContextSettings) -> tuple[CameraContext, int, int]:
    """The camera's context, its trace count now, and the count at which the next revision is due."""
    current = get_context(store, camera_id) or CameraContext(camera_id=camera_id)
    count = store.count_traces(camera_id)
    needed = settings.min_traces if current.revision == 0 else current.trace_count + settings.revise_every
    return current, count, needed


def traces_until_revision(store: MemoryStore, camera_id: str, settings: ContextSettings | None = None) -> int:
    """How many more traces ``camera_id`` needs before :func:`maybe_revise` revises it (0: due now).

    Lets a caller that sees every new trace skip the two store reads of ``maybe_revise`` until then.
    """
    _current, count, needed = _progress(store, camera_id, settings or ContextSettings())
    return max(0, needed - count)


def maybe_revise(store: MemoryStore, camera_id: str, settings: ContextSettings | None = None,
                 force: bool = False) -> CameraContext | None:
    """Revise ``camera_id``'s context when enough new traces exist; returns the new context or None."""
    settings = settings or ContextSettings()
    current, count, needed = _progress(store, camera_id, settings)
    if not force and count < needed:
        return None
    derived = derive_context(camera_id, store.recent_traces(camera_id, settings.history_limit), settings.timezone)
    keep = {name: getattr(current, name) for name in current.locked}
    revised = derived.model_copy(update={**keep, "locked": current.locked, "notes": current.notes,
                                         "revision": current.revision + 1, "trace_count": count,
                                         "updated_at": time.time()})
    store.upsert_rows(TABLE, [_row(revised)])
    logger.info("revised context of camera %s (revision %d, %d traces): %s", camera_id, revised.revision, count,
                revised.scene_type or "scene unknown")
    return revised
