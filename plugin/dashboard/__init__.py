"""The dashboard: server-rendered pages (Jinja2 + htmx) over the running engine, at ``/``.

Served by the same process as ``/mcp`` (``reflectworld serve --http``, ``reflectworld run --http``)
and behind the same guard, because its routes are the MCP server's own HTTP routes
(:meth:`MCPServer.custom_route`): whatever guards ``/mcp`` (Host, Origin, bearer token) guards
every page. Pages: sources with live status, a timeline per camera, a moment with its
neighbours, entities with faces and facts (rename, merge, split, forget), search, rules, the
notification feed and, with a ``qa:`` model, chat.

The manifest section (:class:`DashboardConfig`) lives in :mod:`plugin.manifest_sections`, so the
manifest model never imports the dashboard; :func:`register` imports the routes lazily.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from plugin.manifest_sections import DashboardConfig

__all__ = ["DashboardConfig", "register"]


def register(server: Any, get_engine: Callable[[], Any], config: DashboardConfig) -> None:
    """Add the dashboard routes to ``server`` (``get_engine()`` is the running engine or ``None``)."""
    if not config.enabled:
        return
    from plugin.dashboard.routes import add_routes

    add_routes(server, get_engine, read_only=config.read_only)
