"""Search latency at scale: ``MemoryStore.search`` and ``memory_search`` through MCP, p50/p95/p99.

Usage::

    python bench/search_latency.py --sizes 1000000 --dir /tmp/rw-bench --queries 200
    python bench/search_latency.py --sizes 10000,100000           # temp dirs, smaller

For each size a store of that many traces is built once in ``--dir`` (reused by later runs when its
row count matches) and its indexes are brought up to date by the store's own index maintainer
(``MemoryStore.maintain_indexes``: FTS fold-in, IVF_PQ built past the size threshold, scalar indexes,
compaction of small fragments). Trace texts
are sentences of people, places, actions, objects, read text and speech from fixed word lists; their
vectors live in the real MiniLM space — every component phrase is embedded once with MiniLM and a
trace's vector is the normalised weighted sum of its components' vectors plus noise — so the queries,
embedded by the real MiniLM at query time, land where real queries would. Queries are new
combinations of the same words, phrased as questions ("what did Maya say about the garden").

Measured paths (each over ``--queries`` distinct queries of its own, after 5 warm-ups):

* ``store`` — ``MemoryStore.search(query, mode=…)`` in process, for ``vector``, ``fts`` and ``hybrid``;
* ``mcp`` — ``memory_search`` called through the in-memory MCP ``Client(create_server(manifest))``:
  argument validation, query understanding, embedding, both searches, fusion, explanations and the
  structured result, i.e. what a host pays per call.

Writes a markdown table to stdout (with CPU ms per query, all threads, and the load average: on a
shared machine other processes' load shows in the wall-clock percentiles, and less in the CPU column);
progress goes to stderr through logging. On a busy machine, also run it pinned to one core
(``taskset -c 1 python bench/search_latency.py …``): threads handing work to each other across cores
cost CPU of their own, which pinning removes.

Measured on the 2-core development machine (see README, "Latency", for the numbers and the load
they were taken at): one hybrid search at the store costs ≈ 17 ms of CPU — embedding the question
≈ 3.4 (while the full-text query runs) and ranking ≈ 1.5 on the search's own thread, LanceDB's tokio
runtime ≈ 5.5, its CPU pool ≈ 3 (full-text scoring), lancedb's asyncio loop ≈ 1.6. Through MCP the
server's loop and the in-process client add ≈ 1.6. The p95 ≤ 20 ms target is not shown while other
processes keep a core busy. ``bench/search_compare.py`` checks that a change leaves the answers as
they were.
Stores built by older code are migrated when opened (search cards, ``memory/search/cards.py``): keep the
store an older checkout benchmarks in another ``--dir``.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

import anyio
import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memory import MemoryStore, MiniLMEmbedder  # noqa: E402
from memory.search.cards import CARD_COLUMN  # noqa: E402
from memory.embedders import l2_normalise  # noqa: E402

logger = logging.getLogger("bench.search_latency")

CHUNK = 50_000
USER = "bench"

FIRST = ("Maya Liam Noah Emma Olivia Ava Sophia Lucas Mason Ethan Amelia Harper Elijah James Aria Mila Leo Ivy Omar "
         "Zara Hugo Nina Felix Clara Jonas Lena Mateo Sara Yusuf Hana Ravi Priya Tomas Eva Diego Lucia Kenji Aiko "
         "Pavel Irina").split()
LAST = ("Garcia Chen Novak Ito Silva Kowalski Haddad Okafor Larsen Rossi Dubois Meyer Tanaka Costa Ali Petrov "
        "Nguyen Schmidt Moreau Jensen").split()
PLACES = ("kitchen porch garage hallway living room backyard garden driveway office stairs front door bedroom "
          "balcony workshop classroom stage lobby parking lot shop counter playground").split(" ")
ACTIONS = ("opens the fridge|carries a box|rides a bicycle|waters the plants|reads a book|talks on the phone|"
           "walks the dog|feeds the cat|cooks dinner|washes the dishes|plays the piano|sings into a microphone|"
           "unlocks the door|parks the car|paints the fence|repairs a chair|ties their shoes|drinks coffee|"
           "folds laundry|takes out the trash|sweeps the floor|plays football|delivers a parcel|checks the mailbox|"
           "sets the table|charges a laptop|locks the gate|waves goodbye|hugs a friend|eats breakfast").split("|")
OBJECTS = ("bicycle chair table laptop mug coffee cup bottle book dog cat car box camera desk monitor footwear "
           "boot backpack umbrella suitcase plant lamp guitar ball helmet").split()
SIGNS = ("EXIT|OPEN|NO PARKING|SALE 50%|PLATFORM 3|KEEP OUT|WELCOME|PUSH|STOP|FRAGILE|SCHOOL ZONE|CAFE|"
         "FIRE DOOR|WET FLOOR|PRIVATE").split("|")
TOPICS = ("the weather tomorrow|dinner plans|a broken heater|the football match|a job interview|the garden tomatoes|"
          "a missing parcel|the school trip|a birthday party|the electricity bill|a new puppy|the car repair|"
          "holiday flights|a noisy neighbour|the piano lesson|the recycling schedule|a leaking tap|the wifi password|"
          "a doctor's appointment|the book club|moving house|a lost key|the train strike|a wedding invitation|"
          "the bakery downstairs|a power cut|the marathon|a science project|the new sofa|a concert ticket").split("|")
VERBS = ("asks about|complains about|jokes about|explains|worries about|talks about|reminds everyone about|"
         "argues about|laughs about|announces").split("|")


def _phrases() -> dict[str, list[str]]:
    people = [f"{f} {ln}" for f in FIRST for ln in LAST[:5]]
    return {
        "people": people,
        "scene": [f"in the {p}, someone {a}" for p in PLACES for a in ACTIONS],
        "objects": [f"objects: {a}, {b}" for a in OBJECTS for b in OBJECTS if a < b],
        "speech": [f'{v} {t}' for v in VERBS for t in TOPICS],
    }


def _embed_all(embedder: MiniLMEmbedder, phrases: dict[str, list[str]]) -> dict[str, np.ndarray]:
    t0 = time.perf_counter()
    out = {k: embedder.embed(v) for k, v in phrases.items()}
    logger.info("embedded %d component phrases in %.1f s", sum(len(v) for v in phrases.values()),
                time.perf_counter() - t0)
    return out


def build(store: MemoryStore, size: int, seed: int) -> None:
    """Append ``size`` traces whose vectors are MiniLM-space mixtures of their component phrases."""
    rng = np.random.default_rng(seed)
    phrases = _phrases()
    vectors = _embed_all(MiniLMEmbedder(), phrases)
    # the store fills in each row's search card (``memory/search/cards.py``) from the other columns
    schema = pa.schema([f for f in store._table("traces").schema if f.name != CARD_COLUMN])
    for start in range(0, size, CHUNK):
        n = min(CHUNK, size - start)
        pick = {k: rng.integers(0, len(v), n) for k, v in phrases.items()}
        sign = rng.integers(0, len(SIGNS), n)
        has_sign = rng.random(n) < 0.2
        mix = (0.30 * vectors["people"][pick["people"]] + 0.35 * vectors["scene"][pick["scene"]]
               + 0.15 * vectors["objects"][pick["objects"]] + 0.35 * vectors["speech"][pick["speech"]]
               + 0.03 * rng.standard_normal((n, 384)).astype(np.float32))
        vec = l2_normalise(mix)
        idx = np.arange(start, start + n)
        texts, summaries, transcripts, ocr = [], [], [], []
        for j in range(n):
            person = phrases["people"][pick["people"][j]]
            scene = phrases["scene"][pick["scene"][j]].replace("someone", person)
            said = f"{person.split()[0]} {phrases['speech'][pick['speech'][j]]}"
            read = SIGNS[sign[j]] if has_sign[j] else ""
            summary = f"One person ({person}) {scene.split(', ', 1)[1]} {scene.split(',')[0]}."
            summaries.append(summary)
            transcripts.append(said)
            ocr.append(read)
            texts.append("\n".join(p for p in (summary, f'Speech: "{said}"', f"Text read: {read}" if read else "",
                                               phrases["objects"][pick["objects"][j]]) if p))
        objects = [phrases["objects"][i].removeprefix("objects: ").split(", ") for i in pick["objects"]]
        columns = {
            "user_id": [USER] * n, "id": [f"trc_{i:012x}" for i in idx], "camera_id": [f"cam{i % 8}" for i in idx],
            "source": [f"/bench/day{i // 8640:04d}.mp4" for i in idx], "segment_index": idx.tolist(),
            "t_start": [float(i % 8640) * 10.0 for i in idx], "t_end": [float(i % 8640) * 10.0 + 10 for i in idx],
            "wall_start": [1.7e9 + float(i) * 10.0 for i in idx], "summary": summaries,
            "entity_ids": [[f"person_{int(p) + 1:04d}"] for p in pick["people"]], "objects": objects,
            "ocr_text": ocr, "transcript": transcripts, "quotes": [[] for _ in idx],
            "keyframe_ids": [[] for _ in idx], "speakers": [[] for _ in idx], "level": ["full"] * n, "text": texts,
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(vec.reshape(-1)), 384),
        }
        store.bulk_append("traces", pa.table(columns, schema=schema))
        logger.info("appended %d / %d traces", start + n, size)


def queries(n: int, seed: int) -> list[str]:
    """Distinct questions combining the benchmark's words in new ways."""
    rng = random.Random(seed + 1)
    forms = [
        lambda: f"what did {rng.choice(FIRST)} say about {rng.choice(TOPICS)}",
        lambda: f"someone {rng.choice(ACTIONS)} in the {rng.choice(PLACES)}",
        lambda: f"{rng.choice(FIRST)} {rng.choice(LAST)} with a {rng.choice(OBJECTS)}",
        lambda: f"sign saying {rng.choice(SIGNS).lower()}",
        lambda: f"conversation about {rng.choice(TOPICS)}",
        lambda: f"{rng.choice(OBJECTS)} near the {rng.choice(PLACES)}",
    ]
    out: list[str] = []
    while len(out) < n:
        q = rng.choice(forms)()
        if q not in out:
            out.append(q)
    return out


def percentiles(times: list[float]) -> tuple[float, float, float]:
    """p50, p95, p99 of ``times`` (ms)."""
    arr = np.asarray(times)
    return float(np.percentile(arr, 50)), float(np.percentile(arr, 95)), float(np.percentile(arr, 99))


def open_bench_store(path: Path, size: int, seed: int) -> MemoryStore:
    """Open (building when missing or of another size) the benchmark store at ``path``."""
    store = MemoryStore(str(path), MiniLMEmbedder(), user_id=USER).open()
    have = store.count_traces()
    if have != size:
        if have:
            raise SystemExit(f"{path} holds {have} traces, not {size}; pass another --dir or delete it")
        t0 = time.perf_counter()
        build(store, size, seed)
        logger.info("size %d: wrote traces in %.1f s", size, time.perf_counter() - t0)
    t0 = time.perf_counter()
    states = store.maintain_indexes(force=True)
    logger.info("size %d: indexes up to date in %.1f s: %s", size, time.perf_counter() - t0, states["traces"])
    return store


def cpu_seconds() -> float:
    """CPU time of this process so far (all threads, user + system)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure_store(store: MemoryStore, qs: list[str], mode: str) -> tuple[list[float], float]:
    """Latencies (ms) of ``store.search`` over ``qs``, and CPU ms per query."""
    for q in qs[:5]:
        store.search(q, mode=mode, limit=10)
    times = []
    c0 = cpu_seconds()
    for q in qs:
        t0 = time.perf_counter()
        store.search(q, mode=mode, limit=10)
        times.append((time.perf_counter() - t0) * 1000)
    return times, (cpu_seconds() - c0) * 1000 / len(qs)


def measure_mcp(path: Path, qs: list[str]) -> tuple[list[float], float]:
    """Latencies (ms) of ``memory_search`` through the in-memory MCP client, and CPU ms per query."""
    from mcp import Client

    from plugin.manifest import Manifest
    from plugin.server import create_server

    manifest = Manifest.model_validate({"user_id": USER, "memory": {"uri": str(path), "embedder": {"type": "minilm"}},
                                        "perception": {"level": "light"}, "semantic": {"enabled": False}})

    async def run() -> tuple[list[float], float]:
        times = []
        async with Client(create_server(manifest)) as client:
            for q in qs[:5]:
                await client.call_tool("memory_search", {"query": q, "limit": 10})
            c0 = cpu_seconds()
            for q in qs:
                t0 = time.perf_counter()
                result = await client.call_tool("memory_search", {"query": q, "limit": 10})
                times.append((time.perf_counter() - t0) * 1000)
                if result.is_error:
                    raise SystemExit(f"memory_search failed for {q!r}: {result.content}")
            cpu = (cpu_seconds() - c0) * 1000 / len(qs)
        return times, cpu

    return anyio.run(run)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000000", help="comma-separated trace counts")
    parser.add_argument("--queries", type=int, default=200, help="timed queries per path")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--dir", type=Path, default=None, help="where stores are built and reused (default: temp)")
    parser.add_argument("--modes", default="vector,fts,hybrid", help="store-level modes to time")
    parser.add_argument("--no-mcp", action="store_true", help="skip the MCP path")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(message)s")
    sizes = [int(s) for s in args.sizes.split(",") if s]
    # every measured path gets questions of its own, so none is answered from another's caches
    modes = [m for m in args.modes.split(",") if m]
    pool = queries(args.queries * (len(modes) + 1), args.seed)
    sets = {name: pool[n * args.queries:(n + 1) * args.queries] for n, name in enumerate([*modes, "mcp"])}
    lines = ["| traces | path | mode | p50 ms | p95 ms | p99 ms | CPU ms/query |", "|---:|---|---|---:|---:|---:|---:|"]
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="rw-bench-") as tmp:
        root = args.dir or Path(tmp)
        for size in sizes:
            path = root / f"store_{size}"
            store = open_bench_store(path, size, args.seed)
            try:
                for mode in modes:
                    times, cpu = measure_store(store, sets[mode], mode)
                    p = percentiles(times)
                    lines.append(f"| {size} | store | {mode} | {p[0]:.1f} | {p[1]:.1f} | {p[2]:.1f} | {cpu:.1f} |")
                    logger.info(lines[-1])
            finally:
                store.close()
            if not args.no_mcp:
                times, cpu = measure_mcp(path, sets["mcp"])
                p = percentiles(times)
                lines.append(f"| {size} | mcp memory_search | hybrid | {p[0]:.1f} | {p[1]:.1f} | {p[2]:.1f} "
                             f"| {cpu:.1f} |")
                logger.info(lines[-1])
    lines.append(f"\nload average (1 min) {load_before:.1f} before, {os.getloadavg()[0]:.1f} after; "
                 f"{os.cpu_count()} CPUs")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
