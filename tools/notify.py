"""Notification tools: set a camera's policy, long-poll for notifications, and the resource.

MCP on the 2026 protocol has no general server push, so hosts either long-poll with
``notify_poll`` or watch the ``reflectworld://notifications`` resource (a ``subscriptions/listen``
stream gets a resource-updated event per notification; legacy sessions that called a notify tool
get ``notifications/resources/updated``). Webhooks, the OpenClaw hook and ntfy deliver out of band.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any, Literal

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.types import CallToolResult
from pydantic import BaseModel, Field

from memory.procedural import NOTIFICATIONS_URI, Notification, NotifyPolicy, QuietHours, to_notification
from tools.errors import tool_errors
from tools.results import clip, clock, itemize, structured
from tools.rules import READ_ONLY, WRITES, service_of

__all__ = ["CROSS_PROCESS_RECHECK_S", "register"]

#: notification cursors are epoch microseconds; this bound (year 2286) keeps every value a valid int64 filter
MAX_CURSOR = 10**16

#: while long-polling, re-read the store this often for notifications sent by other processes
CROSS_PROCESS_RECHECK_S = 2.0
#: notifications the resource shows (newest)
RESOURCE_LATEST = 20


class PollResult(BaseModel):
    """Notifications sent after ``since``, oldest first."""

    notifications: list[Notification]
    cursor: int = Field(description="pass as `since` next time")
    timed_out: bool = Field(description="true when nothing arrived within wait_s")


def _remember_legacy_session(ctx: Context[Any], service: Any) -> None:
    """Legacy (2025) sessions get resource-updated pushes once they used a notify tool."""
    version = getattr(ctx, "protocol_version", None)
    if version and version < "2026":
        service.legacy_sessions.add(ctx.session)


def register(server: MCPServer[Any], max_results: int = 50, current: Callable[[], Any] | None = None) -> None:
    """Add notify_policy and notify_poll to ``server``, and the notifications resource when ``current``
    (returning the running NotificationService or None; static resources get no Context) is given."""

    def notify_policy(
        ctx: Context[Any],
        camera: Annotated[str, Field(description="camera id, or '*' for the default of every camera")] = "*",
        channels: Annotated[list[Literal["poll", "webhook", "openclaw", "ntfy"]] | None, Field(description=(
            "where notifications go; poll = notify_poll and the reflectworld://notifications resource"))] = None,
        min_severity: Annotated[Literal["info", "warning", "critical"] | None, Field(description=(
            "suppress rules below this severity"))] = None,
        quiet_hours: Annotated[QuietHours | None, Field(description=(
            "{start, end} HH:MM local time: suppress everything below critical then"))] = None,
        clear_quiet_hours: Annotated[bool, Field(description="remove the quiet hours")] = False,
        timezone: Annotated[str | None, Field(description="IANA zone for quiet hours, e.g. Europe/Paris")] = None,
        event_gap_s: Annotated[float | None, Field(ge=0, le=86400, description=(
            "matches closer than this belong to one event and notify once"))] = None,
        reminders: Annotated[bool | None, Field(description="false mutes reminders from memory here")] = None,
    ) -> Annotated[CallToolResult, NotifyPolicy]:
        """Show or change a camera's notification policy; omitted fields keep their value.

        Returns the policy now in effect for that camera.
        """
        service = service_of(ctx)
        _remember_legacy_session(ctx, service)
        changes: dict[str, Any] = {k: v for k, v in {"channels": channels, "min_severity": min_severity,
                                                     "quiet_hours": quiet_hours, "timezone": timezone,
                                                     "event_gap_s": event_gap_s, "proactive": reminders}.items()
                                     if v is not None}
        if clear_quiet_hours:
            changes["quiet_hours"] = None
        if timezone is not None:
            from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

            try:
                ZoneInfo(timezone)
            except (ZoneInfoNotFoundError, ValueError):
                raise ToolError(f"unknown timezone '{timezone}'; use an IANA name such as Europe/Paris") from None
        with tool_errors("notify_policy"):
            current = service.policy(camera)
            if changes:
                policy = NotifyPolicy.model_validate({**current.model_dump(), **changes, "camera_id": camera})
                current = service.procedural.set_policy(policy)
        return structured(current, _policy_summary(current, changed=bool(changes)))

    async def notify_poll(
        ctx: Context[Any],
        since: Annotated[int, Field(ge=0, le=MAX_CURSOR, description="cursor from the previous call; 0 = from the start")] = 0,
        wait_s: Annotated[float, Field(ge=0, le=60, description="how long to wait for a new notification")] = 20.0,
        camera: Annotated[str | None, Field(description="only this camera id")] = None,
        limit: Annotated[int, Field(ge=1, le=100, description="at most this many notifications")] = 20,
    ) -> Annotated[CallToolResult, PollResult]:
        """Wait for notifications sent after `since` (long-poll) and return them with the next cursor.

        Returns at once when some are pending, otherwise after the first arrives or wait_s passes.
        """
        service = service_of(ctx)
        _remember_legacy_session(ctx, service)
        result = await _poll(service, since, wait_s, camera, min(limit, max_results))
        return structured(result, _poll_summary(result, wait_s))

    async def _poll(service: Any, since: int, wait_s: float, camera: str | None, limit: int) -> PollResult:
        """Long-poll the sent notifications after ``since`` (see notify_poll)."""
        deadline = anyio.current_time() + wait_s
        while True:
            version = service.hub.version
            with tool_errors("notify_poll"):
                records = await anyio.to_thread.run_sync(
                    lambda: service.procedural.decisions(since, "sent", camera, limit=limit))
            if records:
                return PollResult(notifications=[to_notification(r) for r in records],
                                  cursor=max(r.seq for r in records), timed_out=False)
            left = deadline - anyio.current_time()
            if left <= 0:
                return PollResult(notifications=[], cursor=since, timed_out=True)
            await service.hub.wait_change(version, min(left, CROSS_PROCESS_RECHECK_S))

    async def notifications_resource() -> str:
        """The latest notifications sent (JSON), newest last, with the cursor for notify_poll."""
        service = current() if current is not None else None
        if service is None:
            raise ResourceError("notifications are not running on this server yet; retry once it has started")
        records = await anyio.to_thread.run_sync(lambda: service.procedural.decisions(0, "sent", limit=RESOURCE_LATEST,
                                                                                    newest=True))
        latest = records
        return json.dumps({"cursor": latest[-1].seq if latest else 0,
                           "notifications": [to_notification(r).model_dump() for r in latest]})

    server.add_tool(notify_policy, annotations=WRITES)
    server.add_tool(notify_poll, annotations=READ_ONLY)
    if current is None:
        return
    server.resource(NOTIFICATIONS_URI, name="notifications", mime_type="application/json",
                    description="latest notifications sent; updated (resource-updated event) on every new one")(
        notifications_resource)


def _policy_summary(policy: NotifyPolicy, changed: bool) -> str:
    """The policy in one line; structured content holds every field."""
    quiet = f"{policy.quiet_hours.start}–{policy.quiet_hours.end}" if policy.quiet_hours else "none"
    zone = f" ({policy.timezone})" if policy.timezone and policy.quiet_hours else ""
    return (f"policy for camera {policy.camera_id} {'updated' if changed else '(unchanged)'}: "
            f"channels {', '.join(policy.channels) or 'none'}; min severity {policy.min_severity}; "
            f"quiet hours {quiet}{zone}; event gap {policy.event_gap_s:g} s; "
            f"reminders from memory {'on' if policy.proactive else 'muted'}")


def _poll_summary(result: PollResult, wait_s: float) -> str:
    """One line per notification; message, evidence and key frame are structured content."""
    if not result.notifications:
        return f"no new notifications within {wait_s:g} s; call again with since={result.cursor}"
    lines = [f"{n.id} [{n.camera_id} {clock(n.t_start)}] {n.severity} {n.rule_id}: {clip(n.message, 60)}"
             for n in result.notifications]
    return itemize(f"{len(result.notifications)} notification(s)", lines, f"next: since={result.cursor}")
