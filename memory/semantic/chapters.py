"""Narrative chapters (table ``schemas``): closed events accumulate into a chapter over their traces.

An *event* is a run of consecutive traces of one source and camera; it closes when the next
trace starts more than ``event_gap_s`` after it ends, when it reaches ``event_max_traces``
traces (rotation), or when the source is done. Closed events accumulate; a chapter is written
when ``budget_events`` (B) of them are pending, or when the pending ones span ``interval_s`` of
media time, or when the source is done. A chapter lists the trace ids it indexes, the entities
in them, and a short narrative; ``MemoryStore.get("sch_…")`` walks down to those traces.

Nothing is kept in memory between runs: pending events are the traces after the source's latest
chapter, so a restart resumes exactly, and chapter ids (over source, camera and first trace) make
a re-run rewrite the same rows. One run reads at most ``max_traces`` traces.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from ..models import Chapter, Trace, stable_id
from ..search.modes import sql_literal
from ..store.facade import MemoryStore

__all__ = ["ChapterSettings", "build_chapters", "split_events", "write_chapter_text"]

logger = logging.getLogger(__name__)

#: most characters of a chapter narrative
MAX_TEXT = 2000


@dataclass(frozen=True)
class ChapterSettings:
    """B, the interval and what closes an event."""

    budget_events: int = 5
    interval_s: float = 3600.0
    event_gap_s: float = 60.0
    event_max_traces: int = 30
    max_traces: int = 500


def split_events(traces: list[Trace], gap_s: float, max_traces: int) -> list[list[Trace]]:
    """Group time-ordered traces into events by gap and rotation (pure)."""
    events: list[list[Trace]] = []
    for t in traces:
        if events and t.t_start - events[-1][-1].t_end <= gap_s and len(events[-1]) < max_traces:
            events[-1].append(t)
        else:
            events.append([t])
    return events


def _clock(seconds: float) -> str:
    minutes, secs = divmod(max(seconds, 0.0), 60)
    hours, minutes = divmod(int(minutes), 60)
    return f"{hours}:{minutes:02d}:{int(secs):02d}" if hours else f"{minutes}:{int(secs):02d}"


def write_chapter_text(events: list[list[Trace]]) -> tuple[str, str]:
    """A deterministic title and narrative for ``events``."""
    lines = []
    for event in events:
        summaries = list(dict.fromkeys(t.summary for t in event if t.summary))
        shown = "; ".join(summaries[:3]) + (f" (+{len(summaries) - 3} more)" if len(summaries) > 3 else "")
        quotes = [q for t in event for q in t.quotes][:2]
        said = " Said: " + " / ".join(f'"{q}"' for q in quotes) + "." if quotes else ""
        lines.append(f"{_clock(event[0].t_start)}–{_clock(event[-1].t_end)}: {shown}.{said}")
    entities = list(dict.fromkeys(e for ev in events for t in ev for e in t.entity_ids))
    who = f" with {', '.join(entities[:6])}" if entities else ""
    n = sum(len(ev) for ev in events)
    title = f"{events[0][0].camera_id} {_clock(events[0][0].t_start)}–{_clock(events[-1][-1].t_end)}: " \
            f"{len(events)} event(s), {n} segment(s){who}"
    text = title + "\n" + "\n".join(lines)
    return title, text if len(text) <= MAX_TEXT else text[:MAX_TEXT - 1] + "…"


def _chapter(store: MemoryStore, events: list[list[Trace]]) -> Chapter:
    traces = [t for ev in events for t in ev]
    first, last = traces[0], traces[-1]
    title, text = write_chapter_text(events)
    return Chapter(id=stable_id("sch_", store.user_id, first.source, first.camera_id, first.id),
                   camera_id=first.camera_id, source=first.source, t_start=first.t_start, t_end=last.t_end,
                   wall_start=first.wall_start, wall_end=last.wall_start + (last.t_end - last.t_start),
                   title=title, text=text, trace_ids=[t.id for t in traces],
                   entity_ids=list(dict.fromkeys(e for t in traces for e in t.entity_ids)), updated_at=time.time())


def _last_chapter_end(store: MemoryStore, source: str, camera: str) -> float | None:
    where = f"source = {sql_literal(source)} AND camera_id = {sql_literal(camera)}"
    ends = [float(r["t_end"]) for r in store.scan_rows("schemas", where)]
    return max(ends) if ends else None


def build_chapters(store: MemoryStore, source: str, camera: str, settings: ChapterSettings | None = None,
                   source_done: bool = False) -> list[Chapter]:
    """Write the chapters that are due for ``source``/``camera``; returns them (empty when none)."""
    settings = settings or ChapterSettings()
    after = _last_chapter_end(store, source, camera)
    traces = store.traces_after(source, camera, -1.0 if after is None else after - 1e-6, settings.max_traces)
    if after is not None:
        traces = [t for t in traces if t.t_start >= after - 1e-6]
    events = split_events(traces, settings.event_gap_s, settings.event_max_traces)
    if not events:
        return []
    last_closed = source_done or len(events[-1]) >= settings.event_max_traces
    closed = events if last_closed else events[:-1]
    newest = traces[-1].t_end
    chapters: list[Chapter] = []
    while closed:
        if len(closed) >= settings.budget_events:
            take = closed[:settings.budget_events]
        elif source_done or newest - closed[0][0].t_start >= settings.interval_s:
            take = closed
        else:
            break
        chapters.append(_chapter(store, take))
        closed = closed[len(take):]
    if chapters:
        store.upsert_chapters(chapters)
        logger.info("wrote %d chapter(s) for %s/%s", len(chapters), camera, source)
    return chapters
