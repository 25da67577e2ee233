"""Context tools: what is normal for each camera (scene type, routines, anomaly baseline)."""

from __future__ import annotations

from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import BaseModel, Field

from memory.semantic.camera_context import CameraContext, get_context, list_contexts, set_context
from tools.errors import tool_errors
from tools.memory import READ_ONLY
from tools.results import clip, itemize, structured

__all__ = ["register"]

WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False)


class CameraContexts(BaseModel):
    """Per-camera semantic context, by camera id."""

    contexts: list[CameraContext]


def register(server: MCPServer[Any], max_results: int = 50) -> None:
    """Add ``context_get`` and ``context_set`` to ``server``."""

    def context_get(
        ctx: Context[Any],
        camera_id: Annotated[str | None, Field(description="one camera; omit for every camera with a context")] = None,
    ) -> Annotated[CallToolResult, CameraContexts]:
        """Show what is normal for a camera: scene type, usual routines and the anomaly baseline.

        Contexts are derived from what the camera saw once enough segments exist, and revised as more
        arrive; fields set with context_set are kept. Use it to judge whether something is unusual.
        """
        with tool_errors("context_get"):
            store = ctx.request_context.lifespan_context.store
            if camera_id is None:
                found = list_contexts(store, limit=max_results)
            else:
                one = get_context(store, camera_id)
                if one is None:
                    raise ToolError(f"no context for camera '{camera_id}' yet; it is derived after enough "
                                    "segments, or set one with context_set (omit camera_id to list all)")
                found = [one]
        result = CameraContexts(contexts=found)
        return structured(result, _summary(result))

    def context_set(
        camera_id: Annotated[str, Field(min_length=1, max_length=128, description="the camera to describe")],
        ctx: Context[Any],
        scene_type: Annotated[str | None, Field(max_length=80, description="what it shows, e.g. 'kitchen'")] = None,
        routines: Annotated[list[str] | None, Field(max_length=20, description="what usually happens, and when")] = None,
        anomaly_baseline: Annotated[str | None, Field(max_length=1000, description="what counts as normal")] = None,
        notes: Annotated[str | None, Field(max_length=2000, description="anything else worth knowing")] = None,
    ) -> Annotated[CallToolResult, CameraContext]:
        """Describe a camera by hand. Fields you set are kept by later automatic revisions;
        pass an empty value ("" or []) to hand a field back to automatic revision."""
        if all(v is None for v in (scene_type, routines, anomaly_baseline, notes)):
            raise ToolError("nothing to set; pass scene_type, routines, anomaly_baseline or notes")
        with tool_errors("context_set"):
            store = ctx.request_context.lifespan_context.store
            result = set_context(store, camera_id, scene_type=scene_type, routines=routines,
                                 anomaly_baseline=anomaly_baseline, notes=notes)
        return structured(result, f"context of {camera_id} updated; kept by revisions: {', '.join(result.locked) or '-'}")

    server.add_tool(context_get, annotations=READ_ONLY)
    server.add_tool(context_set, annotations=WRITE)


def _summary(result: CameraContexts) -> str:
    lines = [f"{c.camera_id}: {c.scene_type or 'scene unknown'}; {len(c.routines)} routine(s); "
             f"revision {c.revision}; baseline: {clip(c.anomaly_baseline, 80) or '-'}" for c in result.contexts]
    header = f"{len(result.contexts)} camera context(s)"
    if not result.contexts:
        header += "; none derived yet (set one with context_set)"
    return itemize(header, lines)
