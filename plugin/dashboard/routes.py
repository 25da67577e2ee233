"""HTTP routes of the dashboard: full pages for navigation, htmx partials for updates and forms.

Pages are plain GETs that work without JavaScript; htmx (vendored under ``static/``, no CDN, no
build step) polls the live parts (capture status every 2 s, the notification feed every 5 s) and
posts the forms. State-changing routes are POSTs that also require the ``HX-Request`` header:
a cross-site form cannot set it, and a cross-site script cannot send it without a CORS preflight,
which nothing here answers — so another site cannot drive the server even where no token is set.
In read-only mode those routes answer 403 and the pages show no forms.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from importlib.resources import files
from typing import Any

import anyio
from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response

from memory.errors import MemoryStoreError, NotFoundError
from perception.errors import MediaError
from plugin.dashboard import views
from plugin.errors import PluginError
from tools.access import AccessPolicy, start_checked

__all__ = ["add_routes"]

logger = logging.getLogger(__name__)

_STATIC = {"htmx.min.js": "text/javascript", "style.css": "text/css", "htmx-LICENSE.txt": "text/plain"}
_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")
_LEVELS = ("traces", "observations", "entities", "schemas", "facts")
_SEVERITIES = ("info", "warning", "critical")
PAGE_SIZE = 20

Handler = Callable[[Request], Awaitable[Response]]


def _environment() -> Environment:
    env = Environment(loader=PackageLoader("plugin.dashboard", "templates"), autoescape=select_autoescape(),
                      trim_blocks=True, lstrip_blocks=True)
    env.filters["clock"] = _clock
    env.filters["when"] = _when
    env.globals["link_for"] = views.link_for
    env.globals["level_of"] = views.level_of
    return env


def _clock(seconds: Any) -> str:
    if seconds is None:
        return "–"
    minutes, secs = divmod(max(float(seconds), 0.0), 60)
    return f"{int(minutes)}:{secs:04.1f}"


def _when(epoch: Any) -> str:
    import datetime as dt

    if not epoch:
        return "–"
    return dt.datetime.fromtimestamp(float(epoch)).strftime("%Y-%m-%d %H:%M:%S")


def add_routes(server: Any, get_engine: Callable[[], Any], read_only: bool) -> None:
    """Register every dashboard route on ``server`` (see the module docstring)."""
    env = _environment()
    static = {name: (files("plugin.dashboard") / "static" / name).read_bytes() for name in _STATIC}

    def render(template: str, request: Request, status: int = 200, **context: Any) -> HTMLResponse:
        engine = get_engine()
        qa = engine is not None and engine.manifest.qa is not None
        html = env.get_template(template).render(request=request, read_only=read_only, qa=qa,
                                                 path=request.url.path, **context)
        return HTMLResponse(html, status_code=status)

    def change(request: Request, read_only_applies: bool = True) -> tuple[Any, Response | None]:
        """The engine, and the response refusing a change from ``request`` (None when it may go ahead)."""
        engine = get_engine()
        if engine is None:
            return None, _starting()
        return engine, _write_refusal(request, read_only and read_only_applies)

    def page(template: str, build: Callable[..., dict[str, Any]], *, partial: str | None = None,
             writes: bool = False) -> Callable[[Callable[[Request, Any], Any]], Handler]:
        """Wrap ``view(request, engine) -> args`` into a handler rendering ``template`` with ``build(engine, *args)``."""

        def decorate(view: Callable[[Request, Any], Any]) -> Handler:
            async def handler(request: Request) -> Response:
                engine = get_engine()
                if engine is None:
                    return _starting()
                if writes:
                    refusal = _write_refusal(request, read_only)
                    if refusal is not None:
                        return refusal
                try:
                    args = await view(request, engine)
                    data = await anyio.to_thread.run_sync(lambda: build(engine, *args))
                except NotFoundError as exc:
                    return render("error.html", request, status=404, message=str(exc))
                except (ValueError, KeyError, MemoryStoreError) as exc:
                    return render("error.html", request, status=400, message=_message(exc))
                chosen = partial if partial and request.headers.get("hx-request") else template
                return render(chosen, request, **data)

            return handler

        return decorate

    # ------------------------------------------------------------------ sources

    async def sources_args(_request: Request, _engine: Any) -> tuple[()]:
        return ()

    def captures(engine: Any) -> dict[str, Any]:
        return views.sources_page(engine, full=False)

    server.custom_route("/", methods=["GET"], include_in_schema=False)(
        page("sources.html", views.sources_page)(sources_args))
    server.custom_route("/sources/status", methods=["GET"], include_in_schema=False)(
        page("_captures.html", captures)(sources_args))

    async def capture_start(request: Request) -> Response:
        engine, refusal = change(request)
        if refusal is not None:
            return refusal
        form = await request.form()
        source = str(form.get("source", "")).strip()
        camera = str(form.get("camera_id", "")).strip() or None
        note, error = "", False
        try:
            if not source:
                raise ValueError("type a source first: a file path, rtsp://…, http(s)://… or /dev/videoN")
            # The page obeys the manifest's access section exactly like the capture_start tool.
            policy = AccessPolicy.from_config(getattr(engine.manifest, "access", None))
            info = await start_checked(engine.worker, policy, source, camera, None)
            note = f"started {info.camera_id}"
        except (ValueError, KeyError, OSError, PluginError, MediaError) as exc:
            note, error = f"not started: {_message(exc)}", True
        data = await anyio.to_thread.run_sync(lambda: views.sources_page(engine, full=False))
        return render("_captures.html", request, note=note, error=error, **data)

    async def capture_stop(request: Request) -> Response:
        engine, refusal = change(request)
        if refusal is not None:
            return refusal
        camera = request.path_params["camera"]
        try:
            info = await anyio.to_thread.run_sync(lambda: engine.worker.stop_capture(camera))
            note, error = (f"stopping {camera}: finishing its segment in progress" if info.state == "stopping"
                           else f"stopped {camera}"), False
        except KeyError:
            note, error = f"no capture named {camera}", True
        data = await anyio.to_thread.run_sync(lambda: views.sources_page(engine, full=False))
        return render("_captures.html", request, note=note, error=error, **data)

    server.custom_route("/sources/start", methods=["POST"], include_in_schema=False)(capture_start)
    server.custom_route("/sources/{camera}/stop", methods=["POST"], include_in_schema=False)(capture_stop)

    # ------------------------------------------------------------------ timeline and moments

    async def timeline_args(request: Request, _engine: Any) -> tuple[Any, ...]:
        q = request.query_params
        return q.get("camera") or None, _int(q.get("offset"), 0), PAGE_SIZE

    server.custom_route("/timeline", methods=["GET"], include_in_schema=False)(
        page("timeline.html", views.timeline_page, partial="_timeline.html")(timeline_args))

    async def moment_args(request: Request, _engine: Any) -> tuple[Any, ...]:
        return (_checked_id(request.path_params["item_id"]),)

    server.custom_route("/moments/{item_id}", methods=["GET"], include_in_schema=False)(
        page("moment.html", views.moment_page)(moment_args))

    async def keyframe(request: Request) -> Response:
        engine = get_engine()
        if engine is None:
            return _starting()
        kf_id = request.path_params["kf_id"]
        if not _ID.match(kf_id):
            return PlainTextResponse("bad key-frame id", status_code=400)
        frames = await anyio.to_thread.run_sync(lambda: engine.store.keyframes([kf_id]))
        if not frames:
            return PlainTextResponse(f"no key frame {kf_id}", status_code=404)
        return Response(frames[0].jpeg, media_type="image/jpeg", headers={"cache-control": "private, max-age=3600"})

    server.custom_route("/keyframes/{kf_id}.jpg", methods=["GET"], include_in_schema=False)(keyframe)

    # ------------------------------------------------------------------ entities

    async def entities_args(request: Request, _engine: Any) -> tuple[Any, ...]:
        q = request.query_params
        kind = q.get("kind") if q.get("kind") in ("person", "object") else None
        return kind, _int(q.get("offset"), 0), 48

    server.custom_route("/entities", methods=["GET"], include_in_schema=False)(
        page("entities.html", views.entities_page)(entities_args))

    async def entity_args(request: Request, _engine: Any) -> tuple[Any, ...]:
        return (_checked_id(request.path_params["entity_id"]),)

    server.custom_route("/entities/{entity_id}", methods=["GET"], include_in_schema=False)(
        page("entity.html", views.entity_page)(entity_args))

    async def entity_edit(request: Request) -> Response:
        engine, refusal = change(request)
        if refusal is not None:
            return refusal
        action = request.path_params["action"]
        form = await request.form()
        try:
            entity_id = _checked_id(request.path_params["entity_id"])
            entity, message = await anyio.to_thread.run_sync(lambda: views.edit_entity(
                engine, action, entity_id, name=str(form.get("name", "")), into_id=str(form.get("into_id", "")),
                observation_ids=[str(v) for v in form.getlist("observation_ids")]))
        except (ValueError, NotFoundError, MemoryStoreError) as exc:
            return render("_flash.html", request, status=200, message=_message(exc), error=True)
        target = f"/entities/{entity.id}" if entity is not None else "/entities"
        response = render("_flash.html", request, message=message, error=False)
        response.headers["HX-Location"] = target  # htmx navigates to the edited (or the list) page
        return response

    server.custom_route("/entities/{entity_id}/{action}", methods=["POST"], include_in_schema=False)(entity_edit)

    # ------------------------------------------------------------------ search, rules, notifications

    async def search_args(request: Request, _engine: Any) -> tuple[Any, ...]:
        q = request.query_params
        level = q.get("level") if q.get("level") in _LEVELS else "traces"
        return q.get("q", "")[:500], level

    server.custom_route("/search", methods=["GET"], include_in_schema=False)(
        page("search.html", views.search_page, partial="_hits.html")(search_args))

    async def rules_args(_request: Request, _engine: Any) -> tuple[()]:
        return ()

    server.custom_route("/rules", methods=["GET"], include_in_schema=False)(
        page("rules.html", views.rules_page)(rules_args))

    async def rule_add(request: Request) -> Response:
        engine, refusal = change(request)
        if refusal is not None:
            return refusal
        form = await request.form()
        text = str(form.get("text", "")).strip()[:500]
        camera = str(form.get("camera", "")).strip()
        severity = str(form.get("severity", "info"))
        severity = severity if severity in _SEVERITIES else "info"
        note, error = "", False
        try:
            if not text:
                raise ValueError("write the rule in plain words first, e.g. 'tell me when someone is at the door'")
            rule = await anyio.to_thread.run_sync(
                lambda: engine.notifications.add_rule(text, [camera] if camera else [], None, severity))
            note = f"added {rule.id}"
        except ValueError as exc:
            note, error = str(exc), True
        data = await anyio.to_thread.run_sync(lambda: views.rules_page(engine))
        return render("_rules.html", request, note=note, error=error, **data)

    async def rule_remove(request: Request) -> Response:
        engine, refusal = change(request)
        if refusal is not None:
            return refusal
        rule_id = request.path_params["rule_id"]
        removed = _ID.match(rule_id) is not None and await anyio.to_thread.run_sync(
            lambda: engine.notifications.procedural.remove_rule(rule_id))
        data = await anyio.to_thread.run_sync(lambda: views.rules_page(engine))
        return render("_rules.html", request, note=f"removed {rule_id}" if removed else f"no rule {rule_id}",
                      error=not removed, **data)

    server.custom_route("/rules", methods=["POST"], include_in_schema=False)(rule_add)
    server.custom_route("/rules/{rule_id}/remove", methods=["POST"], include_in_schema=False)(rule_remove)

    async def feed_args(request: Request, _engine: Any) -> tuple[Any, ...]:
        return 50, request.query_params.get("sent") == "1"

    server.custom_route("/notifications", methods=["GET"], include_in_schema=False)(
        page("notifications.html", views.notifications_feed, partial="_feed.html")(feed_args))

    # ------------------------------------------------------------------ chat

    async def chat_page(request: Request) -> Response:
        engine = get_engine()
        if engine is None:
            return _starting()
        return render("chat.html", request, answer=None, question="")

    async def chat_ask(request: Request) -> Response:
        engine, refusal = change(request, read_only_applies=False)  # asking changes nothing
        if refusal is not None:
            return refusal
        qa = engine.manifest.qa
        if qa is None:
            return render("_answer.html", request, question="", answer=None,
                          error="no QA model configured: add a `qa:` section to the manifest")
        question = str((await request.form()).get("question", "")).strip()[:1000]
        if not question:
            return render("_answer.html", request, question="", answer=None, error="ask a question first")
        from mcp.server.mcpserver.exceptions import ToolError

        from plugin.agent.ask import make_asker

        try:
            answer = await make_asker(qa)(engine.store, question)
        except ToolError as exc:
            return render("_answer.html", request, question=question, answer=None, error=str(exc))
        return render("_answer.html", request, question=question, answer=answer, error="")

    server.custom_route("/chat", methods=["GET"], include_in_schema=False)(chat_page)
    server.custom_route("/chat", methods=["POST"], include_in_schema=False)(chat_ask)

    async def static_file(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in static:
            return PlainTextResponse("not found", status_code=404)
        return Response(static[name], media_type=_STATIC[name], headers={"cache-control": "public, max-age=86400"})

    server.custom_route("/static/{name}", methods=["GET"], include_in_schema=False)(static_file)


def _write_refusal(request: Request, read_only: bool) -> Response | None:
    if read_only:
        return PlainTextResponse("the dashboard is read-only (server.dashboard.read_only)", status_code=403)
    if request.headers.get("hx-request") != "true":
        return PlainTextResponse("changes are made from the dashboard's own pages (HX-Request header missing)",
                                 status_code=403)
    return None


def _starting() -> Response:
    return PlainTextResponse("the server is starting; reload in a moment", status_code=503)


def _checked_id(value: str) -> str:
    if not _ID.match(value):
        raise ValueError("ids are letters, digits, '_', '.', ':' or '-'")
    return value


def _int(value: str | None, default: int) -> int:
    try:
        return max(0, min(int(value or default), 1_000_000))
    except ValueError:
        return default


def _message(exc: BaseException) -> str:
    text = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
    return text.strip("'\"") or type(exc).__name__
