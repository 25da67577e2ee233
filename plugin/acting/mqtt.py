"""MQTT delivery, the way Frigate and Home Assistant users expect it.

A notification channel (``notifications.channels.mqtt`` in the manifest, ``mqtt`` in a policy's
channel list) that keeps one connection to a broker (paho-mqtt, its own network thread,
reconnecting with backoff). Topics, with ``PREFIX`` = ``topic_prefix`` (default ``reflectworld``)
and ``CAMERA`` = the camera id with anything but letters, digits, ``_`` and ``-`` replaced by ``_``:

==========================================  ========  ======================================================
topic                                       retained  payload
==========================================  ========  ======================================================
``PREFIX/availability``                     yes       ``online`` / ``offline`` (also the last will: a crash
                                                      or a lost connection reads ``offline``)
``PREFIX/notifications``                    no        every sent notification, JSON (the webhook's
                                                      ``notification`` object, without the image)
``PREFIX/CAMERA/event``                     no        the same JSON plus ``event_type`` = its severity
                                                      (``info`` / ``warning`` / ``critical``)
``PREFIX/CAMERA/status``                    yes       ``online`` / ``offline``: the live source's connection
``PREFIX/CAMERA/snapshot``                  yes       the notification's key frame, raw JPEG bytes
==========================================  ========  ======================================================

Home Assistant MQTT discovery (``discovery: true``, prefix ``homeassistant``): for every camera,
retained config messages announce a device "ReflectWorld CAMERA" with four entities — a
``binary_sensor`` (device class ``connectivity``) on ``status``, an ``event`` entity on ``event``
(event types = severities), a ``sensor`` holding the last notification's message, and an
``image`` showing the last snapshot — all tied to ``PREFIX/availability``. Cameras are announced
when the channel connects (the manifest's sources and every camera in memory), when a new camera
first notifies or changes state, and again whenever Home Assistant restarts (``homeassistant/status``
= ``online``).

Delivery is at-least-once (QoS 1 by default): :meth:`MqttChannel.deliver` waits up to ``timeout_s``
for the broker's acknowledgement; a notification published while the broker is unreachable stays
queued in the client and goes out on reconnect, but is recorded ``failed`` if that takes longer.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import threading
from collections.abc import Iterable
from typing import Any

from plugin.manifest_sections import MqttChannelConfig

__all__ = ["MqttChannel", "MqttChannelConfig", "topic_id"]

logger = logging.getLogger(__name__)

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def topic_id(camera_id: str) -> str:
    """``camera_id`` as one topic level and discovery object id."""
    return _UNSAFE.sub("_", camera_id) or "_"


class MqttChannel:
    """One broker connection: notifications, source status and Home Assistant discovery (see the module)."""

    name = "mqtt"

    def __init__(self, config: MqttChannelConfig) -> None:
        import paho.mqtt.client as paho
        from paho.mqtt.enums import CallbackAPIVersion

        self.config = config
        self.base = config.topic_prefix.rstrip("/")
        self.availability = f"{self.base}/availability"
        self._announced: set[str] = set()
        self._cameras: set[str] = set()
        self._states: dict[str, str] = {}
        self._lock = threading.Lock()
        self.connected = threading.Event()
        client = paho.Client(CallbackAPIVersion.VERSION2, client_id=config.client_id, protocol=paho.MQTTv311)
        if config.username:
            client.username_pw_set(config.username, config.password.get_secret_value() if config.password else None)
        if config.tls:
            client.tls_set()
        client.will_set(self.availability, "offline", qos=1, retain=True)
        client.reconnect_delay_set(min_delay=1, max_delay=30)
        client.on_connect = self._on_connect
        client.on_disconnect = self._on_disconnect
        client.on_message = self._on_message
        self.client = client
        self._started = False

    # ------------------------------------------------------------------ lifecycle

    def start(self, cameras: Iterable[str] = ()) -> MqttChannel:
        """Connect in the background (retrying until the broker answers) and announce ``cameras``."""
        with self._lock:
            self._cameras.update(c for c in cameras if c)
        if not self._started:
            self._started = True
            self.client.connect_async(self.config.host, self.config.port, keepalive=self.config.keepalive_s)
            self.client.loop_start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        """Say ``offline`` (retained) and disconnect."""
        if not self._started:
            return
        self._started = False
        if self.connected.is_set():
            info = self.client.publish(self.availability, "offline", qos=1, retain=True)
            info.wait_for_publish(timeout_s)
        self.client.disconnect()
        self.client.loop_stop()

    def wait_connected(self, timeout_s: float) -> bool:
        """Whether the broker accepted the connection within ``timeout_s``."""
        return self.connected.wait(timeout_s)

    # ------------------------------------------------------------------ publishing

    def deliver(self, n: Any) -> str:
        """Publish a sent notification (DeliveryWorker calls this); ``delivered`` once the broker has it."""
        camera = topic_id(n.camera_id)
        self._announce(n.camera_id)
        data = n.model_dump()
        jpeg = data.pop("keyframe_jpeg_base64", None)
        body = json.dumps(data, sort_keys=True)
        event = json.dumps({"event_type": n.severity, **data}, sort_keys=True)
        infos = [self.client.publish(f"{self.base}/notifications", body, qos=self.config.qos),
                 self.client.publish(f"{self.base}/{camera}/event", event, qos=self.config.qos)]
        if jpeg:
            infos.append(self.client.publish(f"{self.base}/{camera}/snapshot", base64.b64decode(jpeg),
                                             qos=self.config.qos, retain=True))
        for info in infos:
            try:
                info.wait_for_publish(self.config.timeout_s)
            except (RuntimeError, ValueError) as exc:  # not queued (client stopping, queue full)
                logger.error("MQTT publish of %s failed: %s", n.id, exc)
                return "failed"
            if not info.is_published():
                logger.error("MQTT broker %s:%d did not take notification %s within %.0f s",
                             self.config.host, self.config.port, n.id, self.config.timeout_s)
                return "failed"
        return "delivered"

    def source_state(self, camera_id: str, state: str) -> None:
        """A live source's connection changed: ``online`` or ``offline`` (retained)."""
        if state not in ("online", "offline"):
            return
        with self._lock:
            self._states[camera_id] = state
        self._announce(camera_id)
        self.client.publish(f"{self.base}/{topic_id(camera_id)}/status", state, qos=1, retain=True)

    # ------------------------------------------------------------------ discovery

    def discovery_configs(self, camera_id: str) -> dict[str, dict[str, Any]]:
        """Topic → Home Assistant discovery config for one camera's entities."""
        camera = topic_id(camera_id)
        node = topic_id(self.config.client_id)
        device = {"identifiers": [f"{node}_{camera}"], "name": f"ReflectWorld {camera_id}",
                  "manufacturer": "ReflectWorld", "model": "camera memory"}
        common = {"availability_topic": self.availability, "payload_available": "online",
                  "payload_not_available": "offline", "device": device}
        root = self.config.discovery_prefix.rstrip("/")
        return {
            f"{root}/binary_sensor/{node}/{camera}_online/config": {
                **common, "name": "Online", "unique_id": f"{node}_{camera}_online", "device_class": "connectivity",
                "state_topic": f"{self.base}/{camera}/status", "payload_on": "online", "payload_off": "offline"},
            f"{root}/event/{node}/{camera}_notification/config": {
                **common, "name": "Notification", "unique_id": f"{node}_{camera}_notification",
                "state_topic": f"{self.base}/{camera}/event", "event_types": ["info", "warning", "critical"]},
            f"{root}/sensor/{node}/{camera}_last_notification/config": {
                **common, "name": "Last notification", "unique_id": f"{node}_{camera}_last_notification",
                "state_topic": f"{self.base}/{camera}/event", "value_template": "{{ value_json.message[:250] }}",
                "json_attributes_topic": f"{self.base}/{camera}/event", "icon": "mdi:cctv"},
            f"{root}/image/{node}/{camera}_snapshot/config": {
                **common, "name": "Snapshot", "unique_id": f"{node}_{camera}_snapshot",
                "image_topic": f"{self.base}/{camera}/snapshot", "content_type": "image/jpeg"},
        }

    def _announce(self, camera_id: str, force: bool = False) -> None:
        with self._lock:
            self._cameras.add(camera_id)
            if not self.config.discovery or (camera_id in self._announced and not force):
                return
            self._announced.add(camera_id)
        for topic, config in self.discovery_configs(camera_id).items():
            self.client.publish(topic, json.dumps(config, sort_keys=True), qos=1, retain=True)

    def _announce_all(self) -> None:
        with self._lock:
            cameras = sorted(self._cameras)
            states = dict(self._states)
        for camera in cameras:
            self._announce(camera, force=True)
        for camera, state in states.items():
            self.client.publish(f"{self.base}/{topic_id(camera)}/status", state, qos=1, retain=True)

    # ------------------------------------------------------------------ paho callbacks (its network thread)

    def _on_connect(self, client: Any, _userdata: Any, _flags: Any, reason_code: Any, _properties: Any) -> None:
        if reason_code.is_failure:
            logger.error("MQTT broker %s:%d refused the connection: %s; check notifications.channels.mqtt",
                         self.config.host, self.config.port, reason_code)
            return
        logger.info("connected to MQTT broker %s:%d", self.config.host, self.config.port)
        client.publish(self.availability, "online", qos=1, retain=True)
        if self.config.discovery:
            client.subscribe(f"{self.config.discovery_prefix.rstrip('/')}/status", qos=1)
        self._announce_all()
        self.connected.set()

    def _on_disconnect(self, _client: Any, _userdata: Any, _flags: Any, reason_code: Any, _properties: Any) -> None:
        self.connected.clear()
        if self._started:
            logger.warning("lost the MQTT broker %s:%d (%s); reconnecting", self.config.host, self.config.port,
                           reason_code)

    def _on_message(self, _client: Any, _userdata: Any, message: Any) -> None:
        if message.payload == b"online":  # Home Assistant restarted: it forgot non-retained state, announce again
            logger.info("Home Assistant came online; announcing cameras again")
            self._announce_all()
