"""Reading still images with a pixel cap checked from the header, before anything is decoded.

A 20000×20000 PNG is a few kilobytes on disk and 1.2 GB once decoded; its size is in the header, so
:func:`read_image` refuses anything over ``MAX_PIXELS`` (40 megapixels) before decoding it.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import cv2
import numpy as np
from PIL import Image, UnidentifiedImageError

from perception.errors import MediaError

__all__ = ["MAX_PIXELS", "image_size", "read_image"]

logger = logging.getLogger(__name__)

MAX_PIXELS = 40_000_000


def image_size(path: str | Path) -> tuple[int, int] | None:
    """``(width, height)`` from the image's header, or ``None`` when it is not an image Pillow knows.

    Raises:
        MediaError: the header states a size Pillow itself refuses to open (a decompression bomb).
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # we apply our own, lower cap
            with Image.open(path) as im:  # lazy: reads the header only
                return int(im.size[0]), int(im.size[1])
    except Image.DecompressionBombError:
        raise MediaError(f"image {Path(path).name!r} is far larger than {MAX_PIXELS // 1_000_000} megapixels; "
                         "scale it down first", str(path)) from None
    except (UnidentifiedImageError, OSError, ValueError):
        return None


def read_image(path: str | Path, max_pixels: int = MAX_PIXELS) -> np.ndarray | None:
    """The image as BGR uint8, or ``None`` when it cannot be read.

    Raises:
        MediaError: the header states more than ``max_pixels`` pixels.
    """
    size = image_size(path)
    if size is None:
        return None  # not an image Pillow can size: unknown data is not handed to a decoder unbounded
    if size[0] * size[1] > max_pixels:
        raise MediaError(f"image {Path(path).name!r} is {size[0]}×{size[1]} pixels; at most "
                         f"{max_pixels // 1_000_000} megapixels are accepted — scale it down first", str(path))
    return cv2.imread(str(path), cv2.IMREAD_COLOR)
