"""Rule tools: add, list and remove the user's rules (procedural memory).

A rule's text is shown to the vision-language model with every segment of its cameras; optional
structured conditions are also checked locally on every committed segment. A match is evidence
for the notification resolver (see ``notify_policy`` / ``notify_poll``), not a direct alert.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import BaseModel, Field

from memory.procedural import Rule, RuleConditions
from tools.errors import tool_errors
from tools.results import clip, itemize, structured

__all__ = ["register", "service_of"]

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
DESTRUCTIVE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True,
                              open_world_hint=False)


class RuleList(BaseModel):
    """The user's rules, oldest first."""

    rules: list[Rule]
    total: int = Field(description="rules matching the filter (the list may be capped)")


class RuleRemoved(BaseModel):
    """Result of rule_remove."""

    removed: str = Field(description="the rule id that was deleted")


def service_of(ctx: Context[Any]) -> Any:
    """The server's NotificationService, or a ToolError saying why there is none."""
    service = getattr(ctx.request_context.lifespan_context, "notifications", None)
    if service is None:
        raise ToolError("rules and notifications are not running on this server; restart it with a manifest "
                        "(reflectworld serve --manifest FILE)")
    return service


def register(server: MCPServer[Any], max_results: int = 50) -> None:
    """Add rule_add, rule_list and rule_remove to ``server``."""

    def rule_add(
        text: Annotated[str, Field(min_length=1, max_length=500, description=(
            "what to notice, in plain words, e.g. 'someone at the front door at night'"))],
        ctx: Context[Any],
        camera: Annotated[str | None, Field(description="only this camera id; omit for every camera")] = None,
        conditions: Annotated[RuleConditions | None, Field(description=(
            "structured conditions (all must hold) instead of compiling the text; usually omit"))] = None,
        severity: Annotated[Literal["info", "warning", "critical"], Field(description=(
            "critical ignores quiet hours; policies can suppress below a threshold"))] = "info",
        cooldown: Annotated[float, Field(ge=0, le=7 * 86400, description=(
            "seconds between two notifications of this rule for the same entity"))] = 300.0,
    ) -> Annotated[CallToolResult, Rule]:
        """Add a rule written in plain words (idempotent: the same text, camera and conditions give one rule).

        Without `conditions` the text is compiled locally; the result's conditions.understood says how
        it was read and conditions.needs_vlm what only a vision model can judge. A rule of which nothing
        can be understood is refused when no vision model is configured, with a hint how to rephrase it.
        """
        service = service_of(ctx)
        with tool_errors("rule_add"):
            rule = service.add_rule(text, [camera] if camera else [], conditions, severity, cooldown)
        return structured(rule, f"rule {_rule_line(rule)}{_reading(rule, service.vlm)}")

    def rule_list(
        ctx: Context[Any],
        camera: Annotated[str | None, Field(description="only rules that apply to this camera")] = None,
    ) -> Annotated[CallToolResult, RuleList]:
        """List the rules (text, conditions, cameras, severity, cooldown, enabled), oldest first."""
        service = service_of(ctx)
        with tool_errors("rule_list"):
            rules = service.procedural.list_rules(camera=camera)
        result = RuleList(rules=rules[:max_results], total=len(rules))
        return structured(result, _list_summary(result))

    def rule_remove(
        rule_id: Annotated[str, Field(description="a rule id (rule_…) from rule_list")],
        ctx: Context[Any],
    ) -> Annotated[CallToolResult, RuleRemoved]:
        """Delete a rule; its past notification decisions are kept."""
        service = service_of(ctx)
        with tool_errors("rule_remove"):
            removed = service.procedural.remove_rule(rule_id)
        if not removed:
            raise ToolError(f"unknown rule id '{rule_id}'; call rule_list to see the rule ids")
        return structured(RuleRemoved(removed=rule_id), f"rule {rule_id} removed; its past decisions are kept")

    server.add_tool(rule_add, annotations=WRITES)
    server.add_tool(rule_list, annotations=READ_ONLY)
    server.add_tool(rule_remove, annotations=DESTRUCTIVE)


def _rule_line(rule: Rule) -> str:
    """Id, scope, severity and the first words of a rule; conditions stay in structured content."""
    cameras = ", ".join(rule.camera_ids) or "every camera"
    off = "" if rule.enabled else ", disabled"
    return f"{rule.id} ({rule.severity}, {cameras}{off}): {clip(rule.text, 60)}"


def _reading(rule: Rule, vlm: bool) -> str:
    """How the rule's text was read: what became conditions and what needs a vision model."""
    cond = rule.conditions
    parts = []
    if cond.understood:
        parts.append("understood: " + "; ".join(cond.understood))
    if cond.needs_vlm:
        judge = ("the vision model judges the whole text" if vlm
                 else "ignored without a vision model (configure `vlm:` to have it judged)")
        parts.append("not a local condition: " + ", ".join(cond.needs_vlm) + f" — {judge}")
    return ("\n" + "\n".join(parts)) if parts else ""


def _list_summary(result: RuleList) -> str:
    header = f"{len(result.rules)} of {result.total} rule(s)"
    if not result.rules:
        header += "; add one with rule_add"
    return itemize(header, (_rule_line(r) for r in result.rules))
