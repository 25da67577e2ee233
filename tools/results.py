"""Tool results that hosts read once: a short human summary as text, the data as structured content.

MCPServer turns a returned pydantic model into *both* ``structured_content`` and a
``TextContent`` holding the same model as JSON. Hosts such as OpenClaw show both blocks to the
model, so every result would be paid for twice. A tool that instead returns a
:class:`~mcp.types.CallToolResult` and is annotated ``Annotated[CallToolResult, Model]`` keeps the
output schema derived from ``Model`` (the SDK still validates ``structured_content`` against it)
while choosing its own text. :func:`structured` builds that result from the model and a summary
written for people and text-only hosts: ids and a few words per item, never the JSON again.

Usage in a tool module::

    def memory_search(...) -> Annotated[CallToolResult, SearchResults]:
        results = SearchResults(...)
        return structured(results, f"{len(results.hits)} hits: ...")

    server.add_tool(memory_search, annotations=READ_ONLY)

Both protocol eras (2026-07-28 and 2025-11-25) carry the result unchanged. Image tools keep
returning ``Image`` content with ``structured_output=False`` (no output schema).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel

__all__ = ["clip", "clock", "itemize", "structured"]

logger = logging.getLogger(__name__)

#: the most lines a summary lists before saying "… and N more" (the data is in structured content)
MAX_SUMMARY_LINES = 12


def structured(result: BaseModel, summary: str) -> CallToolResult:
    """A tool result carrying ``result`` as structured content and ``summary`` as its only text.

    The tool must be annotated ``-> Annotated[CallToolResult, type(result)]`` so the output schema
    is published and the SDK validates ``structured_content`` against it.
    """
    return CallToolResult(
        content=[TextContent(type="text", text=summary)],
        structured_content=result.model_dump(mode="json", by_alias=True),
    )


def clip(text: str, width: int = 60) -> str:
    """``text`` on one line, cut to ``width`` characters with an ellipsis."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= width else flat[: max(width - 1, 1)].rstrip() + "…"


def clock(seconds: float | None) -> str:
    """Media seconds as ``m:ss.s`` (``?`` when unknown)."""
    if seconds is None:
        return "?"
    minutes, secs = divmod(max(float(seconds), 0.0), 60)
    return f"{int(minutes)}:{secs:04.1f}"


def itemize(header: str, lines: Iterable[str], footer: str | None = None) -> str:
    """A header, numbered lines (at most :data:`MAX_SUMMARY_LINES`), and an optional footer."""
    items = list(lines)
    out = [header]
    out.extend(f"{n}. {line}" for n, line in enumerate(items[:MAX_SUMMARY_LINES], 1))
    if len(items) > MAX_SUMMARY_LINES:
        out.append(f"… and {len(items) - MAX_SUMMARY_LINES} more in the structured result")
    if footer:
        out.append(footer)
    return "\n".join(out)
