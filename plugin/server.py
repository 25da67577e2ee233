"""The MCP server: tools over one :class:`~plugin.engine.Engine`.

``create_server(manifest)`` registers the tools; nothing is opened at import or at construction.
The lifespan opens the engine when a transport starts (store, identity service, perception,
semantic memory, rules and notifications, the capture worker), starts the manifest's sources,
yields the engine as the lifespan context, and closes it on the way out. Tools reach the services
through ``ctx.request_context.lifespan_context`` (the engine's ``store``, ``worker``,
``perception``, ``notifications``, ``identity``, ``manifest``).
"""

from __future__ import annotations

import gc
import inspect
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.subscriptions import InMemorySubscriptionBus

from plugin import dashboard, phone
from plugin.engine import Engine, Overrides
from plugin.manifest import Manifest, default_manifest
from plugin.acting.notify import serve_notifications
from tools import capture as capture_tools
from tools import context as context_tools
from tools import entities as entity_tools
from tools import memory as memory_tools
from tools import notify as notify_tools
from tools import perception as perception_tools
from tools import rules as rule_tools

__all__ = ["AppContext", "create_server"]

logger = logging.getLogger(__name__)

#: what the tools receive as their lifespan context
AppContext = Engine

INSTRUCTIONS = """\
ReflectWorld remembers what cameras and video files showed: segments (traces), the people and
objects in them (entities, observations) and the key frames behind each memory.
Start with memory_search (text query; filter by camera, entity or time), open a result with
memory_get to see what happened just before and after, and call memory_visual_evidence to look at
the key frames. entity_list / entity_get show who and what has been seen.
rule_add sets what to watch for, in plain words (rule_list / rule_remove); notify_policy sets how a
camera notifies (channels, severity threshold, quiet hours); call notify_poll(since=cursor, wait_s=…)
in a loop to receive notifications, or watch the reflectworld://notifications resource."""


def create_server(manifest: Manifest | None = None, overrides: Overrides | None = None) -> MCPServer[Engine]:
    """Build the MCP server for ``manifest`` (the embedded default when ``None``)."""
    manifest = manifest or default_manifest()
    engines: list[Engine] = []  # the running engine, for the phone upload route and the notifications resource
    bus = InMemorySubscriptionBus()  # resource-updated events (reflectworld://notifications)

    @asynccontextmanager
    async def lifespan(_server: MCPServer[Engine]) -> AsyncIterator[Engine]:
        engine = await anyio.to_thread.run_sync(Engine(manifest, overrides).open)
        try:
            async with serve_notifications(engine.notifications, bus):
                errors = await anyio.to_thread.run_sync(engine.start_sources)
                for error in errors:
                    logger.error("source not started: %s", error)
                engines.append(engine)
                # What a started server holds (models, tables, modules: ~200k objects) lives as long as
                # it does; a full garbage collection walked all of it for 200-300 ms, holding the GIL,
                # so every search in flight waited as long. Frozen, collections walk newer objects only.
                gc.freeze()
                try:
                    yield engine
                finally:
                    engines.remove(engine)
                    gc.unfreeze()
        finally:
            await anyio.to_thread.run_sync(engine.close)

    server: MCPServer[Engine] = MCPServer(
        manifest.server.name,
        version=_version(),
        instructions=INSTRUCTIONS,
        lifespan=lifespan,
        log_level=manifest.log_level,
        subscriptions=bus,
    )
    groups, cap = set(manifest.server.tools), manifest.server.max_results
    if "memory" in groups:
        memory_tools.register(server, max_results=cap)
    if "entities" in groups:
        entity_tools.register(server, max_results=cap)
    if "rules" in groups:
        rule_tools.register(server, max_results=cap)
        notify_tools.register(server, max_results=cap, current=lambda: engines[-1].notifications if engines else None)
    if "context" in groups:
        context_tools.register(server, max_results=cap)
    if "capture" in groups:
        capture_tools.register(server)
    if "perception" in groups:
        perception_tools.register(server)
    phone.register(server, lambda: engines[-1].worker if engines else None)
    dashboard.register(server, lambda: engines[-1] if engines else None, manifest.server.dashboard)
    if manifest.qa is not None:  # memory_ask needs a model; without `qa:` the host's own model asks
        from plugin.agent.ask import make_asker
        from tools import ask as ask_tools

        ask_tools.register(server, make_asker(manifest.qa))
    compact_tool_schemas(server)
    return server


#: output-schema keywords that say nothing about the shape a host reads (results always carry every field)
_OUTPUT_NOISE = {"$defs", "default", "additionalProperties", "minimum", "maximum", "exclusiveMinimum",
                 "exclusiveMaximum", "maxItems", "minItems", "maxLength", "minLength", "pattern", "required"}
#: informational fields of a model that a caller never sets (left out of input schemas)
_READ_ONLY_FIELDS = {"understood", "needs_vlm"}


def compact_tool_schemas(server: MCPServer[Any]) -> None:
    """Shrink what every ``tools/list`` costs a host, without changing what a call accepts or returns.

    Input schemas keep every property, type, bound and property description (the model needs
    them), and lose pydantic's generated titles, the docstrings of nested models, informational
    fields and ``"default": null`` (a property left out of ``required`` is already optional). Output schemas keep their top-level shape (property names and types; nested models
    become plain objects): the text summary and the structured content carry the details.
    """
    for tool in server._tool_manager.list_tools():
        tool.description = inspect.cleandoc(tool.description or "")
        tool.parameters = _compact(tool.parameters, keep_descriptions=True)
        meta = tool.fn_metadata
        if meta.output_schema is not None:
            meta.output_schema = _shallow(_compact(meta.output_schema, keep_descriptions=False))


def _compact(node: Any, keep_descriptions: bool, in_names: bool = False) -> Any:
    """Drop titles everywhere and descriptions where ``keep_descriptions`` is off (nested models: always)."""
    if isinstance(node, list):
        return [_compact(item, keep_descriptions) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if in_names:  # keys of `properties` / `$defs` are names, not schema keywords
            if key not in _READ_ONLY_FIELDS:
                out[key] = _compact(value, keep_descriptions)
        elif key == "$defs":  # nested models: their types and bounds speak for themselves
            out[key] = _compact(value, False, in_names=True)
        elif key == "title" or (key == "description" and not keep_descriptions):
            continue
        elif key == "default" and value is None:  # an optional property (not `required`) says as much
            continue
        else:
            out[key] = _compact(value, keep_descriptions, in_names=key == "properties")
    return out


def _shallow(schema: dict[str, Any]) -> dict[str, Any]:
    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(item) for item in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            return {"type": "object"}
        return {k: walk(v) for k, v in node.items() if k not in _OUTPUT_NOISE}

    return walk(schema)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("reflectworld-mm")
    except PackageNotFoundError:
        return "0.0.0+source"
