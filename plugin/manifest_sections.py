"""Manifest sections whose running side lives in a room of ``plugin/``: the dashboard, the MQTT channel and
proactive reminders.

They sit beside the manifest's other models so that :mod:`plugin.manifest` imports no room (the
dashboard and the acting side import the manifest, never the other way round).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr

from perception.settings import Strict

__all__ = ["DashboardConfig", "MqttChannelConfig", "ProactiveConfig"]


class DashboardConfig(Strict):
    """The web dashboard at ``/`` of the HTTP transport."""

    enabled: bool = Field(True, description="serve the dashboard on the HTTP transport")
    read_only: bool = Field(False, description="pages only: no capture start/stop, identity edits or rule changes")


class MqttChannelConfig(Strict):
    """An MQTT broker (Mosquitto, EMQX, Home Assistant's add-on) for notifications and source status."""

    host: str = Field(description="broker host, e.g. 127.0.0.1 or homeassistant.local")
    port: int = Field(1883, ge=1, le=65535, description="1883, or 8883 with tls")
    username: str | None = Field(None, description="broker user; none = anonymous")
    password: SecretStr | None = Field(None, description="broker password, as ${ENV}")
    tls: bool = Field(False, description="connect with TLS (system CA certificates)")
    client_id: str = Field("reflectworld", min_length=1, max_length=64, description="MQTT client id")
    topic_prefix: str = Field("reflectworld", min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_/-]+$",
                              description="base of every topic this server publishes")
    discovery: bool = Field(True, description="publish Home Assistant MQTT discovery configs")
    discovery_prefix: str = Field("homeassistant", min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_/-]+$",
                                  description="Home Assistant's discovery prefix")
    qos: int = Field(1, ge=0, le=2, description="QoS of notifications (availability and configs use 1)")
    keepalive_s: int = Field(30, ge=5, le=3600, description="MQTT keep-alive")
    timeout_s: float = Field(10.0, gt=0, le=120, description="how long one delivery waits for the broker")


class ProactiveConfig(Strict):
    """Proactive reminders: what is in view reaches what memory says is still to be done."""

    enabled: bool = Field(True, description="speak first: remind from memory when what it concerns is in view")
    cameras: dict[str, bool] = Field(default_factory=dict, max_length=256,
                                     description="per-camera switch, e.g. {door: false}; unlisted cameras follow "
                                     "`enabled`")
    min_score: float = Field(0.5, gt=0, le=1, description="gate: lowest score (match × open loop × recency) said")
    min_object_score: float = Field(0.4, ge=0, le=1, description="gate: weakest detection of an object that counts "
                                    "as in view")
    word_weight: float = Field(0.7, ge=0, le=1, description="gate: match weight of a word spoken or read (a person "
                               "or object in view weighs 1); 0 = words never remind")
    max_age_days: float | None = Field(None, gt=0, description="gate: memories older than this are stale; "
                                       "none = any age")
    cooldown_s: float = Field(600.0, ge=0, le=7 * 86400, description="at most one reminder per person or object "
                              "in view per this many seconds (per camera)")
    respeak_after_days: float | None = Field(None, gt=0, description="the same memory may be said again after "
                                             "this long; none = never (new evidence is said)")
    daily_budget: int = Field(20, ge=0, le=10_000, description="most reminders per camera per day")
    severity: Literal["info", "warning", "critical"] = Field("info", description="severity of reminders "
                                                             "(quiet hours hold back all but critical)")
    generator: Literal["auto", "template"] = Field(
        "auto", description="auto = the chat model (`vlm:`, else `qa:`) writes reminders when configured, with "
        "the local template as fallback; template = always the template")

    def on(self, camera: str) -> bool:
        """Whether reminders run on ``camera``."""
        return self.cameras.get(camera, self.enabled)
