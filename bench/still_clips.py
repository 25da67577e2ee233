"""Photographs shown to the camera one at a time: what the segments of each one's clip name.

Each photograph becomes its own clip at its own size (cropped to even sides), ``--seconds`` long at
10 fps, H.264 crf 23 with a key frame every 20 frames (a still held up to a camera as a new user
would film it; ``--flicker`` adds the ±1 grey-level exposure flicker of a real camera), and is
ingested with the shipped command line (``reflectworld ingest``) into a store of its own. Prints, per
photograph, the segments and the object classes each names, and — when the folder has labels
(:mod:`plugin.evals.object_labels`) — which labelled classes no segment named.

Usage::

    .venv/bin/python bench/still_clips.py PHOTO_OR_FOLDER [...] [--seconds 8] [--flicker] [--json]

``reflectworld eval objects FOLDER`` scores the same photographs as stills and as one clip of all of
them at one frame size; this shows each one the way a single photograph in front of a camera reaches
memory. Nothing here is part of the test run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from fractions import Fraction
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

FPS = 10
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".webp"}


def photographs(paths: list[str]) -> list[tuple[Path, set[str] | None]]:
    """Every photograph named or in a named folder, with its labelled classes when the folder has labels."""
    from plugin.evals.object_labels import load_folder

    out: list[tuple[Path, set[str] | None]] = []
    for p in map(Path, paths):
        if p.is_dir():
            try:
                out += [(im.path, set(im.labels)) for im in load_folder(p)]
            except Exception:  # a folder without labels: its images alone
                out += [(f, None) for f in sorted(p.iterdir()) if f.suffix.lower() in IMAGE_SUFFIXES]
        else:
            out.append((p, None))
    return out


def write_still(image: np.ndarray, path: Path, seconds: float, flicker: bool) -> None:
    """``image`` as a ``seconds`` long clip at its own size (even sides), 10 fps H.264 crf 23, GOP 20."""
    import av

    h, w = image.shape[0] // 2 * 2, image.shape[1] // 2 * 2
    image = np.ascontiguousarray(image[:h, :w])
    with av.open(str(path), mode="w") as out:
        stream = out.add_stream("libx264", rate=FPS)
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        stream.options = {"crf": "23", "g": "20"}
        for n in range(round(seconds * FPS)):
            frame = image
            if flicker:  # the whole frame one grey level brighter or darker, frame after frame
                frame = np.clip(image.astype(np.int16) + (1 if n % 2 else -1), 0, 255).astype(np.uint8)
            vf = av.VideoFrame.from_ndarray(frame, format="bgr24")
            vf.pts, vf.time_base = n, Fraction(1, FPS)
            for packet in stream.encode(vf):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)


def segments(store: Path) -> list[dict[str, Any]]:
    """The traces the store holds, oldest first: start, end and object classes."""
    import lancedb

    rows = lancedb.connect(str(store)).open_table("traces").to_arrow().select(["t_start", "t_end", "objects"])
    return sorted(({"t": [round(r["t_start"], 1), round(r["t_end"], 1)], "objects": list(r["objects"] or [])}
                   for r in rows.to_pylist()), key=lambda r: r["t"])


def main() -> int:
    from perception.media.images import read_image

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+", help="photographs, or folders of them (labelled or not)")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--flicker", action="store_true", help="±1 grey level exposure flicker on every frame")
    parser.add_argument("--manifest", "-m", help="manifest for reflectworld ingest (default: the built-in one)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    results = []
    for path, labels in photographs(args.paths):
        image = read_image(path)
        if image is None:
            print(f"{path}: not a readable image", file=sys.stderr)
            continue
        with tempfile.TemporaryDirectory(prefix="reflectworld-still-") as tmp:
            clip, store = Path(tmp) / f"{path.stem}.mp4", Path(tmp) / "lancedb"
            write_still(image, clip, args.seconds, args.flicker)
            cmd = [sys.executable, "-m", "plugin.cli", "ingest", str(clip), "--store", str(store)]
            if args.manifest:
                cmd += ["--manifest", args.manifest]
            subprocess.run(cmd, check=True, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            segs = segments(store)
        named = sorted({o for s in segs for o in s["objects"]})
        row: dict[str, Any] = {"photograph": str(path), "size": [image.shape[1], image.shape[0]],
                               "segments": segs, "named": named}
        if labels is not None:
            row["labels"], row["missed"] = sorted(labels), sorted(labels - set(named))
        results.append(row)
        if not args.json:
            extra = f"; labels {', '.join(row['labels'])}; missed {', '.join(row['missed']) or '-'}" if labels else ""
            print(f"{path.name} {row['size'][0]}×{row['size'][1]}: {len(segs)} segment(s); named "
                  f"{', '.join(named) or 'nothing'}{extra}")
            for s in segs:
                print(f"    {s['t'][0]:5.1f}–{s['t'][1]:5.1f} s  {', '.join(s['objects']) or '-'}")
    if args.json:
        print(json.dumps(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
