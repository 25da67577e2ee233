"""The dashboard: server-rendered pages (Jinja2 + htmx) over the running engine, at ``/``.

Served by the same process as ``/mcp`` (``reflectworld serve --http``, ``reflectworld run --http``)
and behind the same guard, because its routes are the MCP server's own HTTP routes
(:meth:`MCPServer.custom_route`): whatever guards ``/mcp`` (Host, Origin, bearer token) guards
every page. Pages: sources with live status, a timeline per camera, a moment with its
neighbours, entities with faces and facts (rename, merge, split, forget), search, rules, the
notification feed and, with a ``qa:`` model, chat.

This package's ``__init__`` only holds the manifest section, so the manifest model can import it
without loading Jinja2; :func:`register` imports the routes lazily.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import Field

from perception.settings import Strict

__all__ = ["DashboardConfig", "register"]


class DashboardConfig(Strict):
    """The web dashboard at ``/`` of the HTTP transport."""

    enabled: bool = Field(True, description="serve the dashboard on the HTTP transport")
    read_only: bool = Field(False, description="pages only: no capture start/stop, identity edits or rule changes")


def register(server: Any, get_engine: Callable[[], Any], config: DashboardConfig) -> None:
    """Add the dashboard routes to ``server`` (``get_engine()`` is the running engine or ``None``)."""
    if not config.enabled:
        return
    from plugin.dashboard.routes import add_routes

    add_routes(server, get_engine, read_only=config.read_only)
