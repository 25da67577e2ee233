"""Ingest cost on real media: CPU seconds per media second, cameras per 2-core box, static ratio.

The clip (:func:`bench.media.real_720p`, ~91 s of 1280×720 H.264 + AAC built from ``tests/data``)
has faces, cuts, speech and captions; the static clip is a still photograph with sensor noise and
silent audio. Each is ingested through the engine ``reflectworld ingest`` builds for the default
manifest (real MiniLM embedder, every model of the level), in both modes, after a warm-up ingest
that loads the models. Cost is CPU time (user + sys of the whole process, every thread), which
stays stable on a busy machine where wall time does not; ``cameras_per_2_cores`` is
``2 / cpu_s_per_media_s`` (real-time cameras one 2-core box sustains).

Usage::

    .venv/bin/python bench/ingest_throughput.py [--clips DIR] [--levels light full]
        [--modes offline_quality live_latency] [--paths file live] [--static-minutes 10]

``--paths live`` runs the capture path instead (gateway → live driver, as ``reflectworld run``): the
clip once, and the static clip looped for ``--static-minutes`` (a still camera decodes key frames
only after 10 s still and silent, so its steady state needs minutes).

The long-stream bench (RSS, store size, versions over hours) is ``bench/long_stream.py``.
Prints one JSON object. Nothing here is part of the test run.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from media import real_720p, static_720p  # noqa: E402

from plugin.engine import Engine  # noqa: E402
from plugin.manifest import Manifest  # noqa: E402


def cpu_s() -> float:
    """User + system CPU seconds of this process so far (all threads)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def clips(folder: Path) -> tuple[Path, float, Path, float]:
    """The real and static bench clips in ``folder`` (built once, then reused)."""
    folder.mkdir(parents=True, exist_ok=True)
    real, static = folder / "real720.mp4", folder / "static720.mp4"
    if not real.exists():
        real_720p(real)
    if not static.exists():
        static_720p(static, 60.0)
    from perception.media.video import probe
    return real, probe(real).duration_s, static, probe(static).duration_s


def engine(store: str, level: str, mode: str) -> Engine:
    """The engine ``reflectworld ingest`` builds for the default manifest at ``level`` and ``mode``."""
    manifest = Manifest.model_validate({"memory": {"uri": store}, "perception": {"level": level, "mode": mode}})
    return Engine.from_manifest(manifest)


WARM = Path(__file__).resolve().parents[1] / "tests" / "data" / "short_hamilton_clip.mp4"


def cost(clip: Path, seconds: float, level: str, mode: str) -> dict[str, object]:
    """CPU seconds per media second of ingesting ``clip`` (models loaded beforehand)."""
    with tempfile.TemporaryDirectory() as tmp, engine(tmp, level, mode) as eng:
        eng.ingest_file(WARM, camera_id="warm")
        before = cpu_s()
        report = eng.ingest_file(clip, camera_id="bench")
        used = cpu_s() - before
    per_s = used / seconds
    return {"clip": clip.stem, "level": level, "mode": mode, "media_s": round(seconds, 1),
            "segments": report.segments_written, "cpu_s": round(used, 2), "cpu_s_per_media_s": round(per_s, 4),
            "cameras_per_2_cores": round(2 / per_s, 1) if per_s > 0 else None}


def live_cost(clip: Path, length_s: float, seconds: float, level: str, mode: str) -> dict[str, object]:
    """CPU seconds per media second of ``seconds`` of ``clip`` in a loop through the live capture path.

    The capture path of ``reflectworld run``: a gateway that drops to key-frame decoding after a still,
    silent stretch (``KEYFRAMES_AFTER_S``), the live driver, the engine's pipeline.
    """
    from long_stream import LoopedFile

    from perception.drivers.ingest import ingest_live
    from perception.media.gateway import KEYFRAMES_AFTER_S, Gateway

    with tempfile.TemporaryDirectory() as tmp, engine(tmp, level, mode) as eng:
        eng.ingest_file(WARM, camera_id="warm")
        before = cpu_s()
        gateway = Gateway(LoopedFile(clip, length_s, seconds), eng.settings.sample_fps,
                          keyframes_after_s=KEYFRAMES_AFTER_S).start()
        written = ingest_live(gateway, eng.pipeline, "bench", final=True)
        gateway.stop()
        used = cpu_s() - before
    per_s = used / seconds
    return {"clip": clip.stem, "path": "live", "level": level, "mode": mode, "media_s": seconds, "segments": written,
            "cpu_s": round(used, 2), "cpu_s_per_media_s": round(per_s, 4),
            "cameras_per_2_cores": round(2 / per_s, 1) if per_s > 0 else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clips", type=Path, default=Path(tempfile.gettempdir()) / "reflectworld-bench",
                        help="folder for the generated clips (kept between runs)")
    parser.add_argument("--levels", nargs="+", default=["light", "full"])
    parser.add_argument("--modes", nargs="+", default=["offline_quality", "live_latency"])
    parser.add_argument("--paths", nargs="+", default=["file", "live"],
                        help="file: reflectworld ingest; live: the capture path (static clip looped for --static-minutes)")
    parser.add_argument("--static-minutes", type=float, default=10.0)
    args = parser.parse_args()
    real, real_s, static, static_s = clips(args.clips)
    rows = []
    for level in args.levels:
        for mode in args.modes:
            if "file" in args.paths:
                active = cost(real, real_s, level, mode)
                still = cost(static, static_s, level, mode)
                still["static_over_active"] = round(float(still["cpu_s_per_media_s"]) / float(active["cpu_s_per_media_s"]), 3)  # type: ignore[arg-type]
                rows += [active, still]
            if "live" in args.paths:
                active = live_cost(real, real_s, real_s, level, mode)
                still = live_cost(static, static_s, args.static_minutes * 60, level, mode)
                still["static_over_active"] = round(float(still["cpu_s_per_media_s"]) / float(active["cpu_s_per_media_s"]), 3)  # type: ignore[arg-type]
                rows += [active, still]
    print(json.dumps({"cost": rows}, indent=2))  # noqa: T201 (a bench script's output)


if __name__ == "__main__":
    main()
