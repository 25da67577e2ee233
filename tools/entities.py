"""Entity tools: who and what has been seen, and what is remembered about each."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel, Field

from memory.models import Entity
from tools.errors import tool_errors
from tools.memory import READ_ONLY

__all__ = ["register"]


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


def register(server: MCPServer[Any], max_results: int = 50) -> None:
    """Add the entity tools to ``server``; ``max_results`` caps every page."""

    def entity_list(
        ctx: Context[Any],
        kind: Annotated[Literal["person", "object"] | None, Field(description="only people or only objects")] = None,
        limit: Annotated[int, Field(ge=1, le=100, description="entities per page")] = 20,
        offset: Annotated[int, Field(ge=0, description="skip this many (paging)")] = 0,
    ) -> EntityPage:
        """List the people and objects memory knows, with names, first/last seen and sighting counts."""
        limit = min(limit, max_results)
        with tool_errors("entity_list"):
            store = ctx.request_context.lifespan_context.store
            rows = store.list_entities(kind=kind, limit=limit + 1, offset=offset)
            total = store.count_entities(kind=kind)
        more = len(rows) > limit
        return EntityPage(entities=rows[:limit], total=total, next_offset=offset + limit if more else None)

    def entity_get(
        entity_id: Annotated[str, Field(description="an entity id such as person_0001 (from entity_list or a search hit)")],
        ctx: Context[Any],
        observations: Annotated[int, Field(ge=0, le=50, description="how many recent observations to include")] = 5,
    ) -> EntityDetail:
        """Show one entity: who or what it is, and its most recent observations with their key frames."""
        with tool_errors("entity_get"):
            store = ctx.request_context.lifespan_context.store
            entity = store.get_entity(entity_id)
            obs = store.entity_observations(entity.id, limit=min(observations, max_results))
        rows = [o.model_dump() for o in obs]
        keyframes = list(dict.fromkeys(k for o in obs for k in o.keyframe_ids))
        return EntityDetail(entity=entity, observations=rows, keyframe_ids=keyframes)

    server.add_tool(entity_list, annotations=READ_ONLY)
    server.add_tool(entity_get, annotations=READ_ONLY)
