"""CAM++ frame features and frame-level voice assignment for :mod:`perception.detectors.speakers`.

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
import threading
from pathlib import Path
from typing import Any

import numpy as np

from perception.detectors.model_files import ort_options, verified

__all__ = ["CAM_STEP_S", "CamPlus", "viterbi"]

logger = logging.getLogger(__name__)

#: seconds per CAM++ frame feature (its first layer halves the 10 ms filterbank rate)
CAM_STEP_S = 0.02
_FRAMES = "/xvector/out_nonlinear/relu/Relu_output_0"
_DENSE = "xvector.dense.linear.weight"
_BN = "xvector.dense.nonlinear.batchnorm."


class CamPlus:
    """The vendored CAM++ model with its frame features exposed; loaded on first use (thread-safe)."""

    def __init__(self, path: Path, sha256: str | None, capability: str, hint: str) -> None:
        self._args = (path, sha256, capability, hint)
        self._session: Any = None
        self._loaded = False
        self._lock = threading.Lock()
        self._dense = np.zeros((0, 0), np.float32)
        self._bn = (np.zeros(0), np.ones(0), np.ones(0), np.zeros(0))

    def session(self) -> Any:
        """The onnxruntime session (``None`` when the file is missing or fails its checksum)."""
        with self._lock:
            if not self._loaded:
                self._loaded = True
                path = verified(*self._args)
                if path is not None:
                    self._session = self._build(path)
            return self._session

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
