"""Capture tools: start and stop ingesting a source, see how captures are doing, look at the latest frame."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Any

from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import BaseModel, Field

from perception.segmenting.keyframes import encode_jpeg
from tools.access import policy_of, start_checked
from tools.errors import tool_errors
from tools.results import structured

__all__ = ["CaptureList", "CaptureState", "register"]

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
STARTS = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=True)
STOPS = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False)

_ALLOWED_OPTIONS = {"mode", "open_timeout_s", "read_timeout_s", "rtsp_transport", "stall_s", "backoff_s",
                    "backoff_max_s", "image_interval_s", "video_size", "framerate", "input_format", "live"}


class CaptureState(BaseModel):
    """One capture: its source (credentials removed), state and counters."""

    camera_id: str
    source: str
    kind: str = Field(description="file, images, rtsp, http, v4l2 or phone")
    live: bool
    state: str = Field(description="starting, running, reconnecting, stopping, done, stopped or failed")
    started_at: float = Field(description="epoch seconds")
    segments_written: int
    error: str | None = None
    stats: dict[str, Any] = Field(description="fps_in, fps_out, lag_s, dropped, reconnects, last_error, …")


class CaptureList(BaseModel):
    """Every capture of this server, running or finished."""

    captures: list[CaptureState]
    perception: dict[str, Any] = Field(
        default_factory=dict, description="segment gate counts (analysed, skipped, light, full, reasons) and VLM "
        "tokens (per stage, and per analysed segment)")
    store: dict[str, Any] = Field(
        default_factory=dict, description="memory store size on disk (size_mb) and live versions per table")


def _perception_status(ctx: Context[Any]) -> dict[str, Any]:
    """Scheduler counters and VLM token totals of the running server (empty without a runtime)."""
    runtime = getattr(ctx.request_context.lifespan_context, "perception", None)
    if runtime is None:
        return {}
    status = runtime.status()
    analysed = int(status.get("scheduler", {}).get("analysed", 0) or 0)
    tokens = sum(int(stage.get("total_tokens", 0)) for stage in status.get("vlm_tokens", {}).values())
    status["vlm_tokens_per_segment"] = round(tokens / analysed, 1) if analysed else 0
    return status


def _worker(ctx: Context[Any]) -> Any:
    worker = getattr(ctx.request_context.lifespan_context, "worker", None)
    if worker is None:
        raise ToolError("capture is not available: this server was started without the background worker")
    return worker


def _line(c: CaptureState) -> str:
    s = c.stats
    extra = f", {s.get('fps_in', 0)} fps in, {s.get('dropped', 0)} dropped, {s.get('reconnects', 0)} reconnects" \
        if c.live else ""
    err = f" — {c.error}" if c.error else ""
    return f"{c.camera_id}: {c.state}, {c.kind} {c.source}, {c.segments_written} segment(s){extra}{err}"


def register(server: MCPServer[Any]) -> None:
    """Add the capture tools to ``server``."""

    async def capture_start(
        source: Annotated[str, Field(description="a video file path, a folder of images, rtsp://…, rtsps://…, "
                                     "http(s)://… (MPEG-TS, HLS, faststart MP4), /dev/videoN, or phone:NAME")],
        ctx: Context[Any],
        camera_id: Annotated[str | None, Field(description="name to file memories under (default: derived "
                                               "from the source)", max_length=64)] = None,
        options: Annotated[dict[str, Any] | None, Field(description="optional: mode (offline_quality | "
                           "live_latency), open_timeout_s, read_timeout_s, rtsp_transport (tcp; UDP cameras go in "
                           "the manifest), stall_s, image_interval_s, video_size, framerate, input_format")] = None,
    ) -> Annotated[CallToolResult, CaptureState]:
        """Start remembering a camera, stream or file in the background.

        The source is checked first: a missing file, unreachable camera or unreadable stream fails
        here with the reason. Live sources reconnect by themselves; follow them with capture_status.
        """
        unknown = set(options or {}) - _ALLOWED_OPTIONS
        if unknown:
            raise ToolError(f"unknown option(s) {sorted(unknown)}; allowed: {sorted(_ALLOWED_OPTIONS)}")
        with tool_errors("capture_start"):
            info = await start_checked(_worker(ctx), policy_of(ctx), source, camera_id, options)
        state = CaptureState(**asdict(info))
        return structured(state, f"capture started — {_line(state)}")

    def capture_stop(
        camera_id: Annotated[str, Field(description="camera id from capture_start / capture_status")],
        ctx: Context[Any],
    ) -> Annotated[CallToolResult, CaptureState]:
        """Stop a capture; the segment in progress is finished (or dropped if too short) first.

        Waits up to 10 s; state "stopping" means it is still finishing that segment (capture_status shows when
        it has stopped)."""
        with tool_errors("capture_stop"):
            info = _worker(ctx).stop_capture(camera_id)
        state = CaptureState(**asdict(info))
        verb = "stopping (finishing its segment in progress)" if state.state == "stopping" else "stopped"
        return structured(state, f"capture {verb} — {_line(state)}")

    def capture_status(
        ctx: Context[Any],
        camera_id: Annotated[str | None, Field(description="only this camera (default: all)")] = None,
    ) -> Annotated[CallToolResult, CaptureList]:
        """List captures with their state and counters (frames per second, lag, dropped frames, reconnects, errors),
        and the memory store's size on disk and table versions."""
        with tool_errors("capture_status"):
            infos = _worker(ctx).status(camera_id)
            store = ctx.request_context.lifespan_context.store.storage_status()
        result = CaptureList(captures=[CaptureState(**asdict(i)) for i in infos],
                             perception=_perception_status(ctx), store=store)
        text = "\n".join(_line(c) for c in result.captures) or "no captures; start one with capture_start"
        gate = result.perception.get("scheduler", {})
        if gate:
            text += (f"\nsegments: {gate.get('analysed', 0)} analysed ({gate.get('full', 0)} full, "
                     f"{gate.get('light', 0)} light), {gate.get('skipped', 0)} skipped; "
                     f"VLM tokens per analysed segment: {result.perception.get('vlm_tokens_per_segment', 0)}")
        if store.get("size_mb") is not None:
            text += f"\nstore: {store['size_mb']} MB on disk, {store.get('total_versions', 0)} table versions"
        return structured(result, text)

    def capture_snapshot(
        camera_id: Annotated[str, Field(description="camera id from capture_status")],
        ctx: Context[Any],
    ) -> list[str | Image]:
        """Show the latest frame a capture has seen, as an image."""
        with tool_errors("capture_snapshot"):
            image, t = _worker(ctx).snapshot(camera_id)
            jpeg = encode_jpeg(image, 1280, 85)
        return [f"latest frame of {camera_id} at media time {t:.1f} s", Image(data=jpeg, format="jpeg")]

    server.add_tool(capture_start, annotations=STARTS)
    server.add_tool(capture_stop, annotations=STOPS)
    server.add_tool(capture_status, annotations=READ_ONLY)
    server.add_tool(capture_snapshot, annotations=READ_ONLY, structured_output=False)
