"""The MCP server: tools over one :class:`~plugin.engine.Engine`.

``create_server(manifest)`` registers the tools; nothing is opened at import or at construction.
The lifespan opens the engine when a transport starts (store, identity service, perception,
semantic memory, rules and notifications, the capture worker), starts the manifest's sources,
yields the engine as the lifespan context, and closes it on the way out. Tools reach the services
through ``ctx.request_context.lifespan_context`` (the engine's ``store``, ``worker``,
``perception``, ``notifications``, ``identity``, ``manifest``).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.subscriptions import InMemorySubscriptionBus

from plugin import phone
from plugin.engine import Engine, Overrides
from plugin.manifest import Manifest, default_manifest
from plugin.notify import serve_notifications
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
                try:
                    yield engine
                finally:
                    engines.remove(engine)
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
    memory_tools.register(server, max_results=manifest.server.max_results)
    entity_tools.register(server, max_results=manifest.server.max_results)
    rule_tools.register(server, max_results=manifest.server.max_results)
    notify_tools.register(server, max_results=manifest.server.max_results,
                          current=lambda: engines[-1].notifications if engines else None)
    context_tools.register(server, max_results=manifest.server.max_results)
    capture_tools.register(server)
    perception_tools.register(server)
    phone.register(server, lambda: engines[-1].worker if engines else None)
    if manifest.qa is not None:  # memory_ask needs a model; without `qa:` the host's own model asks
        from plugin.ask import make_asker
        from tools import ask as ask_tools

        ask_tools.register(server, make_asker(manifest.qa))
    return server


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("reflectworld-mm")
    except PackageNotFoundError:
        return "0.0.0+source"
