"""Embedders: hash (deterministic), MiniLM (real ONNX) and OpenAI-compatible (fake local server)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from memory import EmbedderError, HashEmbedder, MiniLMEmbedder, OpenAIEmbedder
from memory.embedders import QUERY_MODEL_RECIPE


def cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b))


def test_hash_embedder_is_deterministic_unit_norm_and_word_sensitive() -> None:
    emb = HashEmbedder(64)
    a, b, c = emb.embed(["red bicycle in the hallway", "a red bicycle", "quarterly tax report"])
    again = HashEmbedder(64).embed(["red bicycle in the hallway"])[0]
    assert emb.embed(["x"]).dtype == np.float32
    np.testing.assert_array_equal(a, again)
    assert np.allclose(np.linalg.norm([a, b, c], axis=1), 1.0)
    assert cos(a, b) > cos(a, c)


def test_hash_embedder_handles_empty_input_and_empty_text() -> None:
    emb = HashEmbedder(16)
    assert emb.embed([]).shape == (0, 16)
    assert np.isclose(np.linalg.norm(emb.embed([""])[0]), 1.0)


@pytest.mark.slow
def test_minilm_puts_related_sentences_closer_than_unrelated() -> None:
    emb = MiniLMEmbedder()
    vecs = emb.embed([
        "A man is sitting on the sofa holding a coffee cup.",
        "Someone relaxes on the couch with a mug of coffee.",
        "The quarterly tax report is due next Tuesday.",
    ])
    assert vecs.shape == (3, 384) and vecs.dtype == np.float32
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    assert cos(vecs[0], vecs[1]) > 0.5 > cos(vecs[0], vecs[2])


def test_minilm_reports_a_missing_model_file_with_the_path(tmp_path) -> None:
    with pytest.raises(EmbedderError, match="does not exist"):
        MiniLMEmbedder(model_path=tmp_path / "nope.onnx").embed(["hello"])


class _FakeEmbeddings(BaseHTTPRequestHandler):
    """Minimal OpenAI-compatible ``POST /v1/embeddings``: vectors from the hash embedder."""

    requests: list[dict] = []
    dim = 8

    def do_POST(self) -> None:  # noqa: N802 (http.server naming)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
        if body["model"] == "broken":
            payload, status = {"error": {"message": "model 'broken' not found", "type": "invalid_request_error"}}, 404
        else:
            texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
            dim = 5 if body["model"] == "wrong-dim" else self.dim
            vecs = HashEmbedder(dim).embed(texts) * 3.0  # not normalised: the client must normalise
            payload = {"object": "list", "model": body["model"],
                       "data": [{"object": "embedding", "index": i, "embedding": v.tolist()} for i, v in enumerate(vecs)],
                       "usage": {"prompt_tokens": 1, "total_tokens": 1}}
            status = 200
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def fake_server() -> Iterator[str]:
    _FakeEmbeddings.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeEmbeddings)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_openai_embedder_returns_normalised_float_vectors_from_the_server(fake_server: str) -> None:
    emb = OpenAIEmbedder(fake_server, "emb-small", "sk-secret", dim=8)
    vecs = emb.embed(["red bicycle", "a red bicycle", "tax report"])
    assert vecs.shape == (3, 8) and vecs.dtype == np.float32
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0)
    np.testing.assert_allclose(vecs, HashEmbedder(8).embed(["red bicycle", "a red bicycle", "tax report"]), atol=1e-6)
    sent = _FakeEmbeddings.requests[-1]
    assert sent["path"] == "/v1/embeddings"
    assert sent["body"]["encoding_format"] == "float"
    assert sent["auth"] == "Bearer sk-secret"


def test_openai_embedder_failure_names_the_server_and_model_but_never_the_key(fake_server: str) -> None:
    emb = OpenAIEmbedder(fake_server, "broken", "sk-secret", dim=8)
    with pytest.raises(EmbedderError) as err:
        emb.embed(["hello"])
    message = str(err.value)
    assert fake_server in message and "broken" in message
    assert "sk-secret" not in message


def test_openai_embedder_rejects_vectors_of_another_dimension(fake_server: str) -> None:
    with pytest.raises(EmbedderError, match="5-d vectors .* dim=8"):
        OpenAIEmbedder(fake_server, "wrong-dim", None, dim=8).embed(["hello"])


@pytest.mark.slow
def test_minilm_questions_use_an_int8_copy_of_the_model_that_stays_within_0_99_cosine(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("REFLECTWORLD_MODEL_CACHE", str(tmp_path / "cache"))
    emb = MiniLMEmbedder()
    questions = ["what did Maya say about the garden tomatoes", "man with a microphone", "sign saying wet floor",
                 "Lin-Manuel Miranda on stage last night", "two people in the kitchen"]
    documents = emb.embed(questions)
    asked = np.stack([emb.embed_query(q) for q in questions])
    cached = list((tmp_path / "cache").glob("minilm-query-*.onnx"))
    assert len(cached) == 1  # built once, kept for the next process
    assert asked.shape == (5, 384) and asked.dtype == np.float32
    assert np.allclose(np.linalg.norm(asked, axis=1), 1.0, atol=1e-5)
    similarity = (asked * documents).sum(axis=1)
    assert similarity.min() >= 0.99 and not np.array_equal(asked, documents)  # close, and not the same model
    mtime = cached[0].stat().st_mtime_ns
    again = MiniLMEmbedder().embed_query(questions[0])
    np.testing.assert_allclose(again, asked[0], atol=1e-6)
    assert cached[0].stat().st_mtime_ns == mtime  # loaded, not rebuilt


def test_minilm_questions_fall_back_to_the_model_when_the_query_copy_cannot_be_used(tmp_path, monkeypatch) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setenv("REFLECTWORLD_MODEL_CACHE", str(cache))
    emb = MiniLMEmbedder()
    emb.embed(["load"])
    (cache / f"minilm-query-{emb._digest[:16]}-{QUERY_MODEL_RECIPE}.onnx").write_bytes(b"not a model")
    np.testing.assert_allclose(emb.embed_query("a red bicycle"), emb.embed(["a red bicycle"])[0], atol=1e-6)
