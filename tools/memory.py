"""Memory tools: search, open with neighbours, and look at the key frames behind a memory."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import BaseModel, Field, ValidationError

from memory.models import Entity, QueryUnderstanding, SearchHit
from tools.errors import tool_errors
from tools.results import clip, clock, itemize, structured

__all__ = ["register"]

#: largest media time a filter accepts (about 31 years of stream)
MAX_MEDIA_S = 1e9

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)


class SearchResults(BaseModel):
    """Hits of one memory search, best first."""

    query: str
    level: str
    mode: str
    hits: list[SearchHit]
    next_offset: int | None = Field(None, description="pass as offset to get the next page; null = no more")
    understood: QueryUnderstanding | None = Field(
        None, description="how the query was read: named entities, time window, cameras, objects, notes")


class NoteResult(BaseModel):
    """A stored note and what it was linked to."""

    id: str
    entity_ids: list[str]
    objects: list[str]


class MemoryItem(BaseModel):
    """One memory with what happened just before and after it, and who was involved."""

    id: str
    level: str
    item: dict[str, Any]
    before: list[dict[str, Any]] = Field(description="earlier neighbours, oldest first")
    after: list[dict[str, Any]] = Field(description="later neighbours, oldest first")
    entities: list[Entity]
    children: list[dict[str, Any]] = Field(
        default_factory=list, description="chapters (sch_…): the traces they index, in time order")


def register(server: MCPServer[Any], max_results: int = 50) -> None:
    """Add the memory tools to ``server``; ``max_results`` caps every page."""

    def memory_search(
        query: Annotated[str, Field(description="what to look for, in plain words (e.g. 'man with a microphone')")],
        ctx: Context[Any],
        level: Annotated[
            Literal["traces", "observations", "entities", "schemas", "facts"],
            Field(description="traces = what happened in a segment; observations = one entity in one segment; "
                  "entities = people/objects; schemas = chapters; facts = what is known about an entity"),
        ] = "traces",
        camera: Annotated[str | None, Field(description="only this camera id")] = None,
        entity: Annotated[str | None, Field(description="only memories involving this entity id (see entity_list)")] = None,
        start: Annotated[float | None, Field(ge=0, le=MAX_MEDIA_S, description="only from this media second on")] = None,
        end: Annotated[float | None, Field(ge=0, le=MAX_MEDIA_S, description="only up to this media second")] = None,
        mode: Annotated[
            Literal["hybrid", "vector", "fts"],
            Field(description="hybrid (default) fuses meaning and keywords; vector = meaning; fts = exact words"),
        ] = "hybrid",
        limit: Annotated[int, Field(ge=1, le=50, description="hits per page")] = 10,
        offset: Annotated[int, Field(ge=0, le=10_000, description="skip this many hits (paging)")] = 0,
    ) -> Annotated[CallToolResult, SearchResults]:
        """Search the long-term memory of what the cameras saw and heard (and notes from memory_note).

        Ask in plain words: names (see entity_update), times ("yesterday", "last Tuesday at 3 pm", "the
        first time"), cameras, objects and counts ("two people") are understood; `understood` says how.
        Scores are 0–1 (1 = the whole question answered), with why each hit matched. Open a hit with
        memory_get (neighbours, entities) or memory_visual_evidence (the images).
        """
        if not query.strip():
            raise ToolError("query is empty; describe what to look for, e.g. 'person at the piano', a name, "
                            "or a time such as 'yesterday evening'")
        if start is not None and end is not None and start > end:
            raise ToolError(f"start ({start}) is after end ({end}); swap them")
        limit = min(limit, max_results)
        with tool_errors("memory_search"):
            app = ctx.request_context.lifespan_context
            outcome = app.store.find(
                query, level=level, camera=camera, entity=entity, start=start, end=end,
                limit=limit + 1, offset=offset, mode=mode, tz=app.manifest.timezone,
            )
        hits = outcome.hits
        more = len(hits) > limit
        results = SearchResults(
            query=query, level=level, mode=mode, hits=hits[:limit], next_offset=offset + limit if more else None,
            understood=outcome.understood,
        )
        return structured(results, _search_summary(results))

    def memory_get(
        id: Annotated[str, Field(description="a memory id from memory_search (trc_…, obs_…, sch_…, fct_…) or an entity id")],
        ctx: Context[Any],
        neighbors: Annotated[int, Field(ge=0, le=10, description="how many earlier and later memories to include")] = 2,
    ) -> Annotated[CallToolResult, MemoryItem]:
        """Open one memory: the full record, its time-ordered neighbours and the entities in it."""
        with tool_errors("memory_get"):
            result = ctx.request_context.lifespan_context.store.get(id, neighbors=neighbors)
        item = MemoryItem(
            id=id, level=result.level, item=result.item, before=result.before, after=result.after,
            entities=result.entities, children=result.children,
        )
        return structured(item, _item_summary(item))

    def memory_visual_evidence(
        id: Annotated[str, Field(description="a trace, observation or key-frame id (kf_…), or an entity id")],
        ctx: Context[Any],
        max_images: Annotated[int, Field(ge=1, le=6, description="how many key frames to return")] = 2,
    ) -> list[str | Image]:
        """Show the key frames behind a memory, as images with a caption saying what and when."""
        with tool_errors("memory_visual_evidence"):
            store = ctx.request_context.lifespan_context.store
            keyframe_ids = _keyframe_ids_for(store, id)
            frames = store.keyframes(keyframe_ids[:max_images]) if keyframe_ids else []
        if not frames:
            raise ToolError(f"no key frames are stored for '{id}'; try memory_get on it, or another search hit")
        lines = [f"Key frames for {id}:"]
        for n, kf in enumerate(frames, 1):
            who = f", showing {', '.join(kf.entity_ids)}" if kf.entity_ids else ""
            lines.append(f"{n}. {kf.id}: camera {kf.camera_id} at {_clock(kf.t)} (segment {kf.segment_index}){who}")
        return ["\n".join(lines), *(Image(data=kf.jpeg, format="jpeg") for kf in frames)]

    def memory_note(
        text: Annotated[str, Field(min_length=1, max_length=2000, description=(
            "what to remember, e.g. 'Kit will bring the charger back on Monday'"))],
        ctx: Context[Any],
        kind: Annotated[Literal["C", "V"], Field(description="C said or agreed, V seen")] = "C",
        time: Annotated[str | None, Field(max_length=40, description="ISO-8601; default now")] = None,
    ) -> Annotated[CallToolResult, NoteResult]:
        """Remember what the user said or saw; reminded of when who or what it names is in view."""
        from memory.store.notes import Note

        try:
            note = Note.model_validate({"text": text, "kind": kind, "time": time or _now_iso()})
        except ValidationError as exc:
            where = ".".join(str(p) for p in exc.errors()[0]["loc"]) or "note"
            hint = "give it as ISO-8601, e.g. 2026-03-01T18:00:00Z, or omit it for now" if where == "time" \
                else "say in words what to remember"
            raise ToolError(f"{where}: {exc.errors()[0]['msg']}; {hint}") from None
        with tool_errors("memory_note"):
            trace = ctx.request_context.lifespan_context.remember([note])[0]
        result = NoteResult(id=trace.id, entity_ids=trace.entity_ids, objects=trace.objects)
        linked = ", ".join([*result.entity_ids, *result.objects]) or "nothing in memory yet"
        return structured(result, f"remembered {result.id} (linked to {linked})")

    server.add_tool(memory_search, annotations=READ_ONLY)
    server.add_tool(memory_get, annotations=READ_ONLY)
    server.add_tool(memory_visual_evidence, annotations=READ_ONLY, structured_output=False)
    server.add_tool(memory_note, annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False,
                                                             idempotent_hint=True, open_world_hint=False))


def _search_summary(results: SearchResults) -> str:
    """One line per hit (id, where/when, a few words); the full records are structured content."""
    more = f"more: offset={results.next_offset}" if results.next_offset is not None else "no more hits"
    header = f"{len(results.hits)} {results.level} hit(s) for {clip(results.query, 40)!r} ({more})"
    understood = results.understood
    if understood is not None:
        header += f"\nUnderstood: {understood.summary}"
        for note in understood.notes:
            header += f"\nNote: {note}"
    if not results.hits:
        header += "\nNothing matched; try other words, another level, a wider time, or mode='vector'"
    lines = [
        f"{h.id} [{h.camera_id or '-'} {clock(h.t_start)}–{clock(h.t_end)}] {h.score:.2f} {clip(h.text, 60)}"
        + (f" (matched: {_why(h)})" if h.why else "")
        for h in results.hits
    ]
    return itemize(header, lines)


def _why(hit: SearchHit) -> str:
    """Why a hit matched, in a few words: ``names Lin-Manuel Miranda; speech country``."""
    parts = []
    for m in hit.why:
        words = ", ".join(m.words) if m.words else m.detail
        parts.append(f"{m.field} {words}".strip())
    return "; ".join(parts)


def _item_summary(item: MemoryItem) -> str:
    """Where the memory sits and what links from it; the full record is structured content."""
    rec = item.item
    where = f"{rec.get('camera_id', '-')} {clock(rec.get('t_start'))}–{clock(rec.get('t_end'))}"
    entities = ", ".join(e.id for e in item.entities[:8]) or "none"
    frames = len(item.item.get("keyframe_ids") or [])
    return (f"{item.id} ({item.level}, {where}): {len(item.before)} earlier and {len(item.after)} later "
            f"neighbour(s); entities: {entities}; {frames} key frame(s) (memory_visual_evidence)")


def _keyframe_ids_for(store: Any, item_id: str) -> list[str]:
    """Key-frame ids behind any memory id (a key-frame id stands for itself)."""
    if item_id.startswith("kf_"):
        return [item_id]
    # an entity's latest observations: one heard only by voice (off screen) has no key frames
    result = store.get(item_id, neighbors=5 if item_id.startswith(("person_", "object_")) else 0)
    ids = list(result.item.get("keyframe_ids") or [])
    if not ids and result.level == "entities":
        for obs in result.after:
            ids.extend(obs.get("keyframe_ids") or [])
    return list(dict.fromkeys(ids))


def _now_iso() -> str:
    from datetime import datetime, timezone

    return datetime.now(timezone.utc).isoformat()


def _clock(seconds: float) -> str:
    minutes, secs = divmod(max(seconds, 0.0), 60)
    return f"{int(minutes)}:{secs:04.1f}"
