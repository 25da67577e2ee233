"""Voice identity: which person each diarized voice of a segment is, if anyone.

The diarizer (:mod:`perception.detectors.speakers`) says which stretches of a segment are the
same voice. This module decides, per voice cluster:

* **known voice**: its embedding matches a person's voice gallery (cosine ≥ ``match_threshold``
  and clear of the runner-up) → that person, even when off screen;
* **linked**: otherwise, when the voice is the only one speaking (or clearly the main one,
  ``dominant`` share of the speech) and either exactly one identified person is on screen (and was
  seen from the front: a face only in profile, a pianist looking at the keys, may be a listener), or
  several are and one mouth moves clearly more than every other (``talking`` scores,
  :func:`perception.drivers.speech_objects.mouth_motion`), the voice is that person's: a slot is
  added to their voice gallery (face and voice co-occur);
* **unknown voice**: otherwise the voice stays a source-local label ``voice_<n>``. Voices are
  tracked across the segments of one source (the same voice keeps its label, and once linked the
  label resolves to the person). A voice alone never creates an entity; only enrolment
  (``entity_update`` with an audio sample) does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from memory.models import GalleryVoice, IdentityDecision, stable_id
from perception.detectors.speakers import Diarization
from perception.identity.reid import Gallery, Slot, unit

__all__ = ["VoiceIdentities", "VoiceResolver"]


@dataclass
class VoiceIdentities:
    """Per diarized cluster of a segment: the speaker label (entity id or ``voice_<n>``)."""

    labels: dict[int, str] = field(default_factory=dict)
    #: entities identified by voice (known or linked) with their best similarity
    entities: dict[str, float] = field(default_factory=dict)
    gallery: list[GalleryVoice] = field(default_factory=list)
    decisions: list[IdentityDecision] = field(default_factory=list)


class VoiceResolver:
    """Voice → person decisions for one source over the shared voice gallery (see the module docstring)."""

    def __init__(self, gallery: Gallery, match_threshold: float = 0.65, margin: float = 0.05,
                 dominant: float = 0.8, min_link_s: float = 0.8, max_voices: int = 16,
                 min_talking: float = 0.05, talking_ratio: float = 2.0) -> None:
        self.gallery = gallery
        self.match_threshold, self.margin, self.dominant = match_threshold, margin, dominant
        self.min_link_s = min_link_s
        #: source-local voices: label → (centroid, linked entity or None)
        self.voices: dict[str, tuple[np.ndarray, str | None]] = {}
        self.max_voices = max_voices
        self.min_talking, self.talking_ratio = min_talking, talking_ratio
        self._next = 1

    def talker(self, on_screen: list[str], talking: dict[str, float] | None,
               facing: set[str] | None = None) -> str | None:
        """The one person on screen who can be the speaker: the only face (unless it was seen only in
        profile, ``facing`` lists who was seen from the front), or the one mouth clearly moving."""
        if len(on_screen) == 1:
            return on_screen[0] if facing is None or on_screen[0] in facing else None
        scores = sorted(((talking or {}).get(e, 0.0), e) for e in on_screen)
        if len(scores) < 2:
            return None
        (second, _), (best, who) = scores[-2], scores[-1]
        if best >= self.min_talking and best >= self.talking_ratio * max(second, 0.0) + 1e-6:
            return who
        return None

    def resolve(self, diarization: Diarization, on_screen: list[str], source: str, segment_index: int,
                now: float, camera_id: str = "", talking: dict[str, float] | None = None,
                facing: set[str] | None = None) -> VoiceIdentities:
        """Label every voice of one segment.

        ``on_screen``: person entities whose faces were identified; ``talking``: their mouth-motion
        scores; ``facing``: those seen from the front at least once (None: not known).
        """
        out = VoiceIdentities()
        talker = self.talker(on_screen, talking, facing)
        total = sum(diarization.seconds.values()) or 1.0
        slots: list[str] = []
        for c in diarization.speakers:
            vec = unit(diarization.embeddings[c])
            seconds = diarization.seconds[c]
            cands = self.gallery.candidates(vec, top=2)
            best = cands[0] if cands else None
            second = cands[1] if len(cands) > 1 else None
            voice = self._voice(vec)
            evidence: dict[str, object] = {"kind": "voice", "speech_s": round(seconds, 2),
                                           "best": [best.entity_id, round(best.score, 4)] if best else None,
                                           "on_screen": list(on_screen), "voice": voice}
            entity: str | None = None
            action = ""
            if best is not None and best.score >= self.match_threshold and (
                    second is None or best.score - second.score >= self.margin):
                entity, action, score = best.entity_id, "voice_match", best.score
            elif self.voices.get(voice, (None, None))[1] is not None:
                entity, action, score = self.voices[voice][1], "voice_track", 1.0  # type: ignore[assignment]
            elif (talker is not None and seconds >= self.min_link_s and seconds / total >= self.dominant
                  and talker not in out.entities):
                entity, action, score = talker, "voice_link", 1.0
                evidence["talking"] = talking or {}
            if entity is None:
                out.labels[c] = voice
                continue
            self.voices[voice] = (self.voices[voice][0], entity)
            out.labels[c] = entity
            out.entities[entity] = max(out.entities.get(entity, 0.0), score)
            slot = Slot(stable_id("gv_", source, segment_index, c), vec, min(1.0, seconds / 3.0), None, now)
            written = self.gallery.seed(entity, slot) if entity not in self.gallery.entities \
                else self.gallery.offer(entity, slot)
            if written is not None:
                slots.append(written.id)
            reason = {"voice_match": f"voice matched the person's voice gallery at cosine {score:.3f}",
                      "voice_track": "the same voice as earlier in this source, already tied to the person",
                      "voice_link": ("the only identified face on screen while this voice was the one speaking"
                                     if len(on_screen) == 1 else
                                     "the face on screen whose mouth moved while this voice was the one speaking")
                      }[action]
            out.decisions.append(IdentityDecision(
                id=stable_id("dec_", source, segment_index, entity, "voice"), entity_id=entity, action=action,
                source=source, camera_id=camera_id, segment_index=segment_index, score=round(float(score), 4),
                runner_up=second.entity_id if second else None,
                runner_up_score=round(second.score, 4) if second else None, reason=reason,
                evidence_json=json.dumps([evidence]), created_at=now))
        out.gallery = self.gallery.rows(slots, GalleryVoice)
        return out

    def _voice(self, vec: np.ndarray) -> str:
        """The source-local label of a voice (a new one when it resembles none heard before)."""
        best = max(self.voices.items(), key=lambda kv: float(np.dot(kv[1][0], vec)), default=None)
        if best is not None and float(np.dot(best[1][0], vec)) >= self.match_threshold:
            label, (centroid, entity) = best
            self.voices[label] = (unit(centroid + vec), entity)
            return label
        label = f"voice_{self._next}"
        self._next += 1
        if len(self.voices) >= self.max_voices:  # bounded: the oldest unlinked voice is forgotten first
            old = next((k for k, (_, e) in self.voices.items() if e is None), next(iter(self.voices)))
            del self.voices[old]
        self.voices[label] = (vec, None)
        return label


def voice_sample(path: str) -> np.ndarray:
    """The CAM++ embedding of the speech in an audio (or video) file, for enrolment.

    Raises:
        ValueError: the file is missing, has no audio, holds under a second of speech, or the
            speaker model is unavailable.
    """
    from pathlib import Path

    from perception.detectors.asr import load_audio
    from perception.detectors.speakers import SAMPLE_RATE, SpeakerEmbedder
    from perception.media.audio import SileroVAD

    if not Path(path).is_file():
        raise ValueError(f"audio_path {path!r} is not a file on the server; pass the path of a speech recording")
    audio = load_audio(path)
    vad = SileroVAD()
    spans = vad.speech_intervals(vad.probabilities(audio)) if len(audio) else []
    speech = np.concatenate([audio[int(a * SAMPLE_RATE):int(b * SAMPLE_RATE)] for a, b in spans]) if spans \
        else np.zeros(0, np.float32)
    if len(speech) < SAMPLE_RATE:
        raise ValueError(f"{path} holds {len(speech) / SAMPLE_RATE:.1f} s of speech; enrol a sample with at least "
                         "1 s of one person speaking")
    vec = SpeakerEmbedder().embed(speech)
    if vec is None:
        raise ValueError("the speaker model is unavailable; restore perception/models/ from the repository")
    return vec
