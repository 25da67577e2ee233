"""VLMClient against a real HTTP fake on 127.0.0.1: images, schema, retries, timeouts, budgets."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import cv2
import numpy as np
import pytest
from fake_vlm_server import FakeVLMServer, Reply, image_parts
from pydantic import BaseModel

from perception.describe.vlm import StageBudget, VLMClient, VLMError, VLMTimeoutError

KEY = "sk-test-secret-4242"


class Verdict(BaseModel):
    answer: str
    confidence: float


def _jpeg(w: int = 1280, h: int = 720) -> bytes:
    img = np.zeros((h, w, 3), np.uint8)
    img[:, : w // 2] = (0, 0, 255)
    ok, buf = cv2.imencode(".jpg", img)
    assert ok
    return buf.tobytes()


@pytest.fixture
def fake() -> Iterator[FakeVLMServer]:
    with FakeVLMServer(require_images=True, require_text=["Who is there?"], api_key=KEY) as server:
        yield server


def _client(fake: FakeVLMServer, **kw: object) -> VLMClient:
    args: dict[str, object] = {"base_url": fake.base_url, "model": "fake-vlm", "api_key": KEY, "backoff_s": 0.01,
                               "timeout_s": 5.0, "jpeg_max_side": 512}
    args.update(kw)
    return VLMClient(**args)  # type: ignore[arg-type]


MSGS = [{"role": "system", "content": "Reply in JSON."}, {"role": "user", "content": "Who is there?"}]


def test_structured_reply_images_resized_and_tokens_counted(fake: FakeVLMServer) -> None:
    fake.enqueue(Reply(content={"answer": "a red wall", "confidence": 0.9}, prompt_tokens=321, completion_tokens=12))
    client = _client(fake)
    frame = np.full((480, 960, 3), 128, np.uint8)
    verdict, usage = client.complete_json(MSGS, Verdict, stage="segment", images=[_jpeg(), frame])
    assert verdict == Verdict(answer="a red wall", confidence=0.9)
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens, usage.attempts) == (321, 12, 333, 1)
    assert fake.problems == []
    body = fake.requests[0]["body"]
    assert body["response_format"]["json_schema"]["name"] == "Verdict"
    assert body["max_completion_tokens"] == 800 and "reasoning_effort" not in body
    images = image_parts(body)
    assert len(images) == 2
    for data in images:
        decoded = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
        assert max(decoded.shape[:2]) == 512
    assert client.usage_totals()["segment"]["total_tokens"] == 333
    assert KEY not in repr(client)
    client.close()


def test_malformed_then_valid_json_is_retried(fake: FakeVLMServer, caplog: pytest.LogCaptureFixture) -> None:
    fake.enqueue(Reply(content="{not json", prompt_tokens=50, completion_tokens=3),
                 Reply(content={"answer": 3}, prompt_tokens=50, completion_tokens=4),  # wrong type, missing field
                 Reply(content="", prompt_tokens=50, completion_tokens=0),
                 Reply(content={"answer": "ok", "confidence": 0.5}, prompt_tokens=50, completion_tokens=5))
    client = _client(fake, max_attempts=4)
    with caplog.at_level(logging.WARNING, logger="perception.describe.vlm"):
        verdict, usage = client.complete_json(MSGS, Verdict, stage="segment", images=[_jpeg()])
    assert verdict.answer == "ok"
    assert usage.attempts == 4 and usage.prompt_tokens == 200 and usage.completion_tokens == 12
    assert "invalid JSON" in caplog.text and "empty content" in caplog.text
    assert KEY not in caplog.text


def test_malformed_json_every_time_raises_after_max_attempts(fake: FakeVLMServer) -> None:
    fake.enqueue(*[Reply(content="{") for _ in range(3)])
    client = _client(fake, max_attempts=3)
    with pytest.raises(VLMError, match="after 3 attempts") as info:
        client.complete_json(MSGS, Verdict, stage="segment", images=[_jpeg()])
    assert len(fake.requests) == 3
    assert KEY not in str(info.value)
    assert client.usage_totals()["segment"]["failures"] == 1


def test_429_and_5xx_are_retried_then_succeed(fake: FakeVLMServer) -> None:
    fake.enqueue(Reply(status=429, headers={"retry-after": "0"}), Reply(status=503),
                 Reply(content={"answer": "x", "confidence": 1.0}))
    verdict, usage = _client(fake).complete_json(MSGS, Verdict, stage="segment", images=[_jpeg()])
    assert verdict.answer == "x" and usage.attempts == 3
    assert [r["headers"].get("x-stainless-retry-count") for r in fake.requests] == ["0", "0", "0"]  # our loop, not the SDK's


def test_persistent_429_gives_up_with_status(fake: FakeVLMServer) -> None:
    fake.enqueue(*[Reply(status=429) for _ in range(5)])
    with pytest.raises(VLMError) as info:
        _client(fake, max_attempts=2).complete_json(MSGS, Verdict, stage="segment", images=[_jpeg()])
    assert info.value.status == 429 and info.value.attempts == 2
    assert len(fake.requests) == 2


def test_client_errors_are_not_retried(fake: FakeVLMServer) -> None:
    fake.enqueue(Reply(status=404))
    with pytest.raises(VLMError, match="HTTP 404") as info:
        _client(fake).complete_json(MSGS, Verdict, stage="segment", images=[_jpeg()])
    assert info.value.attempts == 1 and len(fake.requests) == 1


def test_timeout_raises_without_retry(fake: FakeVLMServer) -> None:
    fake.enqueue(Reply(content={"answer": "late", "confidence": 0.1}, delay_s=3.0),
                 Reply(content={"answer": "never", "confidence": 0.1}))
    client = _client(fake, budgets={"segment": StageBudget(200, timeout_s=0.3)})
    with pytest.raises(VLMTimeoutError, match="timed out after 0.3s"):
        client.complete_json(MSGS, Verdict, stage="segment", images=[_jpeg()])
    assert len(fake.requests) == 1
    assert client.usage_totals()["segment"]["failures"] == 1


def test_stage_budgets_and_overrides_reach_the_request(fake: FakeVLMServer) -> None:
    client = _client(fake, budgets={"identity": StageBudget(123, "low")}, token_param="max_tokens")
    client.complete_json(MSGS, Verdict, stage="identity", images=[_jpeg()])
    client.complete_json(MSGS, Verdict, stage="identity", images=[_jpeg()], max_output_tokens=77,
                         reasoning_effort="high")
    first, second = (r["body"] for r in fake.requests)
    assert (first["max_tokens"], first["reasoning_effort"]) == (123, "low")
    assert (second["max_tokens"], second["reasoning_effort"]) == (77, "high")
    assert fake.problems == []


def test_concurrency_is_bounded(fake: FakeVLMServer) -> None:
    fake.enqueue(*[Reply(content={"answer": str(i), "confidence": 0.5}, delay_s=0.3) for i in range(6)])
    client = _client(fake, max_concurrency=2)
    errors: list[BaseException] = []

    def call() -> None:
        try:
            client.complete_json(MSGS, Verdict, stage="segment", images=[_jpeg(64, 64)])
        except BaseException as exc:  # noqa: BLE001 - surfaced by the assert below
            errors.append(exc)

    threads = [threading.Thread(target=call) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert errors == []
    assert len(fake.requests) == 6
    assert fake.max_active == 2
    assert client.usage_totals()["segment"]["calls"] == 6


def test_from_manifest_config_and_missing_images_check() -> None:
    from plugin.manifest import OpenAIVLMConfig

    with FakeVLMServer(require_images=True) as fake:
        cfg = OpenAIVLMConfig(base_url=fake.base_url, model="fake-vlm", api_key=KEY, timeout_s=5,
                              max_output_tokens=400, max_concurrency=1)
        client = VLMClient.from_config(cfg, backoff_s=0.01)
        assert client.budgets["segment"].max_output_tokens == 400
        with pytest.raises(VLMError, match="HTTP 400"):
            client.complete_json(MSGS, Verdict, stage="segment")  # no images: the fake rejects it
        assert fake.problems == ["no image parts"]


def test_manifest_stage_budgets() -> None:
    from plugin.manifest import parse_manifest

    manifest = parse_manifest({"perception": {"mode": "live_latency"}, "vlm": {
        "base_url": "http://127.0.0.1:9/v1", "model": "m", "max_attempts": 2,
        "stages": {"segment": {"max_output_tokens": 500, "reasoning_effort": "low", "timeout_s": 20}}}})
    assert manifest.perception.mode == "live_latency"
    assert manifest.vlm is not None
    client = VLMClient.from_config(manifest.vlm)
    assert client.budgets["segment"] == StageBudget(500, "low", 20.0)
    assert client.max_attempts == 2
    client.close()
