"""MQTT delivery against a real Mosquitto broker that the tests start on loopback.

Mosquitto comes from the system (``apt-get install mosquitto``, done by ``.ci/run``); it runs with a
config of our own on a free port, never as a system service. Without it these tests skip, except
under ``CI=true``, where they fail.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from memory import HashEmbedder, MemoryStore
from plugin.manifest import parse_manifest
from plugin.acting.notify import NotificationService
from tests.plugin.browser import require
from tests.plugin.test_transports import free_port
from tests.plugin.test_webhook_delivery import door_segment

MOSQUITTO = Path(shutil.which("mosquitto") or "/usr/sbin/mosquitto")


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[int]:
    """A mosquitto on 127.0.0.1:PORT (anonymous, no persistence) for one test."""
    require(MOSQUITTO, "mosquitto", "apt-get install mosquitto")
    port = free_port()
    conf = tmp_path / "mosquitto.conf"
    conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n")
    log = (tmp_path / "mosquitto.log").open("wb")
    proc = subprocess.Popen([str(MOSQUITTO), "-c", str(conf)], stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not _listening(port):
            assert proc.poll() is None, (tmp_path / "mosquitto.log").read_text()
            assert time.monotonic() < deadline, "mosquitto did not listen within 10 s"
            time.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


class Subscriber:
    """A plain paho client subscribed to ``#``: every message with its retain flag."""

    def __init__(self, port: int) -> None:
        self.messages: list[tuple[str, bytes, bool]] = []
        self.cond = threading.Condition()
        self.client = paho.Client(CallbackAPIVersion.VERSION2, client_id=f"sub-{time.monotonic_ns()}")
        self.client.on_message = self._on_message
        subscribed = threading.Event()
        self.client.on_subscribe = lambda *_: subscribed.set()
        self.client.on_connect = lambda c, *_: c.subscribe("#", qos=1)
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()
        assert subscribed.wait(10), "subscriber did not subscribe"

    def _on_message(self, _c: Any, _u: Any, message: Any) -> None:
        with self.cond:
            self.messages.append((message.topic, bytes(message.payload), bool(message.retain)))
            self.cond.notify_all()

    def wait_for(self, topic: str, payload: bytes | None = None, timeout: float = 15) -> tuple[str, bytes, bool]:
        """The first message on ``topic`` (with ``payload`` when given)."""
        with self.cond:
            found = self.cond.wait_for(lambda: self._find(topic, payload), timeout)
            assert found, f"no message on {topic}; got {[m[0] for m in self.messages]}"
            return found

    def _find(self, topic: str, payload: bytes | None) -> tuple[str, bytes, bool] | None:
        return next((m for m in self.messages if m[0] == topic and (payload is None or m[1] == payload)), None)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def mqtt_manifest(port: int, **policy: Any) -> Any:
    return parse_manifest({
        "sources": [{"uri": "rtsp://cam.local/stream", "camera_id": "porch"}],
        "notifications": {
            "channels": {"mqtt": {"host": "127.0.0.1", "port": port, "client_id": "rw-test"}},
            "policy": {"channels": ["poll", "mqtt"], **policy}},
        "rules": [{"text": "Lin is at the door", "conditions": {"entities": ["Lin"]}, "severity": "warning"}],
    })


def test_a_notification_reaches_the_broker_with_home_assistant_discovery_and_retained_status(
        broker: int, tmp_path: Path) -> None:
    sub = Subscriber(broker)
    try:
        with MemoryStore(str(tmp_path / "lancedb"), HashEmbedder(64)) as store:
            service = NotificationService.for_manifest(store, mqtt_manifest(broker))
            try:
                assert service.mqtt is not None and service.mqtt.wait_connected(10)
                # the manifest's camera is announced at connect: a device with its connectivity sensor
                online = json.loads(sub.wait_for("homeassistant/binary_sensor/rw-test/porch_online/config")[1])
                assert online["device_class"] == "connectivity"
                assert online["state_topic"] == "reflectworld/porch/status"
                assert online["availability_topic"] == "reflectworld/availability"
                sub.wait_for("reflectworld/availability", b"online")

                [decision] = service.on_commit(door_segment())
                assert decision.decision == "sent"
                assert service.delivery is not None and service.delivery.drain(30)
                stored = service.procedural.get_decision(decision.id)
                assert stored is not None and stored.channels == {"poll": "delivered", "mqtt": "delivered"}

                note = json.loads(sub.wait_for("reflectworld/notifications")[1])
                assert note["id"] == decision.id and note["camera_id"] == "door" and note["severity"] == "warning"
                assert "keyframe_jpeg_base64" not in note
                event = json.loads(sub.wait_for("reflectworld/door/event")[1])
                assert event["event_type"] == "warning" and event["id"] == decision.id
                snapshot = sub.wait_for("reflectworld/door/snapshot")
                assert snapshot[1][:3] == b"\xff\xd8\xff"
                # a camera first seen in a notification is announced too, with an event entity for it
                ha_event = json.loads(sub.wait_for("homeassistant/event/rw-test/door_notification/config")[1])
                assert ha_event["state_topic"] == "reflectworld/door/event"
                assert set(ha_event["event_types"]) == {"info", "warning", "critical"}
                assert ha_event["device"]["identifiers"] == ["rw-test_door"]
                sensor = json.loads(sub.wait_for("homeassistant/sensor/rw-test/door_last_notification/config")[1])
                assert sensor["value_template"].startswith("{{ value_json.message")

                # a live source going offline: retained status plus an offline notification over MQTT
                service.on_source_event("porch", "online")
                sub.wait_for("reflectworld/porch/status", b"online")
                offline = service.on_source_event("porch", "offline", "connection refused")
                assert offline is not None and offline.decision == "sent"
                assert service.delivery.drain(30)
                sub.wait_for("reflectworld/porch/status", b"offline")
                porch = json.loads(sub.wait_for("reflectworld/porch/event")[1])
                assert porch["rule_id"] == "rule_source_offline" and "connection refused" in porch["message"]

                # Home Assistant restarting asks for discovery again
                before = sum(1 for m in sub.messages if m[0].endswith("porch_online/config"))
                sub.client.publish("homeassistant/status", "online", qos=1).wait_for_publish(5)
                deadline = time.monotonic() + 10
                while sum(1 for m in sub.messages if m[0].endswith("porch_online/config")) == before:
                    assert time.monotonic() < deadline, "discovery was not re-announced"
                    time.sleep(0.05)
            finally:
                service.close()
        sub.wait_for("reflectworld/availability", b"offline")
    finally:
        sub.close()

    # what a Home Assistant connecting now sees: the retained state (a live subscriber's copies are never
    # flagged retained, a new subscriber's replay is)
    late = Subscriber(broker)
    try:
        assert late.wait_for("reflectworld/availability")[1:] == (b"offline", True)
        assert late.wait_for("reflectworld/porch/status")[1:] == (b"offline", True)
        assert late.wait_for("homeassistant/image/rw-test/door_snapshot/config")[2]
        assert late.wait_for("reflectworld/door/snapshot")[1][:3] == b"\xff\xd8\xff"
    finally:
        late.close()


def test_a_killed_server_reads_offline_through_its_last_will(broker: int) -> None:
    sub = Subscriber(broker)
    code = ("import sys, time\n"
            "from plugin.acting.mqtt import MqttChannel, MqttChannelConfig\n"
            f"ch = MqttChannel(MqttChannelConfig(host='127.0.0.1', port={broker}, client_id='rw-will')).start(['yard'])\n"
            "assert ch.wait_connected(10)\n"
            "print('ready', flush=True)\n"
            "time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        sub.wait_for("reflectworld/availability", b"online")
        proc.kill()  # no clean disconnect: the broker publishes the will
        proc.wait(10)
        assert sub.wait_for("reflectworld/availability", b"offline")[1] == b"offline"
    finally:
        if proc.poll() is None:
            proc.kill()
        sub.close()


def test_notification_to_an_unreachable_broker_is_recorded_failed(tmp_path: Path) -> None:
    manifest = parse_manifest({
        "notifications": {"channels": {"mqtt": {"host": "127.0.0.1", "port": free_port(), "timeout_s": 0.5}},
                          "policy": {"channels": ["poll", "mqtt"]}},
        "rules": [{"text": "Lin is at the door", "conditions": {"entities": ["Lin"]}}],
    })
    with MemoryStore(str(tmp_path / "lancedb"), HashEmbedder(64)) as store:
        service = NotificationService.for_manifest(store, manifest)
        try:
            [decision] = service.on_commit(door_segment())
            assert service.delivery is not None and service.delivery.drain(30)
            stored = service.procedural.get_decision(decision.id)
            assert stored is not None and stored.channels == {"poll": "delivered", "mqtt": "failed"}
        finally:
            service.close()
