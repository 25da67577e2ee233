"""Build the labelled photograph sets for ``reflectworld eval objects``: a tuning part and a held-out part.

Run: ``.venv/bin/python bench/object_sets.py OUT`` (from the repository root), then
``reflectworld eval objects OUT/tune`` and ``reflectworld eval objects OUT/heldout``.

Sources (provenance in ``tests/data/objects/README.md``):

* the repository's photographs, labelled by hand in ``tests/data/objects/annotations.json``
  (scikit-image's astronaut, chelsea, coffee and camera; CC0 / public domain);
* Debian's ``labelme-examples`` package (``apt-get install labelme-examples``; GPL-3+, photographs from
  Pascal VOC 2011), read where the package installs it and copied into OUT, never into the repository:
  the three VOC photographs of ``instance_segmentation`` with their polygon labels (the box around each
  polygon; ``__ignore__`` regions), and the cat and the dog of ``classification``, which the package
  labels by image only; their boxes (:data:`CLASSIFICATION_BOXES`) were drawn by hand here.

The split was fixed before tuning: the detector settings were chosen on ``tune`` only.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from plugin.evals.object_labels import LabelledImage, load_folder  # noqa: E402

LABELME = Path("/usr/share/doc/labelme-examples/examples")
REPOSITORY = ROOT / "tests" / "data" / "objects"
#: hand-drawn boxes for the package's classification examples (labelled there as "cat" / "dog" only)
CLASSIFICATION_BOXES = {"0001.jpg": ("cat", (95, 38, 595, 445)), "0002.jpg": ("dog", (245, 40, 640, 480))}
SPLIT = {
    "tune": ["astronaut.png", "chelsea.png", "coffee.png", "2011_000003.jpg", "0001.jpg"],
    "heldout": ["camera.png", "2011_000006.jpg", "2011_000025.jpg", "0002.jpg"],
}


def sources() -> dict[str, LabelledImage]:
    """Every labelled photograph by file name."""
    found = {im.name: im for im in load_folder(REPOSITORY)}
    if not LABELME.is_dir():
        raise SystemExit(f"{LABELME} not found: apt-get install labelme-examples")
    found.update({im.name: im for im in load_folder(LABELME / "instance_segmentation" / "data_annotated")})
    for name, (label, box) in CLASSIFICATION_BOXES.items():
        found[name] = LabelledImage(path=LABELME / "classification" / "data_annotated" / name,
                                    boxes=[(label, tuple(float(v) for v in box))])  # type: ignore[misc]
    return found


def write(image: LabelledImage, folder: Path) -> None:
    """Copy ``image`` into ``folder`` with its labels as ``<stem>.json`` (the simple form)."""
    target = folder / image.name
    shutil.copyfile(image.path, target)
    entries = [{"label": label, "box": [round(v, 1) for v in box]} for label, box in image.boxes]
    entries += [{"ignore": True, "box": [round(v, 1) for v in box], **({"label": which} if which else {})}
                for which, box in image.ignore]
    target.with_suffix(".json").write_text(json.dumps(entries, indent=1), encoding="utf-8")


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    out = Path(sys.argv[1])
    images = sources()
    for part, names in SPLIT.items():
        folder = out / part
        folder.mkdir(parents=True, exist_ok=True)
        for name in names:
            write(images[name], folder)
        print(f"{folder}: {len(names)} photographs")  # noqa: T201 (a bench script's output)


if __name__ == "__main__":
    main()
