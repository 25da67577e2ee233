"""Record what ``memory_search`` returns for a fixed set of questions, and compare two such records.

A change meant to make search cheaper must not change its answers. Run this on a store with the old
code and with the new one, then compare::

    python bench/search_compare.py --store /tmp/rw-bench/store_1000000 --out old.jsonl   # old checkout
    python bench/search_compare.py --store /tmp/rw-bench/store_1000000 --out new.jsonl --against old.jsonl

Questions are the latency benchmark's (``bench/search_latency.py``, their own seed), asked through the
in-memory MCP client as hosts ask them: hybrid pages 1 and 2, vector and full-text modes, every level,
and a camera filter. Each record holds the structured result and the text summary; ``--against``
prints the first differences and exits non-zero when any record differs.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from search_latency import USER, queries  # noqa: E402


def calls(n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` questions, each asked in one of several ways."""
    qs = queries(n, seed)
    out: list[dict[str, Any]] = []
    for i, q in enumerate(qs):
        args: dict[str, Any] = {"query": q, "limit": 10}
        kind = i % 10
        if kind == 1:
            args["offset"] = 10
        elif kind == 2:
            args["mode"] = "vector"
        elif kind == 3:
            args["mode"] = "fts"
        elif kind == 4:
            args["level"] = "observations"
        elif kind == 5:
            args["camera"] = f"cam{i % 8}"
        elif kind == 6:
            args["limit"] = 3
        out.append(args)
    return out


def record(store: Path, n: int, seed: int) -> list[dict[str, Any]]:
    """What ``memory_search`` returns for each of the calls."""
    from mcp import Client

    from plugin.manifest import Manifest
    from plugin.server import create_server

    manifest = Manifest.model_validate({"user_id": USER, "memory": {"uri": str(store), "embedder": {"type": "minilm"}},
                                        "perception": {"level": "light"}, "semantic": {"enabled": False}})

    async def run() -> list[dict[str, Any]]:
        rows = []
        async with Client(create_server(manifest)) as client:
            for args in calls(n, seed):
                result = await client.call_tool("memory_search", args)
                rows.append({"args": args, "error": result.is_error, "structured": result.structured_content,
                             "text": [getattr(c, "text", None) for c in result.content]})
        return rows

    return anyio.run(run)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", type=Path, required=True, help="a store built by bench/search_latency.py")
    parser.add_argument("--out", type=Path, required=True, help="where the records go (JSON lines)")
    parser.add_argument("--against", type=Path, help="records of the other code to compare with")
    parser.add_argument("--queries", type=int, default=400)
    parser.add_argument("--seed", type=int, default=101)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    rows = record(args.store, args.queries, args.seed)
    args.out.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    hits = sum(len((r["structured"] or {}).get("hits", [])) for r in rows)
    sys.stderr.write(f"{len(rows)} calls, {hits} hits recorded in {args.out}\n")
    if args.against is None:
        return 0
    old = [json.loads(line) for line in args.against.read_text().splitlines()]
    if len(old) != len(rows):
        sys.stderr.write(f"{args.against} holds {len(old)} records, this run {len(rows)}\n")
        return 1
    differ = [(a, b) for a, b in zip(old, rows) if a != b]
    for a, b in differ[:5]:
        sys.stderr.write(f"differs for {b['args']}:\n  old {json.dumps(a)[:600]}\n  new {json.dumps(b)[:600]}\n")
    sys.stderr.write(f"{len(rows) - len(differ)} of {len(rows)} calls identical ({hits} hits)\n")
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
