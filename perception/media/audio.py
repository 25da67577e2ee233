"""Audio: decode to 16 kHz mono float32, Silero voice activity detection, a rolling buffer.

* :func:`decode_audio` reads a file's first audio track between two media times;
  :class:`AudioTrack` slices a whole file's audio segment by segment in one forward pass.
  Undecodable packets are skipped and counted, not fatal.
* :class:`SileroVAD` runs the vendored Silero VAD v6 ONNX model (``perception/models``, MIT,
  sha256-checked at load) over 32 ms windows; :meth:`SileroVAD.speech_intervals` turns the
  per-window probabilities into speech intervals with hysteresis.
* :func:`scan_audio` decodes a whole file's audio once: VAD speech intervals (so that cuts do not
  depend on where a resumed decode started), :class:`AudioLevels` (loudness per 0.1 s, what the
  scheduler's silence test needs) and skipped packets; the file driver needs no second pass.
* :class:`AudioBuffer` keeps the recent audio of a live stream by media time, bounded in length.

Everything here is blocking; async callers run it in a worker thread.
"""

from __future__ import annotations

import hashlib
import logging
import math
import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import av
import av.error
import numpy as np

from perception.errors import MediaError
from perception.media.fetch import LOCAL_MEDIA_OPTIONS

__all__ = ["SAMPLE_RATE", "AudioBuffer", "AudioLevels", "AudioScan", "AudioTrack", "SileroVAD", "SpeechTrack",
           "decode_audio", "iter_audio", "scan_audio", "speech_intervals_of"]

logger = logging.getLogger(__name__)

SAMPLE_RATE = 16_000
_MODEL = Path(__file__).resolve().parents[1] / "models" / "silero_vad_16k_op15.onnx"
_MODEL_SHA256 = "7ed98ddbad84ccac4cd0aeb3099049280713df825c610a8ed34543318f1b2c49"
_WINDOW = 512  # samples per VAD step at 16 kHz (32 ms)
_CONTEXT = 64  # samples of the previous window the model expects in front of each window


#: consecutive undecodable packets after which a file counts as corrupt rather than damaged
MAX_BAD_RUN = 200


def iter_audio(path: str | Path, start_s: float = 0.0,
               counts: dict[str, int] | None = None) -> Iterator[tuple[float, np.ndarray]]:
    """Yield ``(t, samples)`` chunks of a file's first audio track, 16 kHz mono float32, from ``start_s``.

    A packet that does not decode is skipped and counted in ``counts["bad_packets"]`` (real files
    carry the odd damaged packet, and MPEG-PS audio right after a seek starts mid-frame); the
    samples after it keep their own timestamps. A read error part-way (a truncated file) ends the
    track there and sets ``counts["truncated"]``.

    Raises:
        MediaError: the file is missing or cannot be opened, or its audio is undecodable throughout.
    """
    counts = counts if counts is not None else {}
    counts.setdefault("bad_packets", 0)
    p = Path(path)
    if not p.is_file():
        raise MediaError(f"media file not found: {str(p)!r}; check the path", str(p))
    try:
        container = av.open(str(p), options=dict(LOCAL_MEDIA_OPTIONS))
    except av.error.FFmpegError as exc:
        raise MediaError(f"cannot read {str(p)!r} as media ({exc}); the file is corrupt or not media", str(p)) from exc
    with container:
        if not container.streams.audio:
            return
        stream = container.streams.audio[0]
        if start_s > 0 and stream.time_base is not None:
            container.seek(int(start_s / stream.time_base), stream=stream)
        resampler = av.AudioResampler(format="flt", layout="mono", rate=SAMPLE_RATE)
        t_next: float | None = None
        bad_run = 0
        packets = container.demux(stream)
        while True:
            try:
                packet = next(packets)
            except StopIteration:
                break
            except (av.error.FFmpegError, OSError) as exc:
                logger.warning("audio of %s ends early at %.2fs (%s)", p, t_next or 0.0, exc)
                counts["truncated"] = 1
                break
            try:
                frames = packet.decode()
            except av.error.FFmpegError:
                counts["bad_packets"] += 1
                bad_run += 1
                if bad_run >= MAX_BAD_RUN:
                    raise MediaError(f"decoding the audio of {str(p)!r} failed {bad_run} times in a row; "
                                     "the file is corrupt", str(p)) from None
                continue
            bad_run = 0
            for frame in frames:
                if frame.time is not None and (t_next is None or abs(float(frame.time) - t_next) > 0.1):
                    t_next = float(frame.time)  # first frame, or the gap a skipped packet left
                t_next = 0.0 if t_next is None else t_next
                for out in resampler.resample(frame):
                    pcm = out.to_ndarray().reshape(-1).astype(np.float32, copy=False)
                    yield t_next, pcm
                    t_next += len(pcm) / SAMPLE_RATE
        for out in resampler.resample(None):
            pcm = out.to_ndarray().reshape(-1).astype(np.float32, copy=False)
            yield (t_next or 0.0), pcm
            t_next = (t_next or 0.0) + len(pcm) / SAMPLE_RATE


class AudioTrack:
    """A file's audio decoded in one forward pass, sliced segment by segment.

    Segments arrive in time order, so the track keeps only the audio from the earliest start still
    to come onward: memory stays bounded by one segment plus a decode chunk, and the file is
    decoded once instead of once (with a seek) per segment.
    """

    def __init__(self, path: str | Path, start_s: float = 0.0) -> None:
        self.counts: dict[str, int] = {"bad_packets": 0}
        self._chunks = iter_audio(path, start_s, self.counts)
        self._buffer = AudioBuffer(max_s=float("inf"))
        self._ended = False

    @property
    def bad_packets(self) -> int:
        """Audio packets skipped because they did not decode."""
        return self.counts.get("bad_packets", 0)

    def slice(self, start_s: float, end_s: float) -> np.ndarray:
        """The samples between two media times (``start_s`` never earlier than a previous call's)."""
        while not self._ended and self._buffer.end_t < end_s:
            try:
                t, pcm = next(self._chunks)
            except StopIteration:
                self._ended = True
                break
            self._buffer.add(t, pcm)
            self._buffer.trim_before(start_s)  # bounded even when the first slice starts late in the file
        self._buffer.trim_before(start_s)
        return self._buffer.slice(start_s, end_s)

    def close(self) -> None:
        """Stop decoding (closes the file)."""
        self._chunks.close()


def decode_audio(path: str | Path, start_s: float = 0.0, end_s: float | None = None) -> np.ndarray:
    """Return the audio of ``path`` between ``start_s`` and ``end_s`` as 16 kHz mono float32.

    A file without an audio track gives an empty array.

    Raises:
        MediaError: the file is missing or cannot be decoded.
    """
    parts: list[np.ndarray] = []
    for t, pcm in iter_audio(path, start_s):
        t_end = t + len(pcm) / SAMPLE_RATE
        if t_end <= start_s:
            continue
        if end_s is not None and t >= end_s:
            break
        lo = max(0, round((start_s - t) * SAMPLE_RATE))
        hi = len(pcm) if end_s is None else min(len(pcm), round((end_s - t) * SAMPLE_RATE))
        parts.append(pcm[lo:hi])
    return np.concatenate(parts).astype(np.float32) if parts else np.zeros(0, np.float32)


#: peak amplitude under which a 32 ms window is digital silence (−80 dBFS): speech probability 0,
#: no model call (a muted camera's audio costs nothing), and the recurrent state starts afresh after it
DIGITAL_SILENCE = 1e-4


class SileroVAD:
    """Silero VAD v6 over 16 kHz audio; stateful across :meth:`probabilities` calls until :meth:`reset`.

    Raises:
        MediaError: (at construction) the model file is missing or its checksum is wrong.
    """

    def __init__(self, threshold: float = 0.5, model_path: Path = _MODEL) -> None:
        import onnxruntime as ort

        if not model_path.is_file():
            raise MediaError(f"Silero VAD model missing at {model_path}; reinstall reflectworld-mm", str(model_path))
        data = model_path.read_bytes()
        if model_path == _MODEL and hashlib.sha256(data).hexdigest() != _MODEL_SHA256:
            raise MediaError(f"Silero VAD model {model_path} fails its sha256 check; reinstall reflectworld-mm",
                             str(model_path))
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self._session = ort.InferenceSession(data, sess_options=opts, providers=["CPUExecutionProvider"])
        self.threshold = threshold
        self._lock = threading.Lock()
        self._pending = np.zeros(0, np.float32)
        self.reset()

    def reset(self) -> None:
        """Forget the recurrent state and any partial window."""
        self._state = np.zeros((2, 1, 128), np.float32)
        self._context = np.zeros(_CONTEXT, np.float32)
        self._pending = np.zeros(0, np.float32)

    def probabilities(self, pcm: np.ndarray, quiet_rms: float = 0.0) -> np.ndarray:
        """Speech probability of each complete 32 ms window in ``pending + pcm`` (a partial tail is kept).

        A window of digital silence, or with an RMS under ``quiet_rms``, gets probability 0 without
        a model call (and the recurrent state starts afresh after it).
        """
        with self._lock:
            data = np.concatenate([self._pending, pcm.astype(np.float32, copy=False)])
            n = len(data) // _WINDOW
            self._pending = data[n * _WINDOW:]
            probs = np.zeros(n, np.float32)
            windows = data[:n * _WINDOW].reshape(n, _WINDOW)
            if n and float(np.abs(windows).max()) < DIGITAL_SILENCE:  # a muted chunk: nothing to run
                self._state = np.zeros_like(self._state)
                self._context = windows[-1, -_CONTEXT:]
                return probs
            sr = np.array(SAMPLE_RATE, np.int64)
            # A muted window costs no model call: probability 0 and a fresh state after it.
            audible = np.abs(windows).max(axis=1) >= DIGITAL_SILENCE
            if quiet_rms > 0:
                audible &= np.einsum("ij,ij->i", windows, windows) >= quiet_rms ** 2 * _WINDOW
            loud = np.flatnonzero(audible)
            previous = -1
            for i in loud:
                if i != previous + 1:  # muted windows came before this one
                    self._state = np.zeros_like(self._state)
                    self._context = windows[i - 1, -_CONTEXT:]
                previous = i
                window = windows[i]
                x = np.concatenate([self._context, window])[None, :]
                out, self._state = self._session.run(None, {"input": x, "state": self._state, "sr": sr})
                self._context = window[-_CONTEXT:]
                probs[i] = float(out[0, 0])
            if previous < n - 1:  # the chunk ends muted
                self._state = np.zeros_like(self._state)
                self._context = windows[-1, -_CONTEXT:]
            return probs

    def speech_intervals(self, probs: np.ndarray, t0: float = 0.0, min_silence_s: float = 0.3,
                         min_speech_s: float = 0.25) -> list[tuple[float, float]]:
        """Speech intervals ``(start, end)`` in seconds from per-window probabilities starting at ``t0``."""
        step = _WINDOW / SAMPLE_RATE
        low = max(0.0, self.threshold - 0.15)
        intervals: list[tuple[float, float]] = []
        start: float | None = None
        silent_since: float | None = None
        for i, p in enumerate(probs):
            t = t0 + i * step
            if start is None:
                if p >= self.threshold:
                    start, silent_since = t, None
            elif p < low:
                silent_since = t if silent_since is None else silent_since
                if t + step - silent_since >= min_silence_s:
                    if silent_since - start >= min_speech_s:
                        intervals.append((start, silent_since))
                    start = silent_since = None
            else:
                silent_since = None
        if start is not None:
            end = t0 + len(probs) * step if silent_since is None else silent_since
            if end - start >= min_speech_s:
                intervals.append((start, end))
        return intervals

    def is_speech(self, pcm: np.ndarray) -> bool:
        """Whether a short clip contains speech (fresh state; does not disturb the streaming state)."""
        saved = (self._state, self._context, self._pending)
        self.reset()
        try:
            probs = self.probabilities(pcm)
            return bool(self.speech_intervals(probs))
        finally:
            self._state, self._context, self._pending = saved


#: window RMS (−54 dBFS) under which a live stream is taken for a quiet room's noise floor: on the
#: test speech (JFK, GRID, audiobook, stage, diarization mixes) no window this quiet scores above 0.22
QUIET_RMS = 0.002


class SpeechTrack:
    """Voice activity of a live stream: every 32 ms window's speech probability, kept with its media time.

    The stream goes through the VAD once, as it arrives (:meth:`add`); whether a segment holds
    speech is then read off the kept probabilities (:meth:`is_speech`) instead of running the
    model over the segment's audio a second time. Bounded to the last ``max_s`` seconds. Windows
    quieter than ``quiet_rms`` (:data:`QUIET_RMS`: a room's noise floor) cost no model call, so a
    quiet camera's audio is nearly free.
    """

    def __init__(self, vad: SileroVAD, max_s: float = 120.0, quiet_rms: float | None = None) -> None:
        self.vad = vad
        self.max_s = max_s
        self.quiet_rms = QUIET_RMS if quiet_rms is None else quiet_rms
        self._chunks: deque[tuple[float, np.ndarray]] = deque()  # (media time of the first window, probabilities)

    def add(self, t: float, pcm: np.ndarray) -> np.ndarray:
        """Run the VAD over a chunk starting at media time ``t``; returns its windows' probabilities."""
        first = t - len(self.vad._pending) / SAMPLE_RATE  # a partial window left from the last chunk comes first
        probs = self.vad.probabilities(pcm, self.quiet_rms)
        if len(probs):
            self._chunks.append((first, probs))
            while self._chunks and self._chunks[0][0] < first - self.max_s:
                self._chunks.popleft()
        return probs

    def is_speech(self, start_s: float, end_s: float) -> bool:
        """Whether the windows starting between two media times hold a speech interval."""
        step = _WINDOW / SAMPLE_RATE
        parts = []
        for t, probs in self._chunks:
            if t + len(probs) * step <= start_s or t >= end_s:
                continue
            lo = max(0, math.ceil((start_s - t) / step - 1e-9))
            hi = min(len(probs), math.ceil((end_s - t) / step - 1e-9))
            parts.append(probs[lo:hi])
        return bool(parts) and bool(self.vad.speech_intervals(np.concatenate(parts)))

    def trim_before(self, t_cut: float) -> None:
        """Forget chunks that end before ``t_cut``."""
        step = _WINDOW / SAMPLE_RATE
        while self._chunks and self._chunks[0][0] + len(self._chunks[0][1]) * step <= t_cut:
            self._chunks.popleft()


def speech_intervals_of(path: str | Path, vad: SileroVAD) -> list[tuple[float, float]]:
    """Speech intervals of a whole file (media seconds), in one streaming decode + VAD pass."""
    return scan_audio(path, vad).intervals


#: seconds per bin of :class:`AudioLevels`
LEVEL_BIN_S = 0.1


class AudioLevels:
    """How loud a file's audio is, as the mean square of its samples per :data:`LEVEL_BIN_S` bin.

    Enough to tell a silent segment from a noisy one without keeping (or decoding again) the
    samples: a few MB for hours of audio.
    """

    def __init__(self) -> None:
        self._sums: list[float] = []
        self._counts: list[int] = []

    def add(self, t: float, pcm: np.ndarray) -> None:
        """Account the chunk of samples starting at media time ``t``."""
        per_bin = round(LEVEL_BIN_S * SAMPLE_RATE)
        start = 0
        while start < len(pcm):  # a chunk may span several bins (FLAC frames are 0.26 s)
            i = max(0, int((t + start / SAMPLE_RATE) / LEVEL_BIN_S + 1e-9))
            end = min(len(pcm), start + max(1, round(((i + 1) * LEVEL_BIN_S - t) * SAMPLE_RATE) - start))
            end = min(end, start + per_bin)
            if i >= len(self._sums):
                grow = i + 1 - len(self._sums)
                self._sums.extend([0.0] * grow)
                self._counts.extend([0] * grow)
            part = pcm[start:end]
            self._sums[i] += float(np.dot(part, part))
            self._counts[i] += len(part)
            start = end

    def rms(self, start_s: float, end_s: float) -> float | None:
        """Root mean square of the samples between two media times (``None``: no audio there)."""
        lo, hi = max(0, int(start_s / LEVEL_BIN_S)), max(0, math.ceil(end_s / LEVEL_BIN_S - 1e-9))
        n = sum(self._counts[lo:hi])
        return math.sqrt(sum(self._sums[lo:hi]) / n) if n else None


@dataclass
class AudioScan:
    """One decode pass over a file's audio: speech intervals, loudness, damaged packets."""

    intervals: list[tuple[float, float]]
    levels: AudioLevels
    bad_packets: int = 0


#: seconds of contiguous audio :func:`scan_audio` measures at once
SCAN_CHUNK_S = 0.5


def _scan_batch(batch: list[np.ndarray], t: float, levels: AudioLevels, vad: SileroVAD | None,
                probs: list[np.ndarray]) -> None:
    if not batch:
        return
    pcm = np.concatenate(batch) if len(batch) > 1 else batch[0]
    levels.add(t, pcm)
    if vad is not None:
        probs.append(vad.probabilities(pcm))


def scan_audio(path: str | Path, vad: SileroVAD | None) -> AudioScan:
    """Decode a file's audio once: voice activity (with ``vad``), loudness and skipped packets."""
    levels = AudioLevels()
    counts: dict[str, int] = {}
    t0: float | None = None
    chunks: list[np.ndarray] = []
    if vad is not None:
        vad.reset()
    # Decoded frames are ~1/47 s each: contiguous ones are measured and run through the VAD
    # :data:`SCAN_CHUNK_S` at a time (the same windows, far fewer calls).
    batch: list[np.ndarray] = []
    batch_t, batch_n = 0.0, 0
    for t, pcm in iter_audio(path, counts=counts):
        t0 = t if t0 is None else t0
        if batch and (abs(t - (batch_t + batch_n / SAMPLE_RATE)) > 1e-6 or batch_n >= SCAN_CHUNK_S * SAMPLE_RATE):
            _scan_batch(batch, batch_t, levels, vad, chunks)
            batch = []
        if not batch:
            batch_t, batch_n = t, 0
        batch.append(pcm)
        batch_n += len(pcm)
    _scan_batch(batch, batch_t, levels, vad, chunks)
    if vad is None:
        return AudioScan([], levels, counts.get("bad_packets", 0))
    vad.reset()
    probs = np.concatenate(chunks) if chunks else np.zeros(0, np.float32)
    return AudioScan(vad.speech_intervals(probs, t0 or 0.0), levels, counts.get("bad_packets", 0))


class AudioBuffer:
    """Recent 16 kHz mono audio of one stream, addressed by media time and bounded to ``max_s`` seconds."""

    def __init__(self, max_s: float = 120.0) -> None:
        self.max_s = max_s
        self._chunks: deque[tuple[float, np.ndarray]] = deque()
        self._total = 0

    def add(self, t: float, pcm: np.ndarray) -> None:
        """Append a chunk starting at media time ``t``; drops the oldest audio beyond ``max_s``."""
        if len(pcm) == 0:
            return
        self._chunks.append((t, pcm))
        self._total += len(pcm)
        while self._chunks and self._total - len(self._chunks[0][1]) > self.max_s * SAMPLE_RATE:
            self._total -= len(self._chunks.popleft()[1])

    @property
    def end_t(self) -> float:
        """Media time just after the newest sample (0.0 when empty)."""
        if not self._chunks:
            return 0.0
        t, pcm = self._chunks[-1]
        return t + len(pcm) / SAMPLE_RATE

    def slice(self, start_s: float, end_s: float) -> np.ndarray:
        """The samples between two media times (gaps are not filled)."""
        parts = []
        for t, pcm in self._chunks:
            t_end = t + len(pcm) / SAMPLE_RATE
            if t_end <= start_s or t >= end_s:
                continue
            lo = max(0, round((start_s - t) * SAMPLE_RATE))
            hi = min(len(pcm), round((end_s - t) * SAMPLE_RATE))
            parts.append(pcm[lo:hi])
        return np.concatenate(parts).astype(np.float32, copy=False) if parts else np.zeros(0, np.float32)

    def trim_before(self, t_cut: float) -> None:
        """Drop chunks that end before ``t_cut`` (already committed audio)."""
        while self._chunks and self._chunks[0][0] + len(self._chunks[0][1]) / SAMPLE_RATE <= t_cut:
            self._total -= len(self._chunks.popleft()[1])
