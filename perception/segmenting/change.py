"""How much two sampled frames differ, measured so that what a camera does on its own does not count.

Real cameras change every pixel of a still scene all the time: auto-exposure and mains lighting move
the whole frame's brightness by a few grey levels, daylight ramps gain and offset, the sensor adds noise
and the encoder's key frames make the whole picture's texture snap back every GOP. None of that is a
change of what the scene shows, so the segmenter measures change on content normalised for it:

* **scene change** (:func:`scene_change`): the HSV hue/saturation histogram distance (colour content)
  confirmed by a change of *structure*: the frames' 64×36 luma with mean and standard deviation removed
  (invariant to global gain and offset) plus their chroma (YCrCb, which unlike hue and saturation does
  not swing on nearly black pixels). A histogram jump without a structural change (a dim scene whose
  dark pixels' hue flips with one grey level) is scaled down below the cut threshold; a real cut changes
  both (the test clip's shot changes measure 0.9–1.1 in structure; flicker, drift, noise and pulsing
  stay below 0.2).
* **motion** (:func:`motion_measure`): the mean grey-level difference left after fitting the second
  frame to the first by one gain and one offset (a global, uniform change is not motion; the fit is
  trimmed, refitted without the quarter of pixels it fits worst, so that someone walking in does not
  bend it and smear their change over the static rest), never more
  than the plain difference; and the frame's noise floor, the lower quartile of that residual.
  Compression noise, key-frame pulses and sensor noise spread over the whole frame and raise the
  quartile with the mean; something moving changes a part of the frame (a person walking in covers a
  third of it, so not the median) and leaves the quartile at the noise. Motion
  *starts* only when the change clears the threshold by the floor; it *stops* when the change falls
  below the threshold (hysteresis whose width is the clip's own noise).
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from perception.media.video import grey_thumbnail, motion_measure, thumbnail

__all__ = ["STRUCTURE_CUT", "Signature", "colour_histogram", "frame_distance", "motion_between", "motion_measure",
           "scene_change", "signature", "structure_change"]

#: structural change (see :func:`structure_change`) at and above which a colour-histogram jump counts in
#: full; below it the jump is scaled down in proportion. Still scenes under flicker, drift, noise and
#: key-frame pulsing measure at most ~0.15, even dim ones; shot changes 0.9 and more.
STRUCTURE_CUT = 0.5
#: weight of the mean chroma difference (0–1 scale) against the normalised luma difference
CHROMA_WEIGHT = 10.0
#: luma standard deviation below which a frame counts as flat (a bare wall is not normalised into noise)
LUMA_STD_FLOOR = 0.02



@dataclass(frozen=True)
class Signature:
    """What the segmenter compares of one sampled frame."""

    hist: np.ndarray  #: hue/saturation histogram (:func:`colour_histogram`)
    grey: np.ndarray  #: 64×36 grey thumbnail in [0, 1]
    luma: np.ndarray  #: the thumbnail's luma, mean removed, divided by its standard deviation (floored)
    chroma: np.ndarray  #: the thumbnail's Cr and Cb in [0, 1]


def colour_histogram(image_bgr: np.ndarray) -> np.ndarray:
    """Return the L1-normalised 16×8 hue/saturation histogram of a BGR image."""
    small = cv2.resize(image_bgr, (160, 90), interpolation=cv2.INTER_AREA)
    hsv = cv2.cvtColor(small, cv2.COLOR_BGR2HSV)
    hist = cv2.calcHist([hsv], [0, 1], None, [16, 8], [0, 180, 0, 256])
    cv2.normalize(hist, hist, 1.0, 0.0, cv2.NORM_L1)
    return hist


def frame_distance(a: np.ndarray, b: np.ndarray) -> float:
    """Bhattacharyya distance between two histograms from :func:`colour_histogram`."""
    return float(cv2.compareHist(a, b, cv2.HISTCMP_BHATTACHARYYA))


def signature(image_bgr: np.ndarray) -> Signature:
    """The :class:`Signature` of a BGR frame (thumbnails come from the shared per-image cache)."""
    small = thumbnail(image_bgr)
    if small.ndim == 2:
        small = cv2.cvtColor(small, cv2.COLOR_GRAY2BGR)
    ycc = cv2.cvtColor(small, cv2.COLOR_BGR2YCrCb).astype(np.float32) * (1.0 / 255.0)
    y = ycc[..., 0]
    luma = (y - float(y.mean())) / max(float(y.std()), LUMA_STD_FLOOR)
    return Signature(hist=colour_histogram(image_bgr), grey=grey_thumbnail(image_bgr), luma=luma,
                     chroma=ycc[..., 1:])


def structure_change(a: Signature, b: Signature) -> float:
    """Mean difference of gain/offset-normalised luma plus weighted chroma (0 = same picture)."""
    return float(np.abs(a.luma - b.luma).mean()) + CHROMA_WEIGHT * float(np.abs(a.chroma - b.chroma).mean())


def scene_change(a: Signature, b: Signature) -> float:
    """The histogram distance, scaled down when the structure did not change (the segment's ``cut_score``)."""
    return frame_distance(a.hist, b.hist) * min(1.0, structure_change(a, b) / STRUCTURE_CUT)


def motion_between(a: np.ndarray, b: np.ndarray) -> float:
    """Mean absolute difference of two :func:`grey_thumbnail` images."""
    return float(np.abs(a - b).mean())


# motion_measure lives beside the thumbnails in perception.media.video (the gateway's stillness test uses
# it too) and is re-exported here with the other change measures.
