"""The ``reflectworld`` command line.

``serve`` speaks MCP (stdio by default, streamable HTTP with ``--http``); ``ingest`` files a
video into memory with progress on stderr and resumes after an interrupt; ``demo`` ingests the
packaged sample clip and prints what memory now holds; ``validate`` checks a manifest;
``search`` queries memory from the shell. Logging is configured here and only here, always on
stderr: under ``serve`` stdout is the MCP wire. The other commands print their results on stdout.
"""

from __future__ import annotations

import argparse
import os
import logging
import signal
import sys
import threading
import time
from importlib.resources import files
from pathlib import Path
from types import FrameType
from typing import Any

import anyio

from plugin.errors import ManifestError, PluginError

__all__ = ["main"]

logger = logging.getLogger("reflectworld")

DEMO_CLIP = "short_hamilton_clip.mp4"
#: seconds `ingest` waits for the semantic runner to finish its queue before exiting
SEMANTIC_DRAIN_S = 120.0
#: seconds `ingest` waits for queued webhook/OpenClaw/ntfy deliveries before exiting
NOTIFY_DRAIN_S = 60.0


def _out(text: str = "") -> None:
    """Write a line of command output (not used by ``serve``, whose stdout is the MCP wire)."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True
    )
    for noisy in ("httpx", "httpx2", "mcp.server.lowlevel.server", "uvicorn.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


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
    from plugin.http import parse_bind, serve_http
    from plugin.server import create_server

    manifest = _manifest(args)
    _setup_logging(manifest.log_level)
    server = create_server(manifest)
    if args.http is None:
        logger.info("serving MCP over stdio")
        server.run()
        return 0
    cfg = manifest.server.http
    host, port = parse_bind(args.http, cfg.port) if args.http else (cfg.host, cfg.port)
    token = cfg.token.get_secret_value() if cfg.token else None
    anyio.run(serve_http, server, host, port, token or None)
    return 0


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


def _progress(name: str) -> Any:
    started = time.monotonic()

    def report(done_s: float, total_s: float, segments: int) -> None:
        pct = 100.0 * done_s / total_s if total_s else 0.0
        rate = done_s / max(time.monotonic() - started, 1e-6)
        logger.info("ingest %s: %.1f/%.1f s (%.0f%%), %d segment(s), %.1fx real time",
                    name, done_s, total_s, pct, segments, rate)

    return report


def _ingest(path: Path, manifest: Any, camera: str | None) -> Any:
    from perception import ingest_file
    from perception.context import PerceptionRuntime
    from perception.scheduler import Scheduler
    from plugin.notify import NotificationService, chain_commits
    from plugin.semantic import runner_from_manifest
    from plugin.server import build_vlm_stage, ingest_settings, open_store, rule_texts

    store = open_store(manifest)
    semantic = runner_from_manifest(manifest, lambda: open_store(manifest))
    if semantic is not None:
        semantic.start()
    notifications = NotificationService.for_manifest(store, manifest)  # rules → notifications
    on_commit = chain_commits(semantic.on_commit if semantic else None, notifications.on_commit)
    runtime = PerceptionRuntime(scheduler=Scheduler(manifest.perception.mode, manifest.perception.level))
    vlm_stage = build_vlm_stage(manifest, runtime)
    try:
        with _Interrupt() as stop:
            report = ingest_file(path, store, ingest_settings(manifest), camera_id=camera,
                                 progress=_progress(path.name), on_commit=on_commit, stop=stop,
                                 vlm_stage=vlm_stage, active_rules=rule_texts(notifications),
                                 scheduler=runtime.scheduler)
        if semantic is not None and report.done:
            semantic.source_done(report.source, report.camera_id)
        return store, report
    except BaseException:
        store.close()
        raise
    finally:
        if semantic is not None:
            semantic.stop(timeout=SEMANTIC_DRAIN_S)  # finish consolidation/chapters before exiting
        notifications.close(drain_s=NOTIFY_DRAIN_S)  # deliver queued webhooks before exiting
        if runtime.vlm is not None:
            runtime.vlm.close()


def cmd_ingest(args: argparse.Namespace) -> int:
    manifest = _manifest(args)
    _setup_logging(manifest.log_level)
    path = Path(args.path).expanduser()
    store, report = _ingest(path, manifest, args.camera)
    store.close()
    status = "interrupted — run the same command again to resume" if report.interrupted else "complete"
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
    store, report = _ingest(clip, manifest, "stage")
    try:
        if report.interrupted:
            _out("interrupted — run `reflectworld demo` again to resume")
            return 130
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
        store.close()
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    from plugin.server import open_store

    manifest = _manifest(args)
    _setup_logging("WARNING")
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
    from plugin.ask import MemoryAgent, build_client
    from plugin.server import open_store

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


def cmd_run(args: argparse.Namespace) -> int:
    """Headless: ingest the manifest's sources (plus --source) with no MCP host until done or Ctrl-C."""
    from plugin.manifest import SourceConfig
    from plugin.server import ingest_settings, open_store
    from plugin.worker import Worker

    manifest = _manifest(args)
    _setup_logging(manifest.log_level)
    sources = list(manifest.sources) + [SourceConfig(uri=uri) for uri in args.source or []]
    if not sources:
        raise PluginError("nothing to run: add `sources:` to the manifest or pass --source URI")
    store = open_store(manifest)
    worker = Worker(store, ingest_settings(manifest), mode=manifest.perception.mode)
    try:
        with _Interrupt() as stop:
            errors = worker.start_sources(sources)
            for error in errors:
                sys.stderr.write(f"error: {error}\n")
            while not stop.wait(0.5) and not worker.idle():
                pass
    finally:
        worker.stop()
        store.close()
    failed = 0
    for info in worker.status():
        failed += info.state == "failed"
        _out(f"{info.camera_id}: {info.state}, {info.segments_written} segment(s) written from {info.source}"
             + (f" — {info.error}" if info.error else ""))
    return 1 if failed or errors else 0


# ---------------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``reflectworld``."""
    parser = argparse.ArgumentParser(prog="reflectworld", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--manifest", "-m", help="YAML/TOML manifest (default: embedded store, local models)")
        p.add_argument("--store", help="LanceDB URI overriding memory.uri")

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
    p.set_defaults(func=cmd_run)

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

    p = sub.add_parser("eval", help="evaluation commands (re-identification, speech, rules, QA)")
    add_eval_parsers(p.add_subparsers(dest="eval_command", required=True))
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``reflectworld`` console script."""
    # OpenCV 5 logs a harmless "Targets are not supported" warning straight to stderr when the SFace
    # model loads; keep its own log to errors unless the user asked for more.
    os.environ.setdefault("OPENCV_LOG_LEVEL", "ERROR")
    args = build_parser().parse_args(argv)
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
