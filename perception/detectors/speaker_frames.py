"""CAM++ speaker embeddings and frame features, and the frame helpers of :mod:`perception.detectors.speakers`.

CAM++ turns a stretch of speech into frame features (512 channels, one frame per 20 ms) and pools
their mean and standard deviation into the embedding. Running the model once over a whole
segmentation window and pooling any subset of its frames gives the embedding of any piece of the
window at no further model cost, so pieces can be as short as a turn and as many as needed, and a
voice can be scored every tenth of a second (:func:`viterbi` then follows the voices frame by
frame). The pooled vector before CAM++'s last ReLU keeps the signs the ReLU drops and tells voices
apart better; after the ReLU it is the model's own embedding.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from perception.detectors.model_files import MODELS_DIR, ort_options
from perception.detectors.objects import _OnnxModel
from perception.detectors.speaker_clusters import runs as _runs

__all__ = ["CAM_STEP_S", "EMBEDDING_FILE", "SAMPLE_RATE", "CamPlus", "SpeakerEmbedder", "cam_mask", "fill_gaps",
           "kaldi_fbank", "narrowband", "trim_edges", "viterbi"]

logger = logging.getLogger(__name__)

SAMPLE_RATE = 16000
EMBEDDING_FILE = MODELS_DIR / "campplus_cn_en_common.onnx"
EMBEDDING_SHA256 = "acad4a59b46f636599d26f96e0a82d93ccc1d48e7d2aa433b8bd9989f3a42465"
_HINT = "restore perception/models/ from the repository"
#: seconds of a segmentation-3.0 frame and of its step (the frames ``cam_mask`` maps from)
FRAME_STEP_S = 0.016875
FRAME_SPAN_S = 0.0619375
#: seconds per CAM++ frame feature (its first layer halves the 10 ms filterbank rate)
CAM_STEP_S = 0.02
_FRAMES = "/xvector/out_nonlinear/relu/Relu_output_0"
_DENSE = "xvector.dense.linear.weight"
_BN = "xvector.dense.nonlinear.batchnorm."


class CamPlus:
    """The vendored CAM++ model with its frame features exposed; loaded on first use (thread-safe)."""

    def __init__(self, path: Path, sha256: str | None, capability: str, hint: str) -> None:
        self._model = _OnnxModel(path, sha256, capability, hint, build=self._build)
        self._dense = np.zeros((0, 0), np.float32)
        self._bn = (np.zeros(0), np.ones(0), np.ones(0), np.zeros(0))

    def session(self) -> Any:
        """The onnxruntime session (``None`` when the file is missing or fails its checksum)."""
        return self._model.session()

    def _build(self, path: Path) -> Any:
        import onnx
        import onnxruntime as ort
        from onnx import numpy_helper

        model = onnx.load(str(path))
        weights = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
        consts = {n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in model.graph.node
                  if n.op_type == "Constant" and n.attribute}
        bn = next(n for n in model.graph.node if n.op_type == "BatchNormalization"
                  and n.input[3] == _BN + "running_mean")
        eps = next((a.f for a in bn.attribute if a.name == "epsilon"), 1e-5)
        self._dense = weights[_DENSE][:, :, 0].astype(np.float64)
        scale, bias = (consts[name] if name in consts else weights[name] for name in bn.input[1:3])
        self._bn = (weights[_BN + "running_mean"].astype(np.float64),
                    np.sqrt(weights[_BN + "running_var"].astype(np.float64) + eps),
                    scale.astype(np.float64), bias.astype(np.float64))
        model.graph.output.append(onnx.helper.make_tensor_value_info(_FRAMES, onnx.TensorProto.FLOAT, None))
        return ort.InferenceSession(model.SerializeToString(), ort_options(), providers=["CPUExecutionProvider"])

    def run(self, feats: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(embedding, frame features [frames, 512])`` of mean-normalised filterbank ``feats``."""
        embs, frames = self.session().run(None, {"feats": feats[None]})
        return np.asarray(embs[0], np.float32), np.asarray(frames[0].T, np.float32)

    def pool(self, frames: np.ndarray) -> np.ndarray | None:
        """The pre-ReLU embedding (192-d, not normalised) of a set of frame features (``None``: under 3)."""
        if len(frames) < 3:
            return None
        f = frames.astype(np.float64)
        stats = np.concatenate([f.mean(0), f.std(0, ddof=1)])
        mean, std, scale, bias = self._bn
        return (((self._dense @ stats) - mean) / std * scale + bias).astype(np.float32)


def viterbi(scores: np.ndarray, switch: float) -> np.ndarray:
    """The label sequence maximising the summed ``scores`` (``[steps, labels]``) less ``switch`` per change."""
    n, k = scores.shape
    if not n:
        return np.zeros(0, int)
    total = scores[0].astype(np.float64)
    back = np.zeros((n, k), int)
    for t in range(1, n):
        stay = total
        best = int(np.argmax(total))
        move = total[best] - switch
        back[t] = np.where(stay >= move, np.arange(k), best)
        total = np.maximum(stay, move) + scores[t]
    out = np.zeros(n, int)
    out[-1] = int(np.argmax(total))
    for t in range(n - 1, 0, -1):
        out[t - 1] = back[t, out[t]]
    return out


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
    """CAM++ speaker embeddings (192-d, unit length), loaded on first use; also the model's frame
    features of a stretch of audio, whose pooled subsets embed any piece of it (:meth:`frames`)."""

    name = "campplus-cn-en-v1"
    dim = 192

    def __init__(self) -> None:
        self._model = CamPlus(EMBEDDING_FILE, EMBEDDING_SHA256, "speaker identification", _HINT)

    @property
    def available(self) -> bool:
        """Whether the model loaded (loads it on first call)."""
        return self._model.session() is not None

    def _run(self, audio: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """CAM++ over 16 kHz ``audio``: ``(embedding, frame features)`` (``None``: too short or no model)."""
        feats = kaldi_fbank(audio)
        if self._model.session() is None or len(feats) < 20:
            return None
        return self._model.run(feats - feats.mean(0, keepdims=True))

    def embed(self, audio: np.ndarray) -> np.ndarray | None:
        """The unit embedding of 16 kHz mono speech (``None`` when too short or the model is unavailable)."""
        out = self._run(audio)
        norm = float(np.linalg.norm(out[0])) if out is not None else 0.0
        return out[0] / norm if out is not None and norm > 0 else None

    def frames(self, audio: np.ndarray) -> np.ndarray:
        """CAM++ frame features ``[frames, 512]`` of 16 kHz ``audio``, one per :data:`CAM_STEP_S` from its start."""
        out = self._run(audio)
        return out[1] if out is not None else np.zeros((0, 512), np.float32)

    def pool(self, frames: np.ndarray) -> np.ndarray | None:
        """The pre-ReLU embedding (not normalised) of a subset of :meth:`frames` (``None``: too few)."""
        return self._model.pool(frames)


def narrowband(audio: np.ndarray, below_db: float) -> bool:
    """Whether 16 kHz ``audio`` carries next to nothing above 4 kHz (a telephone line, an old recording):
    its power in 4-7.8 kHz is ``below_db`` or more under its power in 0.3-3.4 kHz."""
    n = 4096
    if len(audio) < n:
        return False
    frames = audio[:len(audio) // n * n].reshape(-1, n) * np.hanning(n)
    power = (np.abs(np.fft.rfft(frames, axis=1)) ** 2).sum(0)
    freqs = np.fft.rfftfreq(n, 1 / SAMPLE_RATE)
    high = float(power[(freqs >= 4000) & (freqs < 7800)].sum())
    voice = float(power[(freqs >= 300) & (freqs < 3400)].sum())
    return voice > 0 and 10 * np.log10(high / voice + 1e-12) < below_db


def fill_gaps(mask: np.ndarray, silent: np.ndarray, longest: int) -> np.ndarray:
    """``mask`` with its gaps of at most ``longest`` frames filled where they are all ``silent``."""
    out = mask.copy()
    spans = _runs(mask)
    for (_, b), (a, _) in zip(spans[:-1], spans[1:]):
        if a - b <= longest and silent[b:a].all():
            out[b:a] = True
    return out


def cam_mask(mask: np.ndarray, n: int) -> np.ndarray:
    """Which of ``n`` CAM++ frames of a window fall in the True segmentation frames of ``mask``."""
    if not len(mask):
        return np.zeros(n, bool)
    centres = np.arange(n) * CAM_STEP_S + 0.0175
    idx = np.clip(np.round((centres - FRAME_SPAN_S / 2) / FRAME_STEP_S).astype(int), 0, len(mask) - 1)
    return mask[idx]


def trim_edges(mask: np.ndarray, quiet: np.ndarray) -> np.ndarray:
    """``mask`` with every run's ``quiet`` frames at its start and end dropped."""
    out = mask.copy()
    for a, b in _runs(mask):
        while a < b and quiet[a]:
            out[a] = False
            a += 1
        while b > a and quiet[b - 1]:
            out[b - 1] = False
            b -= 1
    return out
