"""Composition root: build the MCP server from a manifest.

``create_server(manifest)`` only wires things together; nothing is opened at import or at
construction. The lifespan opens the memory store (and, later, the background worker) when a
transport starts, yields a typed :class:`AppContext`, and closes everything on the way out. Tools
reach the services through ``ctx.request_context.lifespan_context``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio
from mcp.server.mcpserver import MCPServer

from memory import HashEmbedder, MemoryStore, MiniLMEmbedder, OpenAIEmbedder
from memory.embedders import Embedder
from perception import IngestSettings
from plugin.manifest import (
    HashEmbedderConfig,
    Manifest,
    MiniLMEmbedderConfig,
    OpenAIEmbedderConfig,
    default_manifest,
)
from tools import entities as entity_tools
from tools import memory as memory_tools

__all__ = ["AppContext", "build_embedder", "create_server", "ingest_settings", "open_store"]

logger = logging.getLogger(__name__)

INSTRUCTIONS = """\
ReflectWorld remembers what cameras and video files showed: segments (traces), the people and
objects in them (entities, observations) and the key frames behind each memory.
Start with memory_search (text query; filter by camera, entity or time), open a result with
memory_get to see what happened just before and after, and call memory_visual_evidence to look at
the key frames. entity_list / entity_get show who and what has been seen."""


@dataclass
class AppContext:
    """Services shared by every tool call for the life of a transport."""

    manifest: Manifest
    store: MemoryStore
    ingest: IngestSettings


def build_embedder(manifest: Manifest) -> Embedder:
    """Build the text embedder the manifest names (models load lazily on first use)."""
    cfg = manifest.memory.embedder
    if isinstance(cfg, MiniLMEmbedderConfig):
        return MiniLMEmbedder()
    if isinstance(cfg, HashEmbedderConfig):
        return HashEmbedder(dim=cfg.dim)
    if isinstance(cfg, OpenAIEmbedderConfig):
        return OpenAIEmbedder(
            base_url=cfg.base_url,
            model=cfg.model,
            api_key=cfg.api_key.get_secret_value(),
            dim=cfg.dim,
            timeout_s=cfg.timeout_s,
        )
    raise AssertionError(f"unhandled embedder config {cfg!r}")  # the union is exhaustive


def open_store(manifest: Manifest) -> MemoryStore:
    """Open (creating if needed) the store the manifest names."""
    store = MemoryStore(manifest.store_uri(), build_embedder(manifest), user_id=manifest.user_id)
    store.open()
    return store


def ingest_settings(manifest: Manifest) -> IngestSettings:
    """Translate the manifest's perception section into pipeline settings."""
    p = manifest.perception
    faces_on = p.level == "full" and p.faces.type != "none"
    return IngestSettings(
        sample_fps=p.sample_fps,
        min_segment_s=p.min_segment_s,
        max_segment_s=p.max_segment_s,
        scene_threshold=p.scene_threshold,
        keyframes_per_segment=p.keyframes_per_segment,
        keyframe_min_gap_s=p.keyframe_min_gap_s,
        faces=faces_on,
        face_match_threshold=getattr(p.faces, "match_threshold", 0.363),
    )


def create_server(manifest: Manifest | None = None) -> MCPServer[AppContext]:
    """Build the MCP server for ``manifest`` (the embedded default when ``None``)."""
    manifest = manifest or default_manifest()

    @asynccontextmanager
    async def lifespan(_server: MCPServer[AppContext]) -> AsyncIterator[AppContext]:
        store = await anyio.to_thread.run_sync(open_store, manifest)
        logger.info("memory store open at %s (user %s)", store.uri, manifest.user_id)
        try:
            yield AppContext(manifest=manifest, store=store, ingest=ingest_settings(manifest))
        finally:
            await anyio.to_thread.run_sync(store.close)
            logger.info("memory store closed")

    server: MCPServer[AppContext] = MCPServer(
        manifest.server.name,
        version=_version(),
        instructions=INSTRUCTIONS,
        lifespan=lifespan,
        log_level=manifest.log_level,
    )
    memory_tools.register(server, max_results=manifest.server.max_results)
    entity_tools.register(server, max_results=manifest.server.max_results)
    return server


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("reflectworld-mm")
    except PackageNotFoundError:
        return "0.0.0+source"
