"""The ``reflectworld`` command line.

``serve`` speaks MCP (stdio by default, streamable HTTP with ``--http``); ``ingest`` files a
video into memory with progress on stderr and resumes after an interrupt; ``demo`` ingests the
packaged sample clip and prints what memory now holds; ``validate`` checks a manifest;
``search`` queries memory from the shell; ``remember`` tells it notes (a JSON-lines history).
Logging is configured here and only here, always on stderr: under ``serve`` stdout is the MCP
wire. The other commands print their results on stdout.
"""

from __future__ import annotations

import argparse
import os
import logging
import signal
import sys
import threading
from functools import partial
from importlib.resources import files
from pathlib import Path
from types import FrameType
from typing import Any

import anyio

from perception.media.redact import install_log_redaction
from plugin.errors import ManifestError, PluginError
from plugin.cli_checks import ingest_path, require_store
from plugin.reporting import ingest_status

__all__ = ["main"]

logger = logging.getLogger("reflectworld")

DEMO_CLIP = "short_hamilton_clip.mp4"
#: seconds `ingest`, `demo` and `run` wait for queued semantic work and deliveries before exiting
DRAIN_S = 120.0


def _out(text: str = "") -> None:
    """Write a line of command output (not used by ``serve``, whose stdout is the MCP wire)."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


#: ``-v`` count of this invocation (set by :func:`main`): 1 = INFO, 2 = DEBUG on the terminal
_verbosity = 0
#: third-party loggers that speak at INFO about routine work (model paths, every audio chunk, requests)
_CHATTY = ("httpx", "httpx2", "mcp.server.lowlevel.server", "uvicorn.access", "faster_whisper", "RapidOCR",
           "lancedb", "openai")


def _setup_logging(level: str) -> None:
    """Log to stderr at ``level`` (the manifest's ``log_level``, WARNING unless set), or louder with ``-v``/``-vv``.

    Warnings and errors only, by default: progress of long commands is written separately
    (:mod:`plugin.progress`), and third-party loggers stay at WARNING unless ``-vv``. Every record is
    redacted (:class:`perception.media.redact.RedactingFilter`).
    """
    if _verbosity:
        level = "DEBUG" if _verbosity > 1 else "INFO"
    quiet = logging.getLevelName(level) >= logging.WARNING
    fmt = "%(levelname)s %(name)s: %(message)s" if quiet else "%(asctime)s %(levelname)s %(name)s: %(message)s"
    logging.basicConfig(level=level, stream=sys.stderr, format=fmt, force=True)
    install_log_redaction()  # credentials and token parameters never reach the log, at any level
    for noisy in _CHATTY:
        logging.getLogger(noisy).setLevel(logging.DEBUG if _verbosity > 1 else logging.WARNING)


def _manifest(args: argparse.Namespace) -> Any:
    from plugin.manifest import default_manifest, load_manifest

    manifest = load_manifest(args.manifest) if args.manifest else default_manifest()
    if getattr(args, "store", None):
        manifest = manifest.model_copy(update={"memory": manifest.memory.model_copy(update={"uri": args.store})})
    return manifest


# ---------------------------------------------------------------------------------- commands


def cmd_validate(args: argparse.Namespace) -> int:
    from plugin.manifest import load_manifest

    manifest = load_manifest(args.file)
    _out(f"{args.file}: valid (user {manifest.user_id}, store {manifest.store_uri()}, "
         f"embedder {manifest.memory.embedder.type}, vlm {'on' if manifest.vlm else 'off'})")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from plugin.server import create_server

    manifest = _manifest(args)
    _setup_logging(manifest.log_level)
    if args.http is None:
        logger.info("serving MCP over stdio")
        create_server(manifest).run()
        return 0
    _serve_http(manifest, args.http)
    return 0


def _serve_http(manifest: Any, bind: str) -> None:
    """MCP at ``/mcp`` and the dashboard at ``/`` on ``bind`` (``""``: the manifest's address)."""
    from plugin.engine import Overrides
    from plugin.http import parse_bind, serve_http
    from plugin.server import create_server

    cfg = manifest.server.http
    host, port = parse_bind(bind, cfg.port) if bind else (cfg.host, cfg.port)
    token = cfg.token.get_secret_value() if cfg.token else None
    server = create_server(manifest, Overrides(http=f"http://{host}:{port}/mcp"))
    if manifest.server.dashboard.enabled:
        shown = f"[{host}]" if ":" in host else host
        sys.stderr.write(f"reflectworld: dashboard at http://{shown}:{port}/ (MCP at /mcp)\n")
    anyio.run(partial(serve_http, allowed_hosts=cfg.allowed_hosts, allowed_origins=cfg.allowed_origins,
                      max_body_bytes=cfg.max_body_bytes), server, host, port, token or None)


class _Interrupt:
    """First Ctrl-C asks the ingest to stop after the current segment; a second one aborts."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def __enter__(self) -> threading.Event:
        self._previous = signal.signal(signal.SIGINT, self._handle)
        signal.signal(signal.SIGTERM, self._handle)
        return self.event

    def __exit__(self, *_: object) -> None:
        signal.signal(signal.SIGINT, self._previous)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if self.event.is_set():
            raise KeyboardInterrupt
        logger.warning("stopping after the current segment (press Ctrl-C again to abort now)")
        self.event.set()


def _engine(manifest: Any) -> Any:
    from plugin.engine import Engine

    return Engine.from_manifest(manifest).open()


def _ingest(engine: Any, path: Path, camera: str | None, *, tty_only: bool = False) -> Any:
    """Ingest one file with progress on stderr and Ctrl-C handling (the engine's close() drains the rest)."""
    from plugin.progress import Progress, ingest_progress

    progress = Progress(tty_only=tty_only)
    try:
        with _Interrupt() as stop:
            return engine.ingest_file(path, camera, progress=ingest_progress(path.name, progress), stop=stop)
    finally:
        progress.finish()


def cmd_ingest(args: argparse.Namespace) -> int:
    manifest = _manifest(args)
    _setup_logging(manifest.log_level)
    path = ingest_path(args.path)
    engine = _engine(manifest)
    try:
        report = _ingest(engine, path, args.camera)
    finally:
        engine.close(drain_s=DRAIN_S)
    status = "interrupted — run the same command again to resume" if report.interrupted else ingest_status(report)
    _out(f"{path}: {status}; {report.segments_written} segment(s) written, {report.segments_skipped} "
         f"already in memory, {len(report.entities)} entities, {report.seconds:.1f} s")
    return 130 if report.interrupted else 0


def cmd_demo(args: argparse.Namespace) -> int:
    from plugin.manifest import default_store_uri

    if not args.store:
        args.store = str(Path(default_store_uri()).parent / "demo" / "lancedb")
    manifest = _manifest(args)
    _setup_logging(manifest.log_level)
    clip = Path(str(files("perception") / "assets" / DEMO_CLIP))
    _out(f"ReflectWorld demo: ingesting {clip.name} (public domain, White House 2009) into {manifest.store_uri()}")
    engine = _engine(manifest)
    try:
        report = _ingest(engine, clip, "stage", tty_only=True)  # the demo's output is stdout alone
        if report.interrupted:
            _out("interrupted — run `reflectworld demo` again to resume")
            return 130
        engine.flush(DRAIN_S)
        store = engine.store
        _out(f"\nTimeline ({report.segments_written} new, {report.segments_skipped} already remembered):")
        for trace in store.timeline(camera="stage", limit=50):
            _out(f"  [{trace.t_start:5.1f}–{trace.t_end:5.1f} s] {trace.id}  {trace.summary}")
        _out("\nEntities:")
        for entity in store.list_entities(limit=20):
            label = f" ({entity.name})" if entity.name else ""
            _out(f"  {entity.id}{label}: {entity.kind}, seen in {entity.sightings} segment(s)")
        for query in ("close-up of a person", "wide shot with several people"):
            _out(f"\nSearch: {query!r}")
            for hit in store.search(query, level="traces", limit=3):
                _out(f"  {hit.score:6.3f}  {hit.id} [{hit.t_start:.1f}–{hit.t_end:.1f} s] {hit.text[:100]}")
        _out(f"\nServe this memory to an MCP host: reflectworld serve --store {manifest.store_uri()}")
    finally:
        engine.close(drain_s=DRAIN_S)
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    from plugin.engine import open_store

    manifest = _manifest(args)
    _setup_logging("WARNING")
    require_store(manifest.store_uri())
    store = open_store(manifest)
    try:
        found = store.find(args.query, level=args.level, limit=args.limit, mode=args.mode, tz=manifest.timezone)
        _out(f"Understood: {found.understood.summary}" + "".join(f"\nNote: {n}" for n in found.understood.notes))
        for hit in found.hits:
            _out(f"{hit.score:5.2f}  {hit.id}  {hit.text[:120]}")
    finally:
        store.close()
    return 0


def cmd_ask(args: argparse.Namespace) -> int:
    from plugin.agent.ask import MemoryAgent, build_client
    from plugin.engine import open_store

    manifest = _manifest(args)
    _setup_logging("WARNING")
    qa = manifest.qa
    if qa is None:
        raise PluginError("no QA model configured: add a `qa:` section (base_url, model, api_key: ${ENV}) "
                          "to the manifest — see manifests/example.yaml — and pass it with --manifest")

    async def run() -> Any:
        async with build_client(qa) as client:
            agent = MemoryAgent(store, client, qa.model, max_rounds=args.rounds or qa.max_rounds,
                                max_images=qa.max_images, camera=args.camera, until=args.until)
            return await agent.ask(args.question)

    require_store(manifest.store_uri())
    store = open_store(manifest)
    try:
        result = anyio.run(run)
    finally:
        store.close()
    if args.json:
        _out(result.model_dump_json(indent=2))
        return 0
    _out(result.answer)
    _out(f"\nMemories used: {', '.join(result.memory_ids) or 'none'}")
    note = " (round limit reached)" if result.finished == "round_limit" else ""
    _out(f"({result.rounds} model call(s): {', '.join(result.tool_calls) or 'no tool calls'}{note})")
    return 0


def cmd_remember(args: argparse.Namespace) -> int:
    """Tell memory the notes of a JSON-lines file (a history, or what a host collected)."""
    from memory.store.notes import NoteError
    from plugin.engine import open_store
    from plugin.remember import remember_file

    manifest = _manifest(args)
    _setup_logging(manifest.log_level)
    store = open_store(manifest)
    try:
        traces = remember_file(store, Path(args.file))
    except NoteError as exc:
        raise PluginError(str(exc)) from None
    finally:
        store.close()
    people = sum(bool(t.entity_ids) for t in traces)
    things = sum(bool(t.objects) for t in traces)
    _out(f"{args.file}: {len(traces)} note(s) remembered ({people} naming known people, {things} naming objects)")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    """Headless: ingest the manifest's sources (plus --source) with no MCP host until done or Ctrl-C."""
    from plugin.manifest import SourceConfig
    from plugin.progress import Progress, watch_captures

    manifest = _manifest(args)
    _setup_logging(manifest.log_level)
    extra = [SourceConfig(uri=uri) for uri in args.source or []]
    if not manifest.sources and not extra:
        raise PluginError("nothing to run: add `sources:` to the manifest or pass --source URI")
    if args.cluster:
        return _run_cluster(args, manifest, [s for s in [*manifest.sources, *extra] if s.enabled])
    if args.http is not None:  # serve MCP and the dashboard while the sources run, until Ctrl-C
        _serve_http(manifest.model_copy(update={"sources": [*manifest.sources, *extra]}), args.http)
        return 0
    engine = _engine(manifest)
    try:
        with _Interrupt() as stop:
            errors = engine.start_sources(extra)
            for error in errors:
                sys.stderr.write(f"error: {error}\n")
            watch_captures(engine.worker.status, engine.worker.idle, stop, Progress(interval_s=10.0))
        statuses = engine.worker.status()
    finally:
        engine.close(drain_s=DRAIN_S)
    failed = 0
    for info in statuses:
        failed += info.state == "failed"
        _out(f"{info.camera_id}: {info.state}, {info.segments_written} segment(s) written from {info.source}"
             + (f" — {info.error}" if info.error else ""))
    return 1 if failed or errors else 0


def _run_cluster(args: argparse.Namespace, manifest: Any, sources: list[Any]) -> int:
    """``run --cluster``: every source in a Ray actor; this process runs the user's post-commit side."""
    from plugin.cluster import connect, disconnect, run_cluster
    from plugin.progress import Progress, capture_line

    if args.http is not None:
        raise PluginError("--cluster and --http cannot be combined yet; serve the same store with "
                          "`reflectworld serve --http` next to the cluster run")
    connect(args.cluster)
    progress = Progress(interval_s=10.0)
    try:
        engine = _engine(manifest)
        try:
            engine.lease.acquire()
            with _Interrupt() as stop:
                run = run_cluster(engine, sources, stop, cpus_per_source=args.cpus_per_source,
                                  on_status=lambda infos: [progress.show(capture_line(i), i.camera_id) for i in infos])
        finally:
            progress.finish()
            engine.close(drain_s=DRAIN_S)
    finally:
        disconnect()
    for p in run.sources:
        restarts = f", worker restarted {p.restarts}×" if p.restarts else ""
        if p.replayed:
            restarts += f" ({p.replayed} segment(s) relayed from the store)"
        _out(f"{p.camera_id or p.name}: {'failed' if p.error else 'done'}, {p.relayed + p.replayed} segment(s) "
             f"written from {p.source or p.config.uri}{restarts}" + (f" — {p.error}" if p.error else ""))
    return 1 if run.failed else 0


# ---------------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``reflectworld``."""
    parser = argparse.ArgumentParser(prog="reflectworld", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="log more on stderr: -v info, -vv debug (default: warnings and errors only)")

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--manifest", "-m", help="YAML/TOML manifest (default: embedded store, local models)")
        p.add_argument("--store", help="LanceDB URI overriding memory.uri")
        p.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS,
                       help="log more on stderr: -v info, -vv debug")

    p = sub.add_parser("serve", help="run the MCP server (stdio, or HTTP with --http)")
    common(p)
    p.add_argument("--http", nargs="?", const="", metavar="HOST:PORT",
                   help="serve streamable HTTP at http://HOST:PORT/mcp (default from the manifest, 127.0.0.1:8765)")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("ingest", help="ingest a video file into memory (resumable)")
    common(p)
    p.add_argument("path")
    p.add_argument("--camera", help="camera id to file it under (default: the file name)")
    p.set_defaults(func=cmd_ingest)

    p = sub.add_parser("demo", help="ingest the packaged sample clip and show what memory holds")
    common(p)
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("validate", help="check a manifest and list every problem")
    p.add_argument("file")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("run", help="headless: ingest the manifest's sources without an MCP host")
    common(p)
    p.add_argument("--source", action="append", metavar="URI",
                   help="extra source (file, folder, rtsp://, http(s)://, /dev/videoN); repeatable")
    p.add_argument("--http", nargs="?", const="", metavar="HOST:PORT",
                   help="also serve the dashboard (and MCP) at http://HOST:PORT/ until Ctrl-C")
    p.add_argument("--cluster", metavar="ADDRESS",
                   help="run every source as an actor on a Ray cluster: ray://HOST:PORT, HOST:PORT, or auto "
                        "(extra `cluster`; see README, \"Beyond one machine\")")
    p.add_argument("--cpus-per-source", type=float, default=1.0, metavar="N",
                   help="CPUs Ray reserves for each source's actor (default 1)")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("remember", help="tell memory the notes of a JSON-lines file (time, kind V|C, text)")
    common(p)
    p.add_argument("file", help='one note a line: {"time": ISO-8601, "kind": "V" or "C", "text": "…"}')
    p.set_defaults(func=cmd_remember)

    p = sub.add_parser("search", help="search memory from the shell")
    common(p)
    p.add_argument("query")
    p.add_argument("--level", default="traces", choices=["traces", "observations", "entities", "schemas", "facts"])
    p.add_argument("--mode", default="hybrid", choices=["hybrid", "vector", "fts"])
    p.add_argument("--limit", type=int, default=10)
    p.set_defaults(func=cmd_search)

    p = sub.add_parser("ask", help="answer a question from memory with the QA agent (needs `qa:` in the manifest)")
    common(p)
    p.add_argument("question")
    p.add_argument("--rounds", type=int, help="tool-calling rounds (default: qa.max_rounds)")
    p.add_argument("--camera", help="only this camera id")
    p.add_argument("--until", type=float, help="only memories up to this media second")
    p.add_argument("--json", action="store_true", help="print the full result as JSON")
    p.set_defaults(func=cmd_ask)

    from plugin.evals import add_eval_parsers

    p = sub.add_parser("eval", help="evaluation commands (re-identification, speech, rules, QA, objects)")
    add_eval_parsers(p.add_subparsers(dest="eval_command", required=True))
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``reflectworld`` console script."""
    global _verbosity
    # OpenCV 5 logs a harmless "Targets are not supported" warning straight to stderr when the SFace
    # model loads; keep its own log to errors unless the user asked for more.
    os.environ.setdefault("OPENCV_LOG_LEVEL", "ERROR")
    # onnxruntime's Linux wheels send usage events to a Microsoft host (a DNS lookup even offline)
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    args = build_parser().parse_args(argv)
    _verbosity = int(getattr(args, "verbose", 0) or 0)
    if _verbosity > 1:
        os.environ["OPENCV_LOG_LEVEL"] = "INFO"
    try:
        return int(args.func(args))
    except ManifestError as exc:
        sys.stderr.write(f"{exc}\n")
        return 2
    except (PluginError, FileNotFoundError) as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 1
    except Exception as exc:  # the CLI's top level: show a one-line reason, keep the traceback in the log
        from memory.errors import MemoryStoreError
        from perception.errors import MediaError

        if isinstance(exc, MemoryStoreError | MediaError):
            sys.stderr.write(f"error: {exc}\n")
            return 1
        logger.exception("reflectworld %s failed", args.command)
        return 1


if __name__ == "__main__":
    sys.exit(main())
