"""Perception tools: what is happening now, and steering what perception pays attention to.

Both read the live :class:`~perception.describe.context.PerceptionRuntime` defensively (``AppContext.perception``,
else ``AppContext.worker.perception``); with no runtime, no capture and no VLM, ``perception_now``
still answers from memory (the latest stored segment) and says clearly that no event is active.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import BaseModel, Field, ValidationError

from perception.describe.context import PerceptionRuntime
from perception.describe.local import format_ts
from perception.describe.steering import ExitCondition, SteeringRejected, SteeringRequest
from tools.errors import tool_errors
from tools.results import structured

__all__ = ["register"]

logger = logging.getLogger(__name__)

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
STEER = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)


class SteerResult(BaseModel):
    """An accepted steering injection."""

    steering_id: str
    camera_id: str
    event_id: str
    until: str
    budget_left: int = Field(description="injections still allowed in this event")
    active: list[str] = Field(description="every active steering line on this camera")


def _runtime(app: Any) -> PerceptionRuntime | None:
    runtime = getattr(app, "perception", None) or getattr(getattr(app, "worker", None), "perception", None)
    return runtime if isinstance(runtime, PerceptionRuntime) else None


def _captures(app: Any) -> list[Any]:
    worker = getattr(app, "worker", None)
    try:
        return list(worker.status()) if worker is not None else []
    except Exception:
        logger.debug("worker status unavailable", exc_info=True)
        return []


def _latest_trace(store: Any, camera: str | None) -> Any:
    if camera is not None:
        traces = store.recent_traces(camera, 1)
        return traces[-1] if traces else None
    n = store.count_traces()
    traces = store.timeline(limit=1, offset=n - 1) if n else []
    return traces[-1] if traces else None


def _now(app: Any, camera: str | None) -> list[str | Image]:
    runtime = _runtime(app)
    captures = _captures(app)
    lines: list[str] = []
    running = [c for c in captures if getattr(c, "state", "") in {"starting", "running"}]
    if running:
        lines.append("captures: " + ", ".join(f"{c.camera_id} ({c.state})" for c in running))
    memories = [m for m in (runtime.builder.memories() if runtime else [])
                if m.active and (camera is None or m.camera_id == camera)]
    memories.sort(key=lambda m: m.last_t or 0.0, reverse=True)
    for m in memories[:3]:
        lines.append(f"active event {m.event_id}: {m.segments} segment(s), last at "
                     f"{format_ts(m.last_t or 0.0)}")
        lines.append(f"  event summary: {m.rolling_summary}")
        lines.append(f"  last segment: {m.last_summary}")
        lines.append("  active entities: " + (", ".join(sorted(m.entities)) or "none"))
        if m.targets:
            lines.append("  tracked targets: " + ", ".join(sorted(m.targets)))
        steering = runtime.steering.lines(m.camera_id) if runtime else []
        lines.extend(f"  steering {s}" for s in steering)
    if runtime is not None:
        shown = {m.camera_id for m in memories[:3]}
        waiting = [line for m in runtime.builder.memories() if m.camera_id not in shown
                   and (camera is None or m.camera_id == camera) for line in runtime.steering.lines(m.camera_id)]
        lines.extend(f"steering waiting for the next segment: {line}" for line in waiting)
        counters = runtime.scheduler.counters()
        lines.append(f"scheduler ({counters['mode']}): {counters['analysed']} analysed, {counters['skipped']} skipped")
    image: Image | None = None
    frame = runtime.latest_frame(camera) if runtime else None
    if frame is not None:
        image = Image(data=frame.jpeg, format="jpeg")
        lines.append(f"latest key frame: camera {frame.camera_id} at {format_ts(frame.t)}")
    if not memories:
        lines.insert(0, "no active event" + (f" on camera {camera}" if camera else "")
                     + ("" if running else " (no live capture is running; start one with capture_start)"))
        trace = _latest_trace(app.store, camera)
        if trace is None:
            lines.append("memory holds no segments" + (f" for camera {camera}" if camera else "") + " yet")
        else:
            lines.append(f"last remembered segment: {trace.id} on {trace.camera_id} ({trace.source}): {trace.summary}")
            if image is None and trace.keyframe_ids:
                kfs = app.store.keyframes(trace.keyframe_ids[-1:])
                if kfs:
                    image = Image(data=kfs[0].jpeg, format="jpeg")
                    lines.append(f"latest key frame: {kfs[0].id} at {format_ts(kfs[0].t)}")
    return ["\n".join(lines), *([image] if image is not None else [])]


def register(server: MCPServer[Any]) -> None:
    """Add ``perception_now`` and ``perception_steer`` to ``server``."""

    def perception_now(
        ctx: Context[Any],
        camera: Annotated[str | None, Field(description="only this camera id; default: all cameras")] = None,
    ) -> list[str | Image]:
        """What is happening right now: the active event (rolling summary, last segment, active
        entities, steering), scheduler counts and the latest key frame as an image.

        With no live capture it says "no active event" and shows the last remembered segment;
        use memory_search for the past.
        """
        with tool_errors("perception_now"):
            return _now(ctx.request_context.lifespan_context, camera)

    def perception_steer(
        ctx: Context[Any],
        until: Annotated[
            Literal["segments", "media_seconds", "target_seen", "event_end"],
            Field(description="when the steering ends: after `segments` segments, after `seconds` of media time, "
                  "once `target` is seen, or at the end of the current event"),
        ],
        camera: Annotated[str | None, Field(description="camera id; may be omitted when one camera is live")] = None,
        scene_description: Annotated[str | None, Field(max_length=300, description="what the scene is, e.g. "
                                                       "'a kitchen; the person at the stove is the cook'")] = None,
        focus_targets: Annotated[list[str], Field(max_length=8, description="people/objects to pay attention to, "
                                                  "entity ids or short labels")] = [],  # noqa: B006 - never mutated
        rules: Annotated[list[str], Field(max_length=5, description="things to watch for, one sentence each")] = [],  # noqa: B006
        segments: Annotated[int | None, Field(ge=1, le=100, description="for until=segments")] = None,
        seconds: Annotated[float | None, Field(gt=0, le=3600, description="for until=media_seconds")] = None,
        target: Annotated[str | None, Field(max_length=60, description="for until=target_seen")] = None,
    ) -> Annotated[CallToolResult, SteerResult]:
        """Steer live perception: inject a scene description, focus targets and rules into the
        vision model's context until an exit condition. At most one injection per minute of media
        time per camera, and a small budget per event.
        """
        app = ctx.request_context.lifespan_context
        runtime = _runtime(app)
        if runtime is None:
            raise ToolError("live perception is not running in this server; steering needs a capture "
                            "(capture_start) on a server built with perception")
        try:
            request = SteeringRequest(scene_description=scene_description, focus_targets=focus_targets, rules=rules,
                                      exit=ExitCondition(until=until, segments=segments, seconds=seconds,
                                                         target=target))
        except ValidationError as exc:
            raise ToolError("; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors())) from None
        cameras = sorted({m.camera_id for m in runtime.builder.memories() if m.active}
                         | {c.camera_id for c in _captures(app) if getattr(c, "state", "") in {"starting", "running"}})
        if camera is None:
            if len(cameras) != 1:
                raise ToolError(f"say which camera to steer: live cameras are {', '.join(cameras) or 'none'}")
            camera = cameras[0]
        memory = runtime.builder.memory(camera)
        with tool_errors("perception_steer"):
            try:
                steering = runtime.steering.inject(request, camera_id=camera, media_t=memory.last_t or 0.0,
                                                   event_id=memory.event_id)
            except SteeringRejected as exc:
                raise ToolError(str(exc)) from None
        result = SteerResult(steering_id=steering.id, camera_id=camera, event_id=memory.event_id, until=until,
                             budget_left=runtime.steering.budget_left(memory.event_id),
                             active=runtime.steering.lines(camera))
        return structured(result, f"steering {steering.id} active on {camera} until {until}; "
                                  f"{result.budget_left} injection(s) left in event {memory.event_id}")

    server.add_tool(perception_now, annotations=READ_ONLY, structured_output=False)
    server.add_tool(perception_steer, annotations=STEER)
