"""Labelled photographs for ``reflectworld eval objects``: reading box labels, and scoring detections.

A folder holds images and their box labels in any of three forms (all may be mixed in one folder):

* **COCO**: ``annotations.json`` with ``images`` (``id``, ``file_name``), ``categories`` (``id``, ``name``)
  and ``annotations`` (``image_id``, ``category_id``, ``bbox`` = ``[x, y, width, height]`` in pixels,
  optional ``iscrowd``: a region whose detections of that class count neither way). ``file_name`` is relative to the
  folder and may point outside it (``../images/cat.png``).
* **labelme**: ``<image stem>.json`` as the labelme tool writes it (``shapes`` with ``label`` and
  ``points``; a rectangle, polygon or any shape counts as the box around its points, shapes sharing a
  label and a ``group_id`` as one object; the label
  ``__ignore__`` marks a region whose detections count neither way; ``imagePath`` names the image).
* **simple**: ``<image stem>.json`` holding a list ``[{"label": "cat", "box": [x0, y0, x1, y1]}, …]``
  (``"ignore": true`` marks a region whose detections of that label, or of any class without a label,
  count neither way), for the image of the same stem in the folder.

Labels are matched to detector classes in lower case with ``_`` read as a space, and Pascal VOC's
names mapped to COCO's (``sofa`` → couch, ``tvmonitor`` → tv, ``motorbike`` → motorcycle, …). A
labelled class the detector cannot name is reported and left out of the scores.

Scoring is the usual one at IoU 0.5: per image and class, detections best first each take the
unmatched label box of their class they overlap most (IoU ≥ 0.5): a true positive; a detection that
takes none is a false positive unless half of it lies in an ignored region (of its class or of any); label boxes left are
false negatives. A false positive whose box matches a label box of another class is also counted as
a *confusion* (``cat → dog``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from plugin.errors import PluginError

__all__ = ["Box", "Counts", "LabelledImage", "box_iou", "load_folder", "normalise_label", "score_image"]

#: image file endings a folder's labels may refer to
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp")
#: Pascal VOC class names → COCO class names (labelme's examples use VOC's)
VOC_TO_COCO = {"sofa": "couch", "tvmonitor": "tv", "motorbike": "motorcycle", "aeroplane": "airplane",
               "diningtable": "dining table", "pottedplant": "potted plant"}
IGNORE = "__ignore__"
IOU = 0.5

Box = tuple[float, float, float, float]  # x0, y0, x1, y1 in pixels


@dataclass
class LabelledImage:
    """One photograph and its label boxes."""

    path: Path
    boxes: list[tuple[str, Box]] = field(default_factory=list)
    #: regions whose detections count neither way: ``(class or None for any class, box)``
    ignore: list[tuple[str | None, Box]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def labels(self) -> set[str]:
        return {label for label, _ in self.boxes}


@dataclass
class Counts:
    """True positives, false positives and false negatives of one class."""

    tp: int = 0
    fp: int = 0
    fn: int = 0

    def add(self, other: Counts) -> None:
        self.tp, self.fp, self.fn = self.tp + other.tp, self.fp + other.fp, self.fn + other.fn

    @property
    def precision(self) -> float | None:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else None

    @property
    def recall(self) -> float | None:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else None

    def row(self) -> dict[str, Any]:
        p, r = self.precision, self.recall
        return {"tp": self.tp, "fp": self.fp, "fn": self.fn, "precision": None if p is None else round(p, 3),
                "recall": None if r is None else round(r, 3)}


def normalise_label(label: str) -> str:
    """A label as detector classes are named: lower case, ``_`` as a space, VOC names as COCO's."""
    name = " ".join(str(label).strip().lower().replace("_", " ").split())
    return VOC_TO_COCO.get(name.replace(" ", ""), name)


def box_iou(a: Box, b: Box) -> float:
    """Intersection over union of two ``(x0, y0, x1, y1)`` boxes."""
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    if w <= 0 or h <= 0:
        return 0.0
    inter = w * h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def _inside(a: Box, region: Box) -> float:
    """Share of ``a``'s area that lies in ``region``."""
    w = min(a[2], region[2]) - max(a[0], region[0])
    h = min(a[3], region[3]) - max(a[1], region[1])
    area = (a[2] - a[0]) * (a[3] - a[1])
    return w * h / area if w > 0 and h > 0 and area > 0 else 0.0


def score_image(image: LabelledImage, detections: Sequence[tuple[str, float, Box]], classes: Iterable[str],
                counts: dict[str, Counts], confusions: dict[str, int]) -> None:
    """Add one image's matches (``detections`` = ``(label, score, box)``) to ``counts`` per class."""
    wanted = set(classes)
    taken: set[int] = set()
    for label, _score, box in sorted(detections, key=lambda d: -d[1]):
        if label not in wanted:
            continue
        best, best_iou = -1, IOU
        for i, (truth, tbox) in enumerate(image.boxes):
            if truth == label and i not in taken:
                iou = box_iou(box, tbox)
                if iou >= best_iou:
                    best, best_iou = i, iou
        if best >= 0:
            taken.add(best)
            counts.setdefault(label, Counts()).tp += 1
            continue
        if any((which is None or which == label) and _inside(box, region) >= 0.5 for which, region in image.ignore):
            continue
        counts.setdefault(label, Counts()).fp += 1
        others = [t for t, tbox in image.boxes if t != label and box_iou(box, tbox) >= IOU]
        for other in dict.fromkeys(others):
            key = f"{other} → {label}"
            confusions[key] = confusions.get(key, 0) + 1
    for i, (truth, _tbox) in enumerate(image.boxes):
        if i not in taken and truth in wanted:
            counts.setdefault(truth, Counts()).fn += 1


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PluginError(f"{path}: cannot read labels ({exc}); fix or remove the file") from None


def _xyxy(value: Any, where: str) -> Box:
    if not (isinstance(value, list | tuple) and len(value) == 4 and all(isinstance(v, int | float) for v in value)):
        raise PluginError(f"{where}: a box is four numbers, got {value!r}")
    x0, y0, x1, y1 = (float(v) for v in value)
    if x1 <= x0 or y1 <= y0:
        raise PluginError(f"{where}: box {value!r} is empty; boxes are [x0, y0, x1, y1] with x1 > x0 and y1 > y0")
    return x0, y0, x1, y1


def _coco(path: Path) -> list[LabelledImage]:
    data = _read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("images"), list):
        raise PluginError(f"{path}: a COCO file needs an 'images' list (and 'categories', 'annotations')")
    try:
        names = {c["id"]: normalise_label(c["name"]) for c in data.get("categories", [])}
        images = {im["id"]: LabelledImage(path=(path.parent / im["file_name"])) for im in data["images"]}
        for ann in data.get("annotations", []):
            image = images[ann["image_id"]]
            x, y, w, h = ann["bbox"]
            box = _xyxy([x, y, x + w, y + h], f"{path} annotation {ann.get('id', '?')}")
            if ann.get("iscrowd"):
                image.ignore.append((names[ann["category_id"]], box))
            else:
                image.boxes.append((names[ann["category_id"]], box))
    except (KeyError, TypeError, ValueError) as exc:
        raise PluginError(f"{path}: not COCO detection annotations ({exc!r} missing or malformed)") from None
    return list(images.values())


def _image_beside(label_file: Path, named: str | None) -> Path:
    if named:
        return (label_file.parent / named) if not Path(named).is_absolute() else Path(named)
    for suffix in IMAGE_SUFFIXES:
        for candidate in (label_file.with_suffix(suffix), label_file.with_suffix(suffix.upper())):
            if candidate.is_file():
                return candidate
    raise PluginError(f"{label_file}: no image of the same name beside it ({', '.join(IMAGE_SUFFIXES)})")


def _per_image(path: Path) -> LabelledImage | None:
    data = _read_json(path)
    if isinstance(data, dict) and isinstance(data.get("shapes"), list):  # labelme
        image = LabelledImage(path=_image_beside(path, data.get("imagePath")))
        groups: dict[tuple[str, Any], int] = {}  # shapes of one label and group_id are one object's parts
        for shape in data["shapes"]:
            points = shape.get("points") or []
            if not points:
                continue
            xs, ys = [float(p[0]) for p in points], [float(p[1]) for p in points]
            if shape.get("shape_type") == "circle" and len(points) == 2:
                r = ((xs[1] - xs[0]) ** 2 + (ys[1] - ys[0]) ** 2) ** 0.5
                box: Box = (xs[0] - r, ys[0] - r, xs[0] + r, ys[0] + r)
            else:
                box = (min(xs), min(ys), max(xs), max(ys))
            if box[2] <= box[0] or box[3] <= box[1]:
                continue  # a point or a line names no region
            label = shape.get("label", "")
            if label == IGNORE:
                image.ignore.append((None, box))
                continue
            label, group = normalise_label(label), shape.get("group_id")
            if group is not None and (label, group) in groups:
                k = groups[(label, group)]
                old = image.boxes[k][1]
                image.boxes[k] = (label, (min(old[0], box[0]), min(old[1], box[1]), max(old[2], box[2]),
                                          max(old[3], box[3])))
                continue
            if group is not None:
                groups[(label, group)] = len(image.boxes)
            image.boxes.append((label, box))
        return image
    if isinstance(data, list):  # simple
        image = LabelledImage(path=_image_beside(path, None))
        for i, entry in enumerate(data):
            if not isinstance(entry, dict) or "box" not in entry or ("label" not in entry and not entry.get("ignore")):
                raise PluginError(f"{path} entry {i}: write {{\"label\": \"cat\", \"box\": [x0, y0, x1, y1]}}")
            box = _xyxy(entry["box"], f"{path} entry {i}")
            if entry.get("ignore"):
                image.ignore.append((normalise_label(entry["label"]) if entry.get("label") else None, box))
            else:
                image.boxes.append((normalise_label(entry["label"]), box))
        return image
    return None


def load_folder(folder: Path) -> list[LabelledImage]:
    """Every labelled image of ``folder`` (see the module docstring), sorted by file name.

    Raises:
        PluginError: the folder is missing, holds no labels, or a label file or image is unreadable.
    """
    if not folder.is_dir():
        raise PluginError(f"{folder} is not a folder; give a folder of images with box labels beside them")
    images: dict[Path, LabelledImage] = {}
    coco = folder / "annotations.json"
    if coco.is_file():
        for image in _coco(coco):
            images[image.path.resolve()] = image
    for path in sorted(folder.glob("*.json")):
        if path.name == "annotations.json":
            continue
        image = _per_image(path)
        if image is not None:
            images.setdefault(image.path.resolve(), image)
    if not images:
        raise PluginError(f"no box labels in {folder}: add annotations.json (COCO), labelme files or "
                          "<image>.json lists (see `reflectworld eval objects --help`)")
    for image in images.values():
        if not image.path.is_file():
            raise PluginError(f"{image.path} is labelled but missing; add the image or remove its labels")
    return sorted(images.values(), key=lambda im: im.name)
