"""Per-segment voices and object entities, for :mod:`perception.drivers.analyzer`.

:func:`resolve_objects` turns the key frames' detections of entity classes into object entity
assignments (:mod:`perception.identity.objects`); :func:`resolve_speech` diarizes the segment's
audio (or takes its share of the file's per-turn diarization), labels each voice
(:mod:`perception.identity.voices`) and splits the transcript into utterances by speaker.
:func:`object_observation` and :func:`speech_text` write the words that go into observations and
traces.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import cv2
import numpy as np

from perception.describe.local import format_ts
from perception.detectors.asr import Transcript
from perception.detectors.objects import ObjectDetection
from perception.identity.objects import ObjectIdentities, ObjectSighting, object_descriptor
from perception.identity.voices import VoiceIdentities

__all__ = ["SpeechResult", "Utterance", "mouth_motion", "object_observation", "resolve_objects", "resolve_speech",
           "speech_text"]


@dataclass(frozen=True)
class Utterance:
    """Consecutive words of one speaker (label: entity id or ``voice_<n>``)."""

    speaker: str
    text: str
    start: float
    end: float


@dataclass
class SpeechResult:
    """Who spoke in a segment and what each said."""

    voices: VoiceIdentities = field(default_factory=VoiceIdentities)
    utterances: list[Utterance] = field(default_factory=list)

    @property
    def speakers(self) -> list[str]:
        """Speaker labels in order of their first words (voices with no words after them)."""
        return list(dict.fromkeys([*(u.speaker for u in self.utterances), *self.voices.labels.values()]))


def resolve_objects(run: Any, frames: Sequence[tuple[np.ndarray, float, str, list[ObjectDetection]]],
                    source: str, index: int, now: float) -> ObjectIdentities:
    """Object entities of one segment from ``(image, t, keyframe id, detections)`` per key frame."""
    resolver = run.object_resolver
    sightings: list[ObjectSighting] = []
    for image, t, kf_id, objects in frames:
        for det in objects:
            if resolver.wants(det):
                sightings.append(ObjectSighting(det, object_descriptor(image, det.box), t, kf_id, image.shape[:2]))
    if not sightings:
        return ObjectIdentities(assignments=[])
    return resolver.resolve(sightings, source, index, now, run.camera_id)


def _patch(image: np.ndarray, box: tuple[int, int, int, int], top: float, bottom: float) -> np.ndarray | None:
    """Grey ``32×16`` patch of a face box between relative heights ``top`` and ``bottom`` (central 60 %)."""
    x, y, w, h = box
    x0, x1 = int(x + 0.2 * w), int(x + 0.8 * w)
    y0, y1 = int(y + top * h), int(y + bottom * h)
    H, W = image.shape[:2]
    x0, y0, x1, y1 = max(0, x0), max(0, y0), min(W, x1), min(H, y1)
    if x1 - x0 < 8 or y1 - y0 < 4:
        return None
    grey = cv2.cvtColor(image[y0:y1, x0:x1], cv2.COLOR_BGR2GRAY)
    patch = cv2.resize(grey, (32, 16), interpolation=cv2.INTER_AREA).astype(np.float32)
    return (patch - patch.mean()) / (patch.std() + 1e-3)


def mouth_motion(frames: Sequence[tuple[float, np.ndarray]], faces: Sequence[Any],
                 assignments: Sequence[str | None], samples: int = 8) -> dict[str, float]:
    """How much each identified face's mouth moves over the segment, beyond its whole face moving.

    Each entity's face box (its largest sighting) is looked at in up to ``samples`` evenly spaced
    frames of the segment, whether or not a face was detected there; between consecutive samples the
    mouth strip (lower third of the box) and the eye strip are compared, and the score is the mean
    mouth change minus the mean eye change (head motion and lighting change both strips alike).
    """
    boxes: dict[str, tuple[int, int, int, int]] = {}
    for face, entity in zip(faces, assignments):
        if entity is None:
            continue
        box = tuple(int(v) for v in face.detection.box[:4])
        if entity not in boxes or box[2] * box[3] > boxes[entity][2] * boxes[entity][3]:
            boxes[entity] = box  # type: ignore[assignment]
    frames = sorted(frames, key=lambda f: f[0])
    if len(frames) > samples:
        frames = [frames[round(i * (len(frames) - 1) / (samples - 1))] for i in range(samples)]
    scores: dict[str, float] = {}
    for entity, box in boxes.items():
        mouth, eyes = [], []
        for (_, a), (_, b) in zip(frames, frames[1:]):
            m0, m1 = _patch(a, box, 0.65, 0.95), _patch(b, box, 0.65, 0.95)
            e0, e1 = _patch(a, box, 0.2, 0.45), _patch(b, box, 0.2, 0.45)
            if m0 is None or m1 is None or e0 is None or e1 is None:
                continue
            mouth.append(float(np.abs(m0 - m1).mean()))
            eyes.append(float(np.abs(e0 - e1).mean()))
        if mouth:
            scores[entity] = round(float(np.mean(mouth)) - float(np.mean(eyes)), 4)
    return scores


def resolve_speech(run: Any, segment: Any, transcript: Transcript, on_screen: list[str], source: str,
                   index: int, now: float, talking: dict[str, float] | None = None) -> SpeechResult:
    """Diarize the segment (its share of the turns' diarization, or its audio), label each voice, and
    split the transcript into utterances."""
    diarizer = getattr(run.perceivers, "speakers", None)
    if diarizer is None or not getattr(segment, "speech", True):
        return SpeechResult()
    if getattr(segment, "diarization", None) is not None:  # the driver diarizes whole speech turns (files)
        diarization = segment.diarization()
    else:
        audio = getattr(segment, "audio", None)
        if audio is None or len(audio) == 0:
            return SpeechResult()
        diarization = diarizer.diarize(audio, offset=segment.t_start)
    if not diarization.turns:
        return SpeechResult()
    voices = run.voice_resolver.resolve(diarization, on_screen, source, index, now, run.camera_id,
                                        talking=talking)
    utterances: list[Utterance] = []
    for word in transcript.words:
        cluster = diarization.speaker_at(word.start, word.end)
        speaker = voices.labels.get(cluster, "") if cluster is not None else ""
        if utterances and utterances[-1].speaker == speaker:
            last = utterances[-1]
            utterances[-1] = Utterance(speaker, f"{last.text} {word.text}".strip(), last.start, word.end)
        else:
            utterances.append(Utterance(speaker, word.text, word.start, word.end))
    if not transcript.words and transcript.text and len(voices.labels) == 1:
        only = next(iter(voices.labels.values()))
        utterances.append(Utterance(only, transcript.text, segment.t_start, segment.t_end))
    return SpeechResult(voices=voices, utterances=[u for u in utterances if u.text])


def _who(label: str, names: dict[str, str]) -> str:
    if not label:
        return "someone"
    name = names.get(label)
    return f"{name} ({label})" if name else label


def speech_text(speech: SpeechResult, names: dict[str, str]) -> tuple[str, list[str]]:
    """The speaker-labelled transcript (``person_0001: words | voice_2: words``) and one quote per utterance."""
    parts = [f"{_who(u.speaker, names)}: {u.text}" for u in speech.utterances]
    return " | ".join(parts), parts


def said_by(speech: SpeechResult, entity_id: str) -> str:
    """What ``entity_id`` said in the segment (joined utterances; empty when nothing)."""
    return " … ".join(u.text for u in speech.utterances if u.speaker == entity_id)


def object_observation(entity_id: str, label: str, name: str | None, t_start: float, t_end: float,
                       camera_id: str, sightings: Sequence[ObjectSighting], assignments: Sequence[str | None],
                       people: Sequence[str]) -> str:
    """Where and when an object entity was seen in a segment, in words."""
    mine = [s for s, a in zip(sightings, assignments) if a == entity_id]
    biggest = max(mine, key=lambda s: s.detection.box[2] * s.detection.box[3])
    h, w = biggest.frame_shape
    x, y, bw, bh = biggest.detection.box
    cx, cy = (x + bw / 2) / max(w, 1), (y + bh / 2) / max(h, 1)
    horiz = "left" if cx < 1 / 3 else "centre" if cx <= 2 / 3 else "right"
    vert = "top" if cy < 1 / 3 else "middle" if cy <= 2 / 3 else "bottom"
    share = bw * bh / max(w * h, 1)
    size = "large" if share >= 0.25 else "medium" if share >= 0.05 else "small"
    who = f"{name} ({entity_id})" if name else entity_id
    company = f", with {', '.join(people)}" if people else ""
    return (f"{who} ({label}) seen {format_ts(t_start)}–{format_ts(t_end)} on {camera_id}, {size}, "
            f"{vert} {horiz} of frame, on {len({s.frame_t for s in mine})} key frame(s){company}.")
