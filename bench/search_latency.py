"""Search latency of MemoryStore over synthetic traces: p50/p95 per mode, without and with indices.

Usage::

    python bench/search_latency.py --sizes 10000,100000 --queries 50

For each size, a fresh store (in a temporary directory unless ``--dir``) receives that many
traces written straight into the ``traces`` table as Arrow batches (``MemoryStore.bulk_append``).
Texts are drawn from topic clusters of a synthetic vocabulary and embedded with a 384-d
``HashEmbedder``, so vectors are clustered and full-text terms are shared within a cluster.
Queries are a few words of a random cluster.

Phases:

* **no index** — the FTS index created on open is empty, so full-text search scans all rows
  as unindexed fragments; vector search is exact (flat).
* **indexed** — ``optimize()`` folds the rows into the FTS index and an IVF_PQ cosine index is
  built (searches use ``refine_factor=10``).

Writes a markdown table to stdout; progress goes to stderr through logging. LanceDB's Rust side
also logs "KMeans: more than 10% of clusters are empty" to stderr while building PQ codebooks on
these sparse hash vectors; that is expected here.

Measured on the 2-core dev machine (--queries 50, whole run 2 min 41 s, IVF_PQ build 44 s at 100k):
100k traces p50 ms — vector 231 → 31, fts 583 → 21, hybrid 780 → 38 (no index → indexed).
"""

from __future__ import annotations

import argparse
import logging
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memory import HashEmbedder, MemoryStore  # noqa: E402

logger = logging.getLogger("bench.search_latency")

DIM = 384
CHUNK = 10_000


def make_vocabulary(rng: random.Random, n_words: int = 3000) -> list[str]:
    """Pronounceable synthetic words (unique)."""
    consonants, vowels = "bcdfghklmnprstvz", "aeiou"
    words: set[str] = set()
    while len(words) < n_words:
        words.add("".join(rng.choice(consonants) + rng.choice(vowels) for _ in range(rng.randint(2, 4))))
    return sorted(words)


def make_texts(rng: random.Random, vocab: list[str], n: int, n_clusters: int) -> tuple[list[str], list[list[str]]]:
    """``n`` texts: 6 words of one cluster's topic + 4 common words; returns texts and cluster topics."""
    topics = [rng.sample(vocab, 10) for _ in range(n_clusters)]
    common = vocab[:200]
    texts = []
    for _ in range(n):
        topic = topics[rng.randrange(n_clusters)]
        texts.append(" ".join(rng.sample(topic, 6) + rng.sample(common, 4)))
    return texts, topics


def fill(store: MemoryStore, texts: list[str]) -> None:
    """Write ``texts`` as traces in Arrow chunks."""
    schema = store._table("traces").schema
    for start in range(0, len(texts), CHUNK):
        chunk = texts[start:start + CHUNK]
        vectors = store.embedder.embed(chunk)
        n = len(chunk)
        idx = list(range(start, start + n))
        columns = {
            "user_id": [store.user_id] * n,
            "id": [f"trc_{i:012x}" for i in idx],
            "camera_id": [f"cam{i % 4}" for i in idx],
            "source": ["/bench/source.mp4"] * n,
            "segment_index": idx,
            "t_start": [i * 10.0 for i in idx],
            "t_end": [i * 10.0 + 10 for i in idx],
            "wall_start": [1.7e9 + i * 10.0 for i in idx],
            "summary": chunk,
            "entity_ids": [[] for _ in idx],
            "objects": [[] for _ in idx],
            "ocr_text": [""] * n,
            "transcript": [""] * n,
            "quotes": [[] for _ in idx],
            "keyframe_ids": [[] for _ in idx],
            "level": ["light"] * n,
            "text": chunk,
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), DIM),
        }
        store.bulk_append("traces", pa.table(columns, schema=schema))


def measure(store: MemoryStore, queries: list[str], mode: str) -> tuple[float, float]:
    """p50 and p95 latency in ms of ``store.search`` over ``queries`` (2 warm-up queries first)."""
    for q in queries[:2]:
        store.search(q, mode=mode, limit=10)
    times = []
    for q in queries:
        t0 = time.perf_counter()
        store.search(q, mode=mode, limit=10)
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    return statistics.median(times), times[min(len(times) - 1, int(round(0.95 * (len(times) - 1))))]


def run_size(root: Path, size: int, n_queries: int, seed: int) -> list[tuple[str, str, float, float]]:
    """Build one store of ``size`` traces and return ``(mode, phase, p50, p95)`` rows."""
    rng = random.Random(seed)
    vocab = make_vocabulary(rng)
    texts, topics = make_texts(rng, vocab, size, n_clusters=max(10, size // 50))
    queries = [" ".join(rng.sample(topics[rng.randrange(len(topics))], 3)) for _ in range(n_queries)]
    results = []
    with MemoryStore(str(root / f"store_{size}"), HashEmbedder(DIM), user_id="bench") as store:
        t0 = time.perf_counter()
        fill(store, texts)
        logger.info("size %d: wrote traces in %.1f s", size, time.perf_counter() - t0)
        for mode in ("vector", "fts", "hybrid"):
            results.append((mode, "no index", *measure(store, queries, mode)))
        t0 = time.perf_counter()
        store.optimize()
        logger.info("size %d: optimize (FTS fold) %.1f s", size, time.perf_counter() - t0)
        t0 = time.perf_counter()
        store.create_vector_index("traces")
        logger.info("size %d: IVF_PQ build %.1f s", size, time.perf_counter() - t0)
        for mode in ("vector", "fts", "hybrid"):
            results.append((mode, "indexed", *measure(store, queries, mode)))
        store._dirty.clear()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000", help="comma-separated trace counts")
    parser.add_argument("--queries", type=int, default=50, help="timed queries per mode and phase")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--dir", type=Path, default=None, help="where to build the stores (default: a temp dir)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(message)s")
    sizes = [int(s) for s in args.sizes.split(",") if s]
    lines = ["| traces | mode | index | p50 ms | p95 ms |", "|---:|---|---|---:|---:|"]
    with tempfile.TemporaryDirectory(prefix="rw-bench-") as tmp:
        root = args.dir or Path(tmp)
        for size in sizes:
            for mode, phase, p50, p95 in run_size(root, size, args.queries, args.seed):
                lines.append(f"| {size} | {mode} | {phase} | {p50:.1f} | {p95:.1f} |")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
