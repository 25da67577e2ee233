"""Ingest cost on real media: CPU seconds per media second, cameras per 2-core box, static ratio.

The mixed clip (:func:`bench.media.real_720p`, ~91 s of 1280×720 H.264 + AAC built from ``tests/data``)
has faces, cuts, speech and captions; the speech-dense clip (:func:`bench.media.speech_720p`, ~76 s)
has GRID speakers taking turns and the Hamilton clip, speech nearly all the time; the static clip is a still photograph with sensor noise and
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
Each row carries ``stages_cpu_s_per_media_s``: decode and the rest are ``other``, the named stages (faces,
objects, OCR, ASR, diarization, body, resolver, store) the CPU time of the thread that ran them
(:class:`Breakdown`). Prints one JSON object. Nothing here is part of the test run.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

# plugin first: it sets numpy's BLAS environment as every entry point does (see plugin/__init__.py)
from plugin.engine import Engine  # noqa: E402
from plugin.manifest import Manifest  # noqa: E402

from media import real_720p, speech_720p, static_720p  # noqa: E402


#: the stages the breakdown reports: name → (module, class, methods); CPU time of the calling thread
STAGES: dict[str, list[tuple[str, str, tuple[str, ...]]]] = {
    "faces": [("perception.detectors.faces", "FaceDetector", ("detect",)),
              ("perception.detectors.faces", "FaceEmbedder", ("embed", "embed_many"))],
    "objects": [("perception.detectors.coco", "_CocoDetector", ("detect",)),
                ("perception.detectors.objects", "SSDObjectDetector", ("detect",))],
    "ocr": [("perception.detectors.ocr", "RapidTextReader", ("read",))],
    "asr": [("perception.detectors.asr", "WhisperTranscriber", ("transcribe",))],
    "diarization": [("perception.detectors.speakers", "Diarizer", ("diarize",))],
    "body": [("perception.detectors.body", "ColourTextureDescriptor", ("describe",)),
             ("perception.detectors.body", "OnnxBodyDescriptor", ("describe",))],
    "resolver": [("perception.identity.resolver", "Resolver", ("resolve",)),
                 ("perception.identity.objects", "ObjectResolver", ("resolve",)),
                 ("perception.identity.voices", "VoiceResolver", ("resolve",))],
    "store": [("memory.store.facade", "MemoryStore", ("write_segment",))],
}


#: stages whose model computes on threads of its own (CTranslate2's workers): the whole process's CPU
#: time while they run (which also takes in what the decoding thread did meanwhile)
PROCESS_CLOCK = frozenset({"asr"})


class Breakdown:
    """CPU seconds per stage while active: each stage's methods are wrapped to add up the CPU time
    of the thread that calls them (:data:`PROCESS_CLOCK` stages: of the process), a call inside
    another measured call counting once, for the outer.
    What no stage claims (decoding, the voice activity pass, LanceDB's and ONNX Runtime's own
    threads, the describer, bookkeeping) is ``other``."""

    def __init__(self) -> None:
        self.cpu: dict[str, float] = dict.fromkeys(STAGES, 0.0)
        self._saved: list[tuple[type, str, object]] = []
        self._depth = threading.local()

    def __enter__(self) -> Breakdown:
        import importlib

        for stage, targets in STAGES.items():
            for module, cls_name, methods in targets:
                cls = getattr(importlib.import_module(module), cls_name, None)
                for name in methods if cls is not None else ():
                    owner = next((c for c in cls.__mro__ if name in c.__dict__), None)  # where it is defined
                    if owner is None:
                        continue
                    original = owner.__dict__[name]
                    self._saved.append((owner, name, original))
                    setattr(owner, name, self._wrap(stage, original))
        return self

    def _wrap(self, stage: str, fn: Any) -> Any:
        clock = cpu_s if stage in PROCESS_CLOCK else time.thread_time

        def timed(*args: Any, **kwargs: Any) -> Any:
            depth = getattr(self._depth, "n", 0)
            self._depth.n = depth + 1
            start = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                self._depth.n = depth
                if depth == 0:
                    self.cpu[stage] += clock() - start
        return timed

    def __exit__(self, *exc: object) -> None:
        for cls, name, original in reversed(self._saved):
            setattr(cls, name, original)

    def per_media_s(self, total_cpu_s: float, seconds: float) -> dict[str, float]:
        out = {k: round(v / seconds, 4) for k, v in self.cpu.items()}
        out["other"] = round((total_cpu_s - sum(self.cpu.values())) / seconds, 4)
        return out


def cpu_s() -> float:
    """User + system CPU seconds of this process so far (all threads)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def clips(folder: Path) -> tuple[list[tuple[Path, float]], Path, float]:
    """The active bench clips (mixed, speech-dense) and the static one in ``folder`` (built once, then reused)."""
    folder.mkdir(parents=True, exist_ok=True)
    real, speech, static = folder / "real720.mp4", folder / "speech720.mp4", folder / "static720.mp4"
    if not real.exists():
        real_720p(real)
    if not speech.exists():
        speech_720p(speech)
    if not static.exists():
        static_720p(static, 60.0)
    from perception.media.video import probe
    return [(real, probe(real).duration_s), (speech, probe(speech).duration_s)], static, probe(static).duration_s


def engine(store: str, level: str, mode: str) -> Engine:
    """The engine ``reflectworld ingest`` builds for the default manifest at ``level`` and ``mode``."""
    manifest = Manifest.model_validate({"memory": {"uri": store}, "perception": {"level": level, "mode": mode}})
    return Engine.from_manifest(manifest)


WARM = Path(__file__).resolve().parents[1] / "tests" / "data" / "short_hamilton_clip.mp4"


def cost(clip: Path, seconds: float, level: str, mode: str) -> dict[str, object]:
    """CPU seconds per media second of ingesting ``clip`` (models loaded beforehand)."""
    with tempfile.TemporaryDirectory() as tmp, engine(tmp, level, mode) as eng:
        eng.ingest_file(WARM, camera_id="warm")
        with Breakdown() as parts:
            before = cpu_s()
            report = eng.ingest_file(clip, camera_id="bench")
            used = cpu_s() - before
    per_s = used / seconds
    return {"clip": clip.stem, "level": level, "mode": mode, "media_s": round(seconds, 1),
            "segments": report.segments_written, "cpu_s": round(used, 2), "cpu_s_per_media_s": round(per_s, 4),
            "cameras_per_2_cores": round(2 / per_s, 1) if per_s > 0 else None,
            "stages_cpu_s_per_media_s": parts.per_media_s(used, seconds)}


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
        with Breakdown() as parts:
            before = cpu_s()
            gateway = Gateway(LoopedFile(clip, length_s, seconds), eng.settings.sample_fps,
                              keyframes_after_s=KEYFRAMES_AFTER_S).start()
            written = ingest_live(gateway, eng.pipeline, "bench", final=True)
            gateway.stop()
            used = cpu_s() - before
    per_s = used / seconds
    return {"clip": clip.stem, "path": "live", "level": level, "mode": mode, "media_s": seconds, "segments": written,
            "cpu_s": round(used, 2), "cpu_s_per_media_s": round(per_s, 4),
            "cameras_per_2_cores": round(2 / per_s, 1) if per_s > 0 else None,
            "stages_cpu_s_per_media_s": parts.per_media_s(used, seconds)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clips", type=Path, default=Path(tempfile.gettempdir()) / "reflectworld-bench",
                        help="folder for the generated clips (kept between runs)")
    parser.add_argument("--levels", nargs="+", default=["light", "full"])
    parser.add_argument("--modes", nargs="+", default=["offline_quality", "live_latency"])
    parser.add_argument("--paths", nargs="+", default=["file", "live"],
                        help="file: reflectworld ingest; live: the capture path (static clip looped for --static-minutes)")
    parser.add_argument("--static-minutes", type=float, default=10.0, help="0: no static clip")
    parser.add_argument("--active", nargs="+", default=["real720", "speech720"],
                        help="active clips: real720 (mixed, ~91 s) and speech720 (speech-dense, ~76 s)")
    args = parser.parse_args()
    active_clips, static, static_s = clips(args.clips)
    active_clips = [c for c in active_clips if c[0].stem in args.active]
    rows = []
    for level in args.levels:
        for mode in args.modes:
            if "file" in args.paths:
                active = [cost(clip, s, level, mode) for clip, s in active_clips]
                rows += active
                if args.static_minutes > 0:
                    still = cost(static, static_s, level, mode)
                    still["static_over_active"] = round(float(still["cpu_s_per_media_s"]) / float(active[0]["cpu_s_per_media_s"]), 3)  # type: ignore[arg-type]
                    rows.append(still)
            if "live" in args.paths:
                active = [live_cost(clip, s, s, level, mode) for clip, s in active_clips]
                rows += active
                if args.static_minutes > 0:
                    still = live_cost(static, static_s, args.static_minutes * 60, level, mode)
                    still["static_over_active"] = round(float(still["cpu_s_per_media_s"]) / float(active[0]["cpu_s_per_media_s"]), 3)  # type: ignore[arg-type]
                    rows.append(still)
    print(json.dumps({"cost": rows}, indent=2))  # noqa: T201 (a bench script's output)


if __name__ == "__main__":
    main()
