"""Hours of media through the real live ingest path: is the cost, memory and disk flat?

The real-media bench clip (:func:`bench.media.real_720p`, faces, speech, captions, people walking)
is decoded in a loop as one continuous stream (media time keeps running across loops) and fed
through ``Gateway`` → ``ingest_live`` of the engine ``reflectworld run`` builds for the default
manifest (MiniLM embedder, the store's own maintenance), as fast as it decodes. For each tenth of
the run it prints: segments, median and p90 CPU ms per segment, CPU seconds per media second, RSS
(and its anonymous and file-backed parts), store size on disk and the version count of the biggest tables.

The stream runs about 15-20x faster than real time, but the store's maintenance keeps wall-clock
times (a written table is compacted after 30 s, versions are kept for a minute). Its first pass, which
maps pylance's compaction code (≈ 75 MB of file-backed pages, once), therefore comes after the
10-minute mark here, where a real-time camera reaches it in its first minute; the summary splits the
growth after 10 minutes into heap and file pages for that reason.

Usage::

    .venv/bin/python bench/long_stream.py [--hours 4] [--level light] [--clips DIR]

Prints one JSON line per tenth, then a summary object. Nothing here is part of the test run.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import av

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ingest_throughput import clips  # noqa: E402

from memory.models import SegmentWrite  # noqa: E402
from perception.drivers.ingest import ingest_live  # noqa: E402
from perception.media.gateway import Gateway  # noqa: E402
from perception.media.sources import AudioIn, Source, VideoIn, _demux  # noqa: E402
from plugin.engine import Engine, Overrides  # noqa: E402
from plugin.manifest import Manifest  # noqa: E402

TABLES = ("traces", "keyframes", "observations", "entities", "ingest_log", "gallery_face")


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def memory_mb() -> dict[str, float]:
    """Resident memory of this process: all (``VmRSS``), anonymous (heap, stacks) and file-backed
    (shared library code and mapped files, which the kernel can drop and read again), in MB."""
    fields = {"VmRSS:": "rss", "RssAnon:": "anon", "RssFile:": "file"}
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key = line.split(maxsplit=1)[0] if line else ""
        if key in fields:
            out[fields[key]] = int(line.split()[1]) / 1024
    return out


def dir_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


class LoopedFile(Source):
    """A media file played in a loop as one finite stream of ``seconds`` media seconds."""

    def __init__(self, path: Path, length_s: float, seconds: float) -> None:
        super().__init__(uri="loop://bench", kind="generated", live=False)
        self.path, self.length_s, self.seconds = path, length_s, seconds

    def open_stream(self, stop: threading.Event, start_s: float = 0.0) -> Iterator[VideoIn | AudioIn]:
        offset = 0.0
        while offset < self.seconds and not stop.is_set():
            with av.open(str(self.path)) as container:
                for item in _demux(self, container, stop, 0.0):
                    if item.t is None:
                        continue
                    t = item.t + offset
                    if t >= self.seconds:
                        return
                    yield VideoIn(t, item.frame) if isinstance(item, VideoIn) else AudioIn(t, item.pcm)
            offset += self.length_s


def versions(engine: Engine) -> dict[str, int]:
    store = engine.store
    return {name: len(store._table(name).list_versions()) for name in TABLES}  # noqa: SLF001 (bench)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hours", type=float, default=4.0)
    parser.add_argument("--level", default="light", choices=["light", "full"])
    parser.add_argument("--clips", type=Path, default=Path(tempfile.gettempdir()) / "reflectworld-bench")
    args = parser.parse_args()
    active, _static, _static_s = clips(args.clips)
    real, real_s = active[0]  # the mixed clip
    seconds = args.hours * 3600
    tenth = seconds / 10
    costs: list[tuple[float, float, float]] = []  # (t_end, cpu ms, media s) per segment
    last = {"cpu": 0.0, "t": 0.0}
    rows: list[dict[str, object]] = []

    with tempfile.TemporaryDirectory() as tmp:
        store_dir = Path(tmp) / "store"
        eng_box: list[Engine] = []

        def report(k: int) -> None:
            part = [c for c in costs if k * tenth <= c[0] < (k + 1) * tenth]
            ms = sorted(c[1] for c in part)
            row = {"tenth": k + 1, "media_h": round((k + 1) * tenth / 3600, 2), "segments": len(part),
                   "median_cpu_ms": round(statistics.median(ms), 1) if ms else None,
                   "p90_cpu_ms": round(ms[int(0.9 * (len(ms) - 1))], 1) if ms else None,
                   "cpu_s_per_media_s": round(sum(c[1] for c in part) / 1000 / max(1e-9, sum(c[2] for c in part)), 4),
                   **{f"{k}_mb" if k == "rss" else f"rss_{k}_mb": round(v, 1) for k, v in memory_mb().items()},
                   "store_mb": round(dir_mb(store_dir), 1),
                   "versions": versions(eng_box[0])}
            rows.append(row)
            print(json.dumps(row), flush=True)  # noqa: T201 (a bench script's output)

        def on_commit(write: SegmentWrite) -> None:
            now = cpu_s()
            t_end = write.trace.t_end
            if t_end >= 600 and "rss_10_min" not in last:
                last.update({f"{k}_10_min": v for k, v in memory_mb().items()})
            costs.append((t_end, (now - last["cpu"]) * 1000, t_end - last["t"]))
            last["cpu"], last["t"] = now, t_end
            if t_end >= (len(rows) + 1) * tenth - 1e-6 and len(rows) < 10:
                report(len(rows))

        manifest = Manifest.model_validate({"memory": {"uri": str(store_dir)}, "perception": {"level": args.level}})
        started = time.perf_counter()
        with Engine.from_manifest(manifest, Overrides(on_commit=on_commit)) as eng:
            eng_box.append(eng)
            gateway = Gateway(LoopedFile(real, real_s, seconds), eng.settings.sample_fps).start()
            last["cpu"] = cpu_s()
            written = ingest_live(gateway, eng.pipeline, "bench", final=True)
            gateway.stop()
            if len(rows) < 10:
                report(len(rows))
            status = eng.store.storage_status() if hasattr(eng.store, "storage_status") else None
        wall = time.perf_counter() - started
        first, lastrow = rows[0], rows[-1]
        rss10 = last.get("rss_10_min", float(first["rss_mb"]))  # type: ignore[arg-type]
        summary = {
            "hours": args.hours, "level": args.level, "segments": written, "wall_s": round(wall, 1),
            "last_over_first_median_cost": round(float(lastrow["median_cpu_ms"]) / float(first["median_cpu_ms"]), 3),  # type: ignore[arg-type]
            "rss_at_10_min_mb": round(rss10, 1),
            "rss_growth_after_10_min_mb": round(float(lastrow["rss_mb"]) - rss10, 1),  # type: ignore[arg-type]
            # the same split into heap and file-backed pages, and what the last nine tenths added
            "anon_growth_after_10_min_mb": round(float(lastrow.get("rss_anon_mb", 0.0))  # type: ignore[arg-type]
                                                 - last.get("anon_10_min", 0.0), 1),
            "file_growth_after_10_min_mb": round(float(lastrow.get("rss_file_mb", 0.0))  # type: ignore[arg-type]
                                                 - last.get("file_10_min", 0.0), 1),
            "rss_growth_after_first_tenth_mb": round(float(lastrow["rss_mb"]) - float(first["rss_mb"]), 1),  # type: ignore[arg-type]
            "store_mb_per_camera_hour": round(float(lastrow["store_mb"]) / args.hours, 1),  # type: ignore[arg-type]
            "final_versions": lastrow["versions"], "storage_status": status,
        }
        print(json.dumps(summary, indent=2))  # noqa: T201


if __name__ == "__main__":
    main()
