"""Object detectors on the repository's labelled media: hit rate and milliseconds per frame.

Run: ``.venv/bin/python bench/coco_detectors.py [FOLDER ...]`` (from the repository root).

* **images**: ``tests/data/images`` — astronaut.png (person), chelsea.png (cat), coffee.png (cup;
  the SSD's "coffee cup"/"mug" count as cup). A hit = the expected class among the detections.
* **Hamilton people**: frames sampled at 2 fps (19 frames) of ``tests/data/short_hamilton_clip.mp4``;
  every YuNet face of at least 40 px is a person that should be found. A hit = the face's centre
  lies inside a ``person`` box.
* **labelled folders** (optional, e.g. the tune and held-out sets ``bench/object_sets.py`` builds):
  precision / recall over all classes at IoU 0.5 and person recall, scored as ``reflectworld eval
  objects`` scores stills (the SSD's names mapped to COCO's: coffee cup/mug → cup, table/desk →
  dining table, computer monitor → tv, computer mouse → mouse; classes it lacks count as misses).
* **CPU ms/frame**: median CPU time (user + sys of the process) of one ``detect`` call with the
  project's session settings (2 intra-op threads), after a warm-up call; CPU time stays stable
  when the machine is busy, wall time does not.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

import cv2

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from perception.detectors.coco import COCO_LABELS, CenterNetDetector, NanoDetDetector  # noqa: E402
from perception.detectors.faces import FaceDetector  # noqa: E402
from perception.detectors.objects import SSDObjectDetector  # noqa: E402
from perception.media.video import iter_frames  # noqa: E402
from plugin.evals.object_labels import Counts, load_folder, score_image  # noqa: E402

IMAGES = {"astronaut.png": "person", "chelsea.png": "cat", "coffee.png": "cup"}
SYNONYMS = {"coffee cup": "cup", "mug": "cup", "table": "dining table", "desk": "dining table",
            "computer monitor": "tv", "computer mouse": "mouse"}


def labelled(det: Any, folder: Path) -> str:
    """``P/R, person R`` of ``det`` on a labelled folder (stills, IoU 0.5)."""
    counts: dict[str, Counts] = {}
    for image in load_folder(folder):
        found = [(SYNONYMS.get(o.label, o.label), o.score, (o.box[0], o.box[1], o.box[0] + o.box[2], o.box[1] + o.box[3]))
                 for o in det.detect(cv2.imread(str(image.path)))]
        score_image(image, found, COCO_LABELS, counts, {})
    total = Counts()
    for c in counts.values():
        total.add(c)
    person = counts.get("person", Counts()).recall
    return (f"P {total.precision or 0:.2f} R {total.recall or 0:.2f} person "
            f"{'-' if person is None else f'{person:.2f}'}")


def main() -> None:
    frames = [f.image_bgr for f in iter_frames(ROOT / "tests/data/short_hamilton_clip.mp4", sample_fps=2.0)]
    faces = FaceDetector()
    people = [(img, [d for d in faces.detect(img) if d.size >= 40]) for img in frames]
    n_faces = sum(len(f) for _, f in people)
    detectors = {"nanodet (COCO-80)": NanoDetDetector(), "centernet (COCO-80)": CenterNetDetector(),
                 "ssd (OIDv4, 24 classes)": SSDObjectDetector()}
    print(f"{'detector':26s} {'images':>7s} {'Hamilton people':>16s} {'CPU ms/frame':>12s}  per image")
    for name, det in detectors.items():
        det.detect(frames[0])
        hits, found = 0, []
        times = []
        for fname, want in IMAGES.items():
            img = cv2.imread(str(ROOT / "tests/data/images" / fname))
            t0 = time.process_time()
            labels = [SYNONYMS.get(o.label, o.label) for o in det.detect(img)]
            times.append(time.process_time() - t0)
            hits += want in labels
            found.append(f"{fname.split('.')[0]}: {', '.join(labels[:3]) or '-'}")
        person_hits = 0
        for img, fs in people:
            t0 = time.process_time()
            boxes = [o.box for o in det.detect(img) if o.label == "person"]
            times.append(time.process_time() - t0)
            for d in fs:
                cx, cy = d.box[0] + d.box[2] / 2, d.box[1] + d.box[3] / 2
                person_hits += any(b[0] <= cx <= b[0] + b[2] and b[1] <= cy <= b[1] + b[3] for b in boxes)
        ms = statistics.median(times) * 1000
        print(f"{name:26s} {hits:>3d}/{len(IMAGES):<3d} {person_hits:>7d}/{n_faces:<8d} {ms:12.1f}  {'; '.join(found)}")
        for folder in sys.argv[1:]:
            print(f"{'':26s} {Path(folder).name}: {labelled(det, Path(folder))}")


if __name__ == "__main__":
    main()
