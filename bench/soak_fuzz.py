"""Soak: thousands of hostile tool calls through the real MCP client; counts crashes, hangs and leaks.

Usage::

    python bench/soak_fuzz.py --calls 10000 [--seed 1] [--timeout 10] [--json]

A server is built from a manifest on a fresh store (hash embedder, a small populated memory, tool
access limited to the temporary directory, no LAN/public/loopback streams, no devices) and driven
through the in-memory MCP client. Calls are spread over every tool; each tool's arguments are
drawn from its own input schema by ``tests/fuzz.py`` (well-formed values at and around their
bounds, hostile strings, wrong types, missing and unknown keys). Each answer is audited:

* crash — an unexpected exception logged by the server, or the SDK's bare "Error executing tool X";
* hang — no answer within ``--timeout`` seconds (long polls are capped at 0.2 s first);
* leak — a traceback, Rust/LanceDB/Arrow/DataFusion detail, site-packages, or an absolute path
  outside the allowed roots that the caller did not supply, in an error answer.

Prints one summary line (or JSON with ``--json``) and up to 20 findings; exits 1 when anything was
found. Server logs go to stderr at WARNING.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout: tests/ holds the fuzzer

import yaml  # noqa: E402
from anyio.from_thread import start_blocking_portal  # noqa: E402
from hypothesis import HealthCheck, given, seed, settings  # noqa: E402
from mcp import Client  # noqa: E402

from memory import HashEmbedder, MemoryStore  # noqa: E402
from plugin.manifest import load_manifest  # noqa: E402
from plugin.server import create_server  # noqa: E402
from tests.fuzz import Auditor, arguments_for  # noqa: E402
from tests.memory.memory_fixtures import populate  # noqa: E402

logger = logging.getLogger("soak_fuzz")


def _manifest(root: Path) -> Path:
    path = root / "manifest.yaml"
    path.write_text(yaml.safe_dump({
        "user_id": "soak", "log_level": "WARNING",
        "memory": {"uri": str(root / "lancedb"), "embedder": {"type": "hash", "dim": 64}},
        "perception": {"level": "light"}, "semantic": {"enabled": False},
        "access": {"roots": [str(root)], "lan": False, "public": False, "devices": False},
    }))
    with MemoryStore(str(root / "lancedb"), HashEmbedder(64), user_id="soak") as store:
        populate(store)
    return path


def run(calls: int, base_seed: int, timeout_s: float) -> tuple[dict[str, Any], list[Any]]:
    """Fuzz ``calls`` calls spread over every tool; returns the summary and the findings."""
    with tempfile.TemporaryDirectory(prefix="soak-fuzz-") as tmp:
        root = Path(tmp).resolve()
        os.environ["REFLECTWORLD_DATA_DIR"] = str(root / "data")
        server = create_server(load_manifest(_manifest(root)))
        started = time.monotonic()
        with start_blocking_portal() as portal, portal.wrap_async_context_manager(Client(server)) as client:
            tools = portal.call(client.list_tools).tools
            auditor = Auditor(client, roots=(str(root),), call_timeout_s=timeout_s)
            per_tool = max(1, calls // len(tools))
            try:
                for i, tool in enumerate(tools):
                    n = per_tool + (1 if i < calls - per_tool * len(tools) else 0)

                    @seed(base_seed + i)
                    @settings(max_examples=n, deadline=None, database=None,
                              suppress_health_check=list(HealthCheck))
                    @given(args=arguments_for(tool))
                    def fuzz(args: dict[str, Any]) -> None:
                        portal.call(auditor.call, tool.name, args)

                    fuzz()
                    logger.info("%s: %d calls so far, %s", tool.name, auditor.calls, auditor.summary())
            finally:
                auditor.close()
            summary = {**auditor.summary(), "tools": len(tools), "seconds": round(time.monotonic() - started, 1),
                       "slowest_call_s": round(auditor.slowest_s, 2),
                       "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
            return summary, auditor.findings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds before a call counts as a hang")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logger.setLevel(logging.INFO)
    summary, findings = run(args.calls, args.seed, args.timeout)
    if args.json:
        sys.stdout.write(json.dumps({**summary, "findings": [f.__dict__ for f in findings[:20]]}, default=str) + "\n")
    else:
        sys.stdout.write(" ".join(f"{k}={v}" for k, v in summary.items()) + "\n")
        for f in findings[:20]:
            sys.stdout.write(f"{f.kind} {f.tool} {json.dumps(f.args, default=str)[:200]}: {f.detail}\n")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
