"""The class names object detectors report: COCO-80, the vendored SSD's label file, a YOLO label file.

A module of its own so that the rule compiler and the notification side can read labels without
loading a detector, and so that the detector modules share them without importing one another.
"""

from __future__ import annotations

from pathlib import Path

from perception.detectors.model_files import MODELS_DIR

__all__ = ["COCO_LABELS", "SSD_LABELS", "detector_labels"]

#: the 80 COCO class names in model order (lower case, as the rule compiler matches them)
COCO_LABELS: tuple[str, ...] = (
    "person", "bicycle", "car", "motorcycle", "airplane", "bus", "train", "truck", "boat", "traffic light",
    "fire hydrant", "stop sign", "parking meter", "bench", "bird", "cat", "dog", "horse", "sheep", "cow",
    "elephant", "bear", "zebra", "giraffe", "backpack", "umbrella", "handbag", "tie", "suitcase", "frisbee",
    "skis", "snowboard", "sports ball", "kite", "baseball bat", "baseball glove", "skateboard", "surfboard",
    "tennis racket", "bottle", "wine glass", "cup", "fork", "knife", "spoon", "bowl", "banana", "apple",
    "sandwich", "orange", "broccoli", "carrot", "hot dog", "pizza", "donut", "cake", "chair", "couch",
    "potted plant", "bed", "dining table", "toilet", "tv", "laptop", "mouse", "remote", "keyboard",
    "cell phone", "microwave", "oven", "toaster", "sink", "refrigerator", "book", "clock", "vase",
    "scissors", "teddy bear", "hair drier", "toothbrush")

SSD_LABELS = MODELS_DIR / "ssd_mobilenetv2_oidv4_labels.txt"


def detector_labels(model: str | None = None, labels: str | None = None, kind: str = "coco") -> list[str]:
    """The class names a detector reports (lower case): COCO-80 (the default), the SSD's, or a YOLO label file's.

    Reads only the label file (no model is loaded); an unreadable file gives an empty list.
    """
    if kind == "coco" and not labels:
        return list(COCO_LABELS)
    path = Path(labels) if labels and (kind == "yolo" or model is not None) else SSD_LABELS
    try:
        names = [line.strip().lower() for line in path.read_text(encoding="utf-8").splitlines()]
    except OSError:
        return []
    return [n for n in names if n and n != "???"]
