"""Deterministic local describer: measured facts about a segment → trace and observation text.

No model, no invented semantics: the text states the time span, how many faces were seen and
who they resolved to, how large they are (close-up / medium / distant), where the main face is,
the lighting (brightness and dominant colour), how much motion there was, whether the segment
opens on a scene cut, and then the objects detected, the text read and the words spoken. The words are chosen by fixed thresholds, so the same facts always give
the same text, and the text is what gets embedded for search: who (names), how many people (a
group from three on), the shot (close-up / medium / wide), objects with counts, text read, words said.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import cv2
import numpy as np

from perception.detectors.faces import FaceDetection
from perception.media.video import grey_thumbnail, thumbnail

_NUMBER_WORDS = ["no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


def format_ts(seconds: float) -> str:
    """Format media seconds as ``m:ss.s`` (``h:mm:ss.s`` past an hour)."""
    seconds = max(0.0, seconds)
    tenths = int(round(seconds * 10))
    h, rem = divmod(tenths, 36000)
    m, rem = divmod(rem, 600)
    s = rem / 10
    return f"{h}:{m:02d}:{s:04.1f}" if h else f"{m}:{s:04.1f}"


def lighting(images: Sequence[np.ndarray]) -> str:
    """Describe brightness and dominant colour of some BGR frames, e.g. ``"bright, warm lighting"``."""
    if not images:
        return "unknown lighting"
    hsv = np.concatenate(
        [cv2.cvtColor(thumbnail(im), cv2.COLOR_BGR2HSV).reshape(-1, 3) for im in images]
    ).astype(np.float32)
    value = float(hsv[:, 2].mean())
    brightness = "dark" if value < 40 else "dim" if value < 90 else "moderate" if value < 150 else "bright"
    saturated = hsv[hsv[:, 1] > 60]
    if len(saturated) < 0.15 * len(hsv):
        tone = "muted"
    else:
        # Circular mean of OpenCV hue (0–180 = 0–360°).
        ang = saturated[:, 0] * (np.pi / 90.0)
        hue = float(np.degrees(np.arctan2(np.sin(ang).mean(), np.cos(ang).mean()))) % 360
        tone = "warm" if hue < 70 or hue >= 330 else "green" if hue < 160 else "cool" if hue < 270 else "magenta"
    return f"{brightness}, {tone} lighting"


def motion_level(images: Sequence[np.ndarray]) -> str:
    """Describe motion from the mean absolute difference of consecutive downscaled grey frames."""
    if len(images) < 2:
        return "motion unknown"
    greys = [grey_thumbnail(im) for im in images]
    mad = float(np.mean([np.abs(a - b).mean() for a, b in zip(greys, greys[1:])]))
    return "little motion" if mad < 0.03 else "some motion" if mad < 0.08 else "a lot of motion"


def shot_size(face: FaceDetection, frame_h: int) -> str:
    """``close-up`` / ``medium shot`` / ``wide shot`` from the face height relative to the frame."""
    rel = face.box[3] / max(frame_h, 1)
    return "close-up" if rel >= 0.28 else "medium shot" if rel >= 0.18 else "wide shot"


def position(face: FaceDetection, frame_w: int) -> str:
    """Horizontal position of a face: ``left of frame`` / ``centre frame`` / ``right of frame``."""
    cx = (face.box[0] + face.box[2] / 2) / max(frame_w, 1)
    return "left of frame" if cx < 1 / 3 else "centre frame" if cx <= 2 / 3 else "right of frame"


def _people(n: int) -> str:
    words = "one person" if n == 1 else f"{_NUMBER_WORDS[n] if n < len(_NUMBER_WORDS) else n} people"
    return f"a group of {words}" if n >= 3 else words


@dataclass
class FrameFaces:
    """The faces found on one analysed frame and the entity each resolved to (or ``None``)."""

    t: float
    width: int
    height: int
    faces: list[FaceDetection]
    entity_ids: list[str | None]


@dataclass
class SegmentFacts:
    """Everything the describer may state about a segment."""

    t_start: float
    t_end: float
    images: list[np.ndarray]
    analysed: list[FrameFaces] = field(default_factory=list)
    #: entity id → display name (only for entities that have one)
    names: dict[str, str] = field(default_factory=dict)
    scene_cut: bool = False
    first: bool = False
    faces_enabled: bool = True
    #: object label → most instances seen on one key frame
    objects: dict[str, int] = field(default_factory=dict)
    #: lines of text read on the key frames
    text_lines: list[str] = field(default_factory=list)
    transcript: str = ""


@dataclass
class Description:
    """Trace summary plus one observation text per entity."""

    summary: str
    observations: dict[str, str]


class LocalDescriber:
    """Turns :class:`SegmentFacts` into factual text, deterministically."""

    def _label(self, entity_id: str, names: dict[str, str]) -> str:
        name = names.get(entity_id)
        return f"{name} ({entity_id})" if name else entity_id

    def describe(self, facts: SegmentFacts) -> Description:
        """Return the trace summary and the per-entity observation texts."""
        span = f"{format_ts(facts.t_start)}–{format_ts(facts.t_end)}"
        light = lighting(facts.images)
        motion = motion_level(facts.images)
        cut = "start of recording" if facts.first else "opens on a scene cut" if facts.scene_cut else "same shot continues"

        busiest = max(facts.analysed, key=lambda a: (len(a.faces), -a.t), default=None)
        entity_order = list(dict.fromkeys(e for a in facts.analysed for e in a.entity_ids if e is not None))
        if not facts.faces_enabled:
            who = "scene (face detection off)"
        elif busiest is None or not busiest.faces:
            who = "no faces visible"
        else:
            main = max(busiest.faces, key=lambda f: f.box[2] * f.box[3])
            ids = [self._label(e, facts.names) for e in entity_order]
            # Faces too small or unclear to identify, counted on the busiest frame.
            unidentified = sum(1 for e in busiest.entity_ids if e is None)
            n = max(len(busiest.faces), len(ids) + unidentified)
            if unidentified > 0 and ids:
                ids.append(f"{unidentified} unidentified")
            id_text = f" ({', '.join(ids)})" if ids else ""
            size = shot_size(main, busiest.height)
            where = position(main, busiest.width)
            if n == 1:
                who = f"{size} of one person{id_text} {where}"
            else:
                who = f"{_people(n)}{id_text}, largest face {size} {where}"
        summary = f"{span} {who}; {light}; {motion}; {cut}."
        if facts.objects:
            seen = ", ".join(label if n == 1 else f"{n} × {label}" for label, n in facts.objects.items())
            summary += f" Objects: {seen}."
        if facts.text_lines:
            summary += " Text read: " + "; ".join(f'"{line}"' for line in facts.text_lines[:8]) + "."
        if facts.transcript:
            summary += f' Speech: "{facts.transcript}"'

        observations: dict[str, str] = {}
        for entity_id in entity_order:
            seen = [(a, a.faces[i]) for a in facts.analysed for i, e in enumerate(a.entity_ids) if e == entity_id]
            a0, f0 = max(seen, key=lambda af: af[1].box[2] * af[1].box[3])
            others = len({e for e in entity_order if e != entity_id})
            company = "alone" if others == 0 else f"with {_people(others)}" if others > 1 else "with one other person"
            observations[entity_id] = (
                f"{self._label(entity_id, facts.names)} seen {span}, {shot_size(f0, a0.height)}, "
                f"{position(f0, a0.width)}, on {len({a.t for a, _ in seen})} of {len(facts.analysed)} analysed frames, "
                f"{company}; {light}; {motion}."
            )
        return Description(summary=summary, observations=observations)
