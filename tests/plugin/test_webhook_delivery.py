"""HTTP delivery against real receivers on 127.0.0.1: webhook (signed, retried, once), OpenClaw hook, ntfy."""

from __future__ import annotations

import base64
import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self

import cv2
import numpy as np
import pytest

from memory import HashEmbedder, MemoryStore
from memory.models import Entity, Keyframe, SegmentWrite, Trace
from plugin.acting.delivery import verify_signature
from plugin.manifest import parse_manifest
from plugin.acting.notify import NotificationService

SECRET = "s3cret-for-tests"


class Receiver:
    """A loopback HTTP server: the first ``fail_first`` POSTs of each path get 500; ``reject`` answers all."""

    def __init__(self, fail_first: int = 0, reject: int | None = None) -> None:
        self.fail_first = fail_first
        self.reject = reject
        self.requests: list[dict[str, Any]] = []
        self.accepted: dict[str, list[dict[str, Any]]] = {}
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                entry = {"path": self.path, "headers": dict(self.headers), "body": body}
                with receiver.lock:
                    receiver.requests.append(entry)
                    tries = sum(1 for r in receiver.requests if r["path"] == self.path)
                    ok = tries > receiver.fail_first and receiver.reject is None
                    key = self.headers.get("Idempotency-Key", "")
                    if ok:  # a well-behaved receiver: an idempotency key it has seen is not processed twice
                        seen = receiver.accepted.setdefault(self.path, [])
                        if all(r["headers"].get("Idempotency-Key") != key for r in seen):
                            seen.append(entry)
                self.send_response(200 if ok else receiver.reject or 500)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


def door_segment(index: int = 0) -> SegmentWrite:
    image = np.zeros((48, 64, 3), np.uint8)
    image[10:30, 20:40] = (0, 200, 255)
    jpeg = cv2.imencode(".jpg", image)[1].tobytes()
    kf = Keyframe(id=f"kf_{index:012d}", camera_id="door", source="src", segment_index=index, t=1.0,
                  wall_time=1_700_000_001.0, quality=1.0, width=64, height=48, entity_ids=["person_0001"], jpeg=jpeg)
    trace = Trace(id=f"trc_{index:012d}", camera_id="door", source="src", segment_index=index, t_start=0.0,
                  t_end=2.0, wall_start=1_700_000_000.0, summary="", entity_ids=["person_0001"], keyframe_ids=[kf.id])
    return SegmentWrite(source="src", camera_id="door", segment_index=index, trace=trace, keyframes=[kf],
                        entities=[Entity(id="person_0001", kind="person", name="Lin")])


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MemoryStore]:
    with MemoryStore(str(tmp_path / "lancedb"), HashEmbedder(64)) as s:
        yield s


def make_service(store: MemoryStore, receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> NotificationService:
    monkeypatch.setenv("RW_WEBHOOK_SECRET", SECRET)
    monkeypatch.setenv("RW_HOOK_TOKEN", "gateway-token")
    manifest = parse_manifest({
        "notifications": {
            "channels": {"webhook": {"url": f"{receiver.url}/hook", "secret": "${RW_WEBHOOK_SECRET}"},
                         "openclaw": {"url": receiver.url, "token": "${RW_HOOK_TOKEN}"},
                         "ntfy": {"url": f"{receiver.url}/door-topic"},
                         "backoff_s": 0.02, "max_attempts": 4},
            "policy": {"channels": ["poll", "webhook", "openclaw", "ntfy"]}},
        "rules": [{"text": "Lin is at the door", "conditions": {"entities": ["Lin"]}, "severity": "warning"}],
    })
    return NotificationService.for_manifest(store, manifest)


def test_a_webhook_that_fails_twice_receives_the_notification_exactly_once_with_a_valid_signature(
        store: MemoryStore, monkeypatch: pytest.MonkeyPatch) -> None:
    with Receiver(fail_first=2) as receiver:
        service = make_service(store, receiver, monkeypatch)
        try:
            [decision] = service.on_commit(door_segment())
            assert decision.decision == "sent"
            assert service.delivery is not None and service.delivery.drain(30)
            service.on_commit(door_segment())  # the same segment again (a re-run): no new delivery
            assert service.delivery.drain(30)
        finally:
            service.close()
    hook = [r for r in receiver.requests if r["path"] == "/hook"]
    assert len(hook) == 3  # 500, 500, 200
    assert {r["headers"]["Idempotency-Key"] for r in hook} == {decision.id}
    [accepted] = receiver.accepted["/hook"]
    headers, body = accepted["headers"], accepted["body"]
    assert verify_signature(SECRET, headers["X-ReflectWorld-Timestamp"], body, headers["X-ReflectWorld-Signature"])
    assert not verify_signature("wrong", headers["X-ReflectWorld-Timestamp"], body, headers["X-ReflectWorld-Signature"])
    payload = json.loads(body)["notification"]
    assert payload["id"] == decision.id and payload["entity_id"] == "*" and payload["entities"] == ["person_0001"] and payload["severity"] == "warning"
    assert payload["keyframe_id"] == "kf_000000000000"
    frame = cv2.imdecode(np.frombuffer(base64.b64decode(payload["keyframe_jpeg_base64"]), np.uint8), cv2.IMREAD_COLOR)
    assert frame is not None and frame.shape == (48, 64, 3)
    stored = service.procedural.get_decision(decision.id)
    assert stored is not None
    assert stored.channels == {"poll": "delivered", "webhook": "delivered", "openclaw": "delivered",
                               "ntfy": "delivered"}


def test_openclaw_hook_and_ntfy_topic_get_their_own_request_shapes(store: MemoryStore,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    with Receiver() as receiver:
        service = make_service(store, receiver, monkeypatch)
        try:
            service.on_commit(door_segment())
            assert service.delivery is not None and service.delivery.drain(30)
        finally:
            service.close()
    [hook] = receiver.accepted["/hooks/agent"]
    assert hook["headers"]["Authorization"] == "Bearer gateway-token"
    agent = json.loads(hook["body"])
    assert agent["name"] == "ReflectWorld" and "Lin is at the door" in agent["message"]
    assert "kf_000000000000" in agent["message"]  # the key frame is linked by id
    [topic] = receiver.accepted["/door-topic"]
    assert topic["headers"]["Priority"] == "4" and topic["headers"]["Title"] == "ReflectWorld: door"
    assert "Lin is at the door" in topic["body"].decode()


def test_a_rejecting_receiver_is_not_retried_and_the_failure_is_recorded(store: MemoryStore,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    with Receiver(reject=401) as receiver:
        service = make_service(store, receiver, monkeypatch)
        try:
            [decision] = service.on_commit(door_segment())
            assert service.delivery is not None and service.delivery.drain(30)
        finally:
            service.close()
    assert len(receiver.requests) == 3  # one per channel: a 401 is not retried
    stored = service.procedural.get_decision(decision.id)
    assert stored is not None
    assert {stored.channels[c] for c in ("webhook", "openclaw", "ntfy")} == {"failed"}


def test_an_unreachable_receiver_is_retried_with_backoff_then_given_up(store: MemoryStore,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("RW_WEBHOOK_SECRET", SECRET)
    manifest = parse_manifest({
        "notifications": {"channels": {"webhook": {"url": f"http://127.0.0.1:{port}/hook", "secret": "${RW_WEBHOOK_SECRET}"},
                                       "backoff_s": 0.01, "max_attempts": 3},
                          "policy": {"channels": ["webhook"]}},
        "rules": [{"text": "anyone", "conditions": {"entities": ["*"]}}],
    })
    service = NotificationService.for_manifest(store, manifest)
    try:
        [decision] = service.on_commit(door_segment())
        assert service.delivery is not None and service.delivery.drain(30)
    finally:
        service.close()
    assert service.delivery.attempts == 3
    stored = service.procedural.get_decision(decision.id)
    assert stored is not None and stored.channels == {"webhook": "failed"}
