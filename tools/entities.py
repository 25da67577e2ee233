"""Entity tools: who and what has been seen, what is remembered about each, and identity edits."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import BaseModel, Field

from memory.identity.identity_ops import enrol_face, entity_decisions, forget_entity, merge_entities, name_entity, split_entity
from memory.models import Entity, Fact
from memory.identity.voice_ops import enrol_voice
from perception.identity.reference import reference_views
from tools.access import policy_of
from tools.errors import tool_errors
from tools.memory import READ_ONLY
from tools.results import clip, itemize, structured

__all__ = ["register", "update_entity"]


#: facts entity_get shows (most important first)
FACTS_SHOWN = 20


class EntityPage(BaseModel):
    """A page of entities, most recently seen first."""

    entities: list[Entity]
    total: int = Field(description="entities matching the filter")
    next_offset: int | None = Field(None, description="pass as offset for the next page; null = no more")


class EntityDetail(BaseModel):
    """An entity with its most recent observations."""

    entity: Entity
    observations: list[dict[str, Any]] = Field(description="latest first: when, where, what it did")
    keyframe_ids: list[str] = Field(description="stills showing it; open with memory_visual_evidence")
    decisions: list[dict[str, Any]] = Field(default_factory=list, description=(
        "why it has its sightings, newest first: match/new/confirm_pending by the resolver (score, runner-up, "
        "evidence) or name/enrol/merge/split by a user"))
    facts: list[Fact] = Field(default_factory=list, description=(  # semantic memory
        "what is known about it, most important first: text, kind, importance w in [0,1], evidence_ids "
        "(open with memory_get)"))


class EntityUpdateResult(BaseModel):
    """What an entity_update did."""

    action: str
    entity: Entity | None = Field(None, description="the entity after the edit (null after forget)")
    message: str
    removed: dict[str, int] = Field(default_factory=dict, description="forget: rows removed per table")


def register(server: MCPServer[Any], max_results: int = 50) -> None:
    """Add the entity tools to ``server``; ``max_results`` caps every page."""

    def entity_list(
        ctx: Context[Any],
        kind: Annotated[Literal["person", "object"] | None, Field(description="only people or only objects")] = None,
        limit: Annotated[int, Field(ge=1, le=100, description="entities per page")] = 20,
        offset: Annotated[int, Field(ge=0, le=1_000_000, description="skip this many (paging)")] = 0,
    ) -> Annotated[CallToolResult, EntityPage]:
        """List the people and objects memory knows, with names, first/last seen and sighting counts."""
        limit = min(limit, max_results)
        with tool_errors("entity_list"):
            store = ctx.request_context.lifespan_context.store
            rows = store.list_entities(kind=kind, limit=limit + 1, offset=offset)
            total = store.count_entities(kind=kind)
        more = len(rows) > limit
        page = EntityPage(entities=rows[:limit], total=total, next_offset=offset + limit if more else None)
        return structured(page, _page_summary(page))

    def entity_get(
        entity_id: Annotated[str, Field(description="an entity id such as person_0001 (from entity_list or a search hit)")],
        ctx: Context[Any],
        observations: Annotated[int, Field(ge=0, le=50, description="how many recent observations to include")] = 5,
        decisions: Annotated[int, Field(ge=0, le=50, description="how many identity decisions (why) to include")] = 5,
    ) -> Annotated[CallToolResult, EntityDetail]:
        """Show one entity: who or what it is, and its most recent observations with their key frames."""
        with tool_errors("entity_get"):
            store = ctx.request_context.lifespan_context.store
            entity = store.get_entity(entity_id)
            obs = store.entity_observations(entity.id, limit=min(observations, max_results))
            why = [d.model_dump() for d in entity_decisions(store, entity.id, limit=min(decisions, max_results))]
            facts = store.facts(entity.id, limit=min(FACTS_SHOWN, max_results))
        rows = [o.model_dump() for o in obs]
        keyframes = list(dict.fromkeys(k for o in obs for k in o.keyframe_ids))
        detail = EntityDetail(entity=entity, observations=rows, keyframe_ids=keyframes, decisions=why, facts=facts)
        return structured(detail, _detail_summary(detail))

    def entity_update(
        action: Annotated[Literal["name", "merge", "split", "forget"], Field(description=(
            "name: set entity_id's name, or enrol image_path's face / audio_path's voice under name; merge: entity_id into into_id; "
            "split: move observation_ids of entity_id to a new entity; forget: erase entity_id for good"))],
        ctx: Context[Any],
        entity_id: Annotated[str | None, Field(description="the entity to edit, e.g. person_0003")] = None,
        name: Annotated[str | None, Field(description="name: the display name to give")] = None,
        image_path: Annotated[str | None, Field(description=(
            "name: a reference photo (path on the server) whose face is enrolled under name"))] = None,
        audio_path: Annotated[str | None, Field(description=(
            "name: a speech recording of one person (path on the server) whose voice is enrolled under name"))] = None,
        into_id: Annotated[str | None, Field(description="merge: the entity that absorbs entity_id")] = None,
        observation_ids: Annotated[list[str] | None, Field(description="split: obs_… ids (from entity_get)")] = None,
    ) -> Annotated[CallToolResult, EntityUpdateResult]:
        """Correct identities: name a person (or enrol a reference photo or voice sample under a name), merge two entities
        that are the same person, split wrongly merged sightings off, or forget an entity completely
        (galleries, observations, facts and key frames where it was the only subject are erased)."""
        app = ctx.request_context.lifespan_context
        identity = getattr(app, "identity", None)
        with tool_errors("entity_update"), (identity.lock if identity is not None else nullcontext()):
            if image_path:
                image_path = str(policy_of(ctx).check_path(image_path, "image_path"))
            if action == "name" and audio_path:
                audio_path = str(policy_of(ctx).check_path(audio_path, "audio_path"))
                result = _enrol_voice(app.store, _need(name, "name", action), audio_path, entity_id)
            else:
                result = update_entity(app.store, action, entity_id, name, image_path, into_id, observation_ids)
            if identity is not None:  # running captures resolve against the edited galleries from now on
                identity.edited()
        return structured(result, _update_summary(result))

    server.add_tool(entity_list, annotations=READ_ONLY)
    server.add_tool(entity_get, annotations=READ_ONLY)
    server.add_tool(entity_update, annotations=ToolAnnotations(destructive_hint=True, idempotent_hint=False))


def _need(value: Any, what: str, action: str) -> Any:
    if not value:
        raise ValueError(f"action={action!r} needs {what}")
    return value


def _enrol_voice(store: Any, name: str, audio_path: str, entity_id: str | None) -> EntityUpdateResult:
    """Enrol the voice in ``audio_path`` under ``name`` (see :mod:`memory.identity.voice_ops`)."""
    from perception.identity.voices import voice_sample

    entity, how = enrol_voice(store, name, voice_sample(audio_path), reference=audio_path, entity_id=entity_id)
    return EntityUpdateResult(action="name", entity=entity,
                              message=f"enrolled the voice in {audio_path} as {name} on {entity.id} ({how})")


def update_entity(store: Any, action: str, entity_id: str | None, name: str | None, image_path: str | None,
                  into_id: str | None, observation_ids: list[str] | None) -> EntityUpdateResult:
    """Dispatch one entity_update action to :mod:`memory.identity.identity_ops` (the tool, the dashboard, evals)."""
    if action == "name":
        _need(name, "name", action)
        if image_path:
            (embedding, quality), *views = reference_views(image_path)
            entity, how = enrol_face(store, name, embedding, quality, reference=image_path, entity_id=entity_id,
                                     views=views)
            return EntityUpdateResult(action=action, entity=entity,
                                      message=f"enrolled {image_path} as {name} on {entity.id} ({how})")
        entity = name_entity(store, _need(entity_id, "entity_id (or image_path to enrol a photo)", action), name)
        return EntityUpdateResult(action=action, entity=entity, message=f"{entity.id} is now named {name}")
    if action == "merge":
        entity = merge_entities(store, _need(entity_id, "entity_id", action), _need(into_id, "into_id", action))
        return EntityUpdateResult(action=action, entity=entity,
                                  message=f"{entity_id} merged into {entity.id}; {entity_id} now redirects there")
    if action == "split":
        entity = split_entity(store, _need(entity_id, "entity_id", action),
                              _need(observation_ids, "observation_ids", action))
        return EntityUpdateResult(action=action, entity=entity,
                                  message=f"{len(observation_ids or [])} observation(s) moved to {entity.id}")
    removed = forget_entity(store, _need(entity_id, "entity_id", action))
    return EntityUpdateResult(action=action, message=f"{entity_id} forgotten", removed=removed)


def _label(entity: Entity) -> str:
    return f"{entity.id} ({entity.name})" if entity.name else entity.id


def _page_summary(page: EntityPage) -> str:
    """One line per entity; the full records are structured content."""
    more = f"more: offset={page.next_offset}" if page.next_offset is not None else "no more"
    lines = [f"{_label(e)}: {e.kind}, seen in {e.sightings} segment(s) on {', '.join(e.cameras) or '-'}"
             for e in page.entities]
    return itemize(f"{len(page.entities)} of {page.total} entities ({more})", lines)


def _detail_summary(detail: EntityDetail) -> str:
    """Who it is and how much is attached; observations and frames are structured content."""
    e = detail.entity
    about = f"; {clip(e.description, 80)}" if e.description else ""
    return (f"{_label(e)}: {e.kind}, seen in {e.sightings} segment(s){about}. "
            f"{len(detail.observations)} recent observation(s), {len(detail.keyframe_ids)} key frame(s) "
            "(open with memory_visual_evidence)."
            + "".join(f"\nfact {f.id} (w={f.importance:.2f}): {clip(f.text, 80)}" for f in detail.facts[:5]))


def _update_summary(result: EntityUpdateResult) -> str:
    """What changed, in one line; the entity record is structured content."""
    if result.entity is None:
        removed = ", ".join(f"{n} {table}" for table, n in result.removed.items() if n) or "nothing else"
        return f"{result.action}: {result.message}; removed {removed}"
    e = result.entity
    return f"{result.action}: {result.message}. Now {_label(e)}: {e.kind}, seen in {e.sightings} segment(s)"
