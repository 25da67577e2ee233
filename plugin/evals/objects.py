"""``reflectworld eval objects FOLDER``: precision and recall of object detection on labelled photographs.

FOLDER holds photographs with box labels beside them (COCO ``annotations.json``, labelme files or
``<image>.json`` lists; see :mod:`plugin.evals.object_labels`). Two measurements, both through the
engine ``reflectworld ingest`` builds for the manifest (on a temporary store):

* **stills**: each photograph through the pipeline's object detector; per class, detections matched
  to label boxes at IoU 0.5 (true/false positives, missed boxes), and class confusions (``cat → dog``:
  a box of one class named as another).
* **clip**: the photographs shown one after another as a video (each ``--seconds`` long, letterboxed
  into a ``--size`` frame, 10 fps H.264), ingested through the whole path — segmenter, scheduler,
  key frames, carry-forward, detector — and scored on the object classes each segment's trace
  names: per photograph, a labelled class named by the segments that show it is a hit, one not named
  a miss, a class named that the photograph does not show a false positive. This catches what the
  stills cannot: key frames taken at the wrong time, a previous analysis carried over a change,
  segments skipped by the scheduler.

Classes the detector cannot name are listed and left out of the scores.
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from plugin.errors import PluginError
from plugin.evals.object_labels import Counts, LabelledImage, load_folder, score_image

__all__ = ["add_parser", "evaluate"]

logger = logging.getLogger(__name__)

CLIP_FPS = 10


def _totals(counts: dict[str, Counts]) -> dict[str, Any]:
    total = Counts()
    for c in counts.values():
        total.add(c)
    return {**total.row(), "per_class": {k: c.row() for k, c in sorted(counts.items())}}


def _image(path: Path) -> np.ndarray:
    from perception.errors import MediaError
    from perception.media.images import read_image

    try:
        image = read_image(path)
    except MediaError as exc:
        raise PluginError(str(exc)) from None
    if image is None:
        raise PluginError(f"{path} is not a readable image; replace it or remove its labels")
    return image


def _fit(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """``image`` scaled to fit a black ``size`` frame, centred (a photograph held up to a camera)."""
    import cv2

    w, h = size
    scale = min(w / image.shape[1], h / image.shape[0])
    nw, nh = max(2, round(image.shape[1] * scale)), max(2, round(image.shape[0] * scale))
    frame = np.zeros((h, w, 3), np.uint8)
    x, y = (w - nw) // 2, (h - nh) // 2
    frame[y:y + nh, x:x + nw] = cv2.resize(image, (nw, nh), interpolation=cv2.INTER_AREA)
    return frame


def write_clip(images: list[np.ndarray], path: Path, seconds: float, size: tuple[int, int]) -> list[tuple[float, float]]:
    """Encode ``images`` shown one after another, ``seconds`` each; returns each one's ``(start, end)``."""
    import av

    per = max(1, round(seconds * CLIP_FPS))
    spans = []
    with av.open(str(path), mode="w") as out:
        stream = out.add_stream("libx264", rate=CLIP_FPS)
        stream.width, stream.height, stream.pix_fmt = size[0], size[1], "yuv420p"
        stream.options = {"crf": "23", "g": "20", "preset": "veryfast"}
        n = 0
        for image in images:
            frame = av.VideoFrame.from_ndarray(_fit(image, size), format="bgr24")
            spans.append((n / CLIP_FPS, (n + per) / CLIP_FPS))
            for _ in range(per):
                frame.pts, frame.time_base = n, Fraction(1, CLIP_FPS)
                for packet in stream.encode(frame):
                    out.mux(packet)
                n += 1
        for packet in stream.encode():
            out.mux(packet)
    return spans


def _clip_scores(images: list[LabelledImage], spans: list[tuple[float, float]],
                 segments: list[tuple[float, float, list[str]]], classes: set[str]) -> tuple[dict[str, Counts], list[list[str]]]:
    """Per class counts of the object classes the segments showing each photograph name (module docstring)."""
    counts: dict[str, Counts] = {}
    found_per_image = []
    for image, (start, end) in zip(images, spans):
        found: set[str] = set()
        for t0, t1, objects in segments:
            inside = min(t1, end) - max(t0, start)
            if inside > 0 and inside >= 0.5 * (t1 - t0):  # the segment shows mostly this photograph
                found.update(o for o in objects if o in classes)
        truth = image.labels & classes
        excused = {which for which, _ in image.ignore if which}
        for label in truth | found:
            c = counts.setdefault(label, Counts())
            if label in truth and label in found:
                c.tp += 1
            elif label in truth:
                c.fn += 1
            elif label not in excused:
                c.fp += 1
        found_per_image.append(sorted(found))
    return counts, found_per_image


def evaluate(folder: Path, manifest: Any, seconds: float = 4.0, size: tuple[int, int] = (1280, 720),
             clip: bool = True, progress: Callable[[int, int], None] | None = None,
             ingest_progress: Callable[[float, float, int], None] | None = None) -> dict[str, Any]:
    """Score the manifest's object detection on ``folder`` (see the module docstring).

    Raises:
        PluginError: bad folder or labels, unreadable images, or object detection is off in the manifest.
    """
    from perception.detectors.objects import detector_labels
    from plugin.engine import Engine, Overrides
    from plugin.manifest import HashEmbedderConfig

    images = load_folder(folder)
    pixels = [_image(im.path) for im in images]
    segments: list[tuple[float, float, list[str]]] = []

    def seen(write: Any) -> None:
        segments.append((write.trace.t_start, write.trace.t_end, list(write.trace.objects)))

    with tempfile.TemporaryDirectory(prefix="reflectworld-eval-objects-") as tmp:
        memory = manifest.memory.model_copy(update={"uri": str(Path(tmp) / "lancedb"), "embedder": HashEmbedderConfig()})
        manifest = manifest.model_copy(update={"memory": memory, "rules": [], "sources": []})
        settings = manifest.perception
        if not settings.objects_on:
            raise PluginError("object detection is off in this manifest: set perception.level: full and an "
                              "objects detector (perception.objects)")
        with Engine.from_manifest(manifest, Overrides(deliver=False, on_commit=seen)) as engine:
            detector = engine.pipeline.models.perceivers().objects
            if detector is None:
                raise PluginError("the manifest's object detector is unavailable (see the log for why)")
            classes = set(detector_labels(settings.object_model, settings.object_labels, settings.object_type))
            counts: dict[str, Counts] = {}
            confusions: dict[str, int] = {}
            rows: list[dict[str, Any]] = []
            for i, (image, bgr) in enumerate(zip(images, pixels)):
                found = [(d.label, d.score, (d.box[0], d.box[1], d.box[0] + d.box[2], d.box[1] + d.box[3]))
                         for d in detector.detect(bgr)]
                score_image(image, found, classes, counts, confusions)
                rows.append({"image": image.name, "labels": sorted(image.labels),
                             "stills": sorted({d[0] for d in found}),
                             "scores": {lbl: round(max(s for l2, s, _ in found if l2 == lbl), 3) for lbl, _, _ in found}})
                if progress is not None:
                    progress(i + 1, len(images))
            result: dict[str, Any] = {"images": rows, "stills": {**_totals(counts), "confusions": confusions},
                                      "not_detectable": sorted({lbl for im in images for lbl in im.labels} - classes)}
            if clip:
                path = Path(tmp) / "photographs.mp4"
                spans = write_clip(pixels, path, seconds, size)
                engine.ingest_file(path, camera_id="eval-objects", progress=ingest_progress)
                segments.sort()
                clip_counts, clip_found = _clip_scores(images, spans, segments, classes)
                result["clip"] = {**_totals(clip_counts), "segments": len(segments), "seconds_per_image": seconds}
                for row, found_labels in zip(rows, clip_found):
                    row["clip"] = found_labels
    return result


def _pr(row: dict[str, Any]) -> str:
    p = "  -  " if row["precision"] is None else f"{row['precision']:.2f}"
    r = "  -  " if row["recall"] is None else f"{row['recall']:.2f}"
    return f"P {p} R {r} ({row['tp']}/{row['fp']}/{row['fn']})"


def _run(args: argparse.Namespace) -> int:
    from plugin.cli import _manifest, _out, _setup_logging
    from plugin.progress import Progress, eval_progress, ingest_progress

    manifest = _manifest(args)
    _setup_logging("WARNING")
    try:
        w, h = (int(v) for v in args.size.lower().split("x"))
    except ValueError:
        raise PluginError(f"--size {args.size!r}: write WIDTHxHEIGHT, e.g. 1280x720") from None
    if not (64 <= w <= 3840 and 64 <= h <= 2160) or w % 2 or h % 2:
        raise PluginError(f"--size {args.size!r}: width and height must be even, 64–3840 × 64–2160")
    if not 0.5 <= args.seconds <= 60:
        raise PluginError(f"--seconds {args.seconds}: show each photograph 0.5–60 s")
    bar = Progress()
    try:
        result = evaluate(Path(args.folder), manifest, seconds=args.seconds, size=(w, h), clip=not args.no_clip,
                          progress=eval_progress("objects", "photograph(s)", bar),
                          ingest_progress=ingest_progress("photographs", bar))
    finally:
        bar.finish()
    if args.json:
        _out(json.dumps(result))
        return 0
    stills, clip = result["stills"], result.get("clip")
    _out("protocol: stills = detector boxes vs label boxes at IoU 0.5; clip = each photograph shown "
         f"{args.seconds:g} s through the full ingest path, classes named by its segments vs its labels")
    _out(f"  {'class':16s} {'stills P/R (tp/fp/fn)':28s} {'clip P/R (tp/fp/fn)' if clip else ''}")
    for label in sorted(set(stills["per_class"]) | set(clip["per_class"] if clip else {})):
        s = _pr(stills["per_class"][label]) if label in stills["per_class"] else "-"
        c = _pr(clip["per_class"][label]) if clip and label in clip["per_class"] else ("-" if clip else "")
        _out(f"  {label:16s} {s:28s} {c}")
    _out(f"  {'all':16s} {_pr(stills):28s} {_pr(clip) if clip else ''}")
    for row in result["images"]:
        _out(f"  {row['image']}: labels {', '.join(row['labels']) or '-'}; stills {', '.join(row['stills']) or '-'}"
             + (f"; clip {', '.join(row['clip']) or '-'}" if clip else ""))
    if stills["confusions"]:
        _out("confusions: " + ", ".join(f"{k} ×{v}" for k, v in sorted(stills["confusions"].items())))
    if result["not_detectable"]:
        _out("labels the detector cannot name (not scored): " + ", ".join(result["not_detectable"]))
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``reflectworld eval objects``."""
    p = sub.add_parser("objects", help="precision/recall per class of object detection on labelled photographs",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folder", help="folder of photographs with box labels (COCO annotations.json, labelme JSON, or "
                   '<image>.json = [{"label": "cat", "box": [x0, y0, x1, y1]}])')
    p.add_argument("--manifest", "-m", help="manifest whose perception settings to use (default: the built-in one)")
    p.add_argument("--seconds", type=float, default=4.0, help="how long the clip shows each photograph (default 4)")
    p.add_argument("--size", default="1280x720", help="frame size of the clip, WIDTHxHEIGHT (default 1280x720)")
    p.add_argument("--no-clip", action="store_true", help="score the stills only")
    p.add_argument("--json", action="store_true", help="print one JSON object (stills, clip, images)")
    p.set_defaults(func=_run, store=None)
