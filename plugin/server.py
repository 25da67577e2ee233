"""Composition root: build the MCP server from a manifest.

``create_server(manifest)`` only wires things together; nothing is opened at import or at
construction. The lifespan opens the memory store (and, later, the background worker) when a
transport starts, yields a typed :class:`AppContext`, and closes everything on the way out. Tools
reach the services through ``ctx.request_context.lifespan_context``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.subscriptions import InMemorySubscriptionBus

from memory import HashEmbedder, MemoryStore, MiniLMEmbedder, OpenAIEmbedder
from memory.embedders import Embedder
from perception import IngestSettings
from perception.describe.context import PerceptionRuntime
from perception.segmenting.scheduler import Scheduler
from perception.describe.vlm import VLMClient
from perception.describe.vlm_stage import VLMSegmentStage
from plugin.manifest import (
    HashEmbedderConfig,
    Manifest,
    MiniLMEmbedderConfig,
    OpenAIEmbedderConfig,
    default_manifest,
)
from plugin import phone
from plugin.semantic import SemanticRunner, runner_from_manifest
from plugin.notify import NotificationService, chain_commits, serve_notifications
from plugin.worker import Worker
from tools import capture as capture_tools
from tools import context as context_tools
from tools import entities as entity_tools
from tools import memory as memory_tools
from tools import notify as notify_tools
from tools import rules as rule_tools
from tools import perception as perception_tools

__all__ = ["AppContext", "build_embedder", "create_server", "ingest_settings", "open_store"]

logger = logging.getLogger(__name__)

INSTRUCTIONS = """\
ReflectWorld remembers what cameras and video files showed: segments (traces), the people and
objects in them (entities, observations) and the key frames behind each memory.
Start with memory_search (text query; filter by camera, entity or time), open a result with
memory_get to see what happened just before and after, and call memory_visual_evidence to look at
the key frames. entity_list / entity_get show who and what has been seen.
rule_add sets what to watch for (rule_list / rule_remove); notify_policy sets how a camera notifies
(channels, severity threshold, quiet hours); call notify_poll(since=cursor, wait_s=…) in a loop to
receive notifications, or watch the reflectworld://notifications resource."""


@dataclass
class AppContext:
    """Services shared by every tool call for the life of a transport."""

    manifest: Manifest
    store: MemoryStore
    ingest: IngestSettings
    #: the background ingest worker (capture tools); None when built without one
    worker: Worker | None = None
    #: live perception state (working memory, steering, scheduler) read by the perception tools
    perception: PerceptionRuntime | None = None
    #: consolidation, chapters and camera context off the hot path (issue 6); None when disabled
    semantic: SemanticRunner | None = None
    #: rules, notification resolver and delivery (issue 7); None when built without them
    notifications: NotificationService | None = None


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
    """Translate the manifest's perception section into pipeline settings.

    ``light`` is the cheap level: segmentation, key frames and the describer only; ``full``
    adds every configured model (faces, objects, bodies, OCR, speech).
    """
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
        objects=p.level == "full" and p.objects.type != "none",
        object_model=getattr(p.objects, "model", None),
        object_labels=getattr(p.objects, "labels", None),
        object_threshold=getattr(p.objects, "threshold", 0.5),
        ocr=p.level == "full" and p.ocr.type != "none",
        asr=p.level == "full" and p.asr.type != "none",
        asr_model_dir=getattr(p.asr, "model_dir", None),
        body=p.level == "full" and p.body.type != "none",
        body_model=getattr(p.body, "model", None),
    )


def build_vlm_stage(manifest: Manifest, runtime: PerceptionRuntime) -> VLMSegmentStage | None:
    """The VLM describer stage when the manifest names a VLM (``None``: the local describer).

    The client connects lazily; a provider that is down degrades each segment to the local
    describer instead of failing ingestion. ``runtime.vlm`` is set so tools report its tokens.
    """
    if manifest.vlm is None:
        return None
    client = VLMClient.from_config(manifest.vlm)
    runtime.vlm = client
    logger.info("segments are described by the VLM %s at %s", manifest.vlm.model, manifest.vlm.base_url)
    return VLMSegmentStage(client, runtime.builder, runtime.steering)


def rule_texts(notifications: Any) -> Callable[[str], list[str]]:
    """``camera_id -> active rule texts`` for the VLM prompt."""
    return lambda camera: [rule.text for rule in notifications.active_rules(camera)]


def create_server(manifest: Manifest | None = None) -> MCPServer[AppContext]:
    """Build the MCP server for ``manifest`` (the embedded default when ``None``)."""
    manifest = manifest or default_manifest()

    workers: list[Worker] = []  # the running worker, for the phone upload route
    bus = InMemorySubscriptionBus()  # resource-updated events (reflectworld://notifications)
    notify_services: list[NotificationService] = []  # the running one, for the notifications resource

    @asynccontextmanager
    async def lifespan(_server: MCPServer[AppContext]) -> AsyncIterator[AppContext]:
        store = await anyio.to_thread.run_sync(open_store, manifest)
        logger.info("memory store open at %s (user %s)", store.uri, manifest.user_id)
        semantic = runner_from_manifest(manifest, lambda: open_store(manifest))  # issue 6: off the hot path
        if semantic is not None:
            await anyio.to_thread.run_sync(semantic.start)
        notify_stack = AsyncExitStack()  # issue 7: rules + notifications (publisher task, delivery thread)
        notifications = await notify_stack.enter_async_context(serve_notifications(store, manifest, bus))
        notify_services.append(notifications)
        runtime = PerceptionRuntime(scheduler=Scheduler(manifest.perception.mode, manifest.perception.level))
        vlm_stage = build_vlm_stage(manifest, runtime)
        worker = Worker(store, ingest_settings(manifest),
                        on_commit=chain_commits(semantic.on_commit if semantic else None, notifications.on_commit,
                                                runtime.on_commit),
                        on_source_event=notifications.on_source_event, mode=manifest.perception.mode,
                        vlm_stage=vlm_stage, active_rules=rule_texts(notifications), scheduler=runtime.scheduler)
        await anyio.to_thread.run_sync(worker.start_sources, manifest.sources)
        workers.append(worker)
        try:
            yield AppContext(manifest=manifest, store=store, ingest=ingest_settings(manifest), worker=worker,
                             semantic=semantic, notifications=notifications, perception=runtime)
        finally:
            workers.remove(worker)
            await anyio.to_thread.run_sync(worker.stop)
            if runtime.vlm is not None:
                runtime.vlm.close()
            notify_services.remove(notifications)
            await notify_stack.aclose()
            if semantic is not None:
                await anyio.to_thread.run_sync(semantic.stop)
            await anyio.to_thread.run_sync(store.close)
            logger.info("memory store closed")

    server: MCPServer[AppContext] = MCPServer(
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
                          current=lambda: notify_services[-1] if notify_services else None)
    context_tools.register(server, max_results=manifest.server.max_results)
    capture_tools.register(server)
    perception_tools.register(server)
    phone.register(server, lambda: workers[-1] if workers else None)
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
