"""Manifest sections whose running side lives in a room of ``plugin/``: the dashboard and the MQTT channel.

They sit beside the manifest's other models so that :mod:`plugin.manifest` imports no room (the
dashboard and the acting side import the manifest, never the other way round).
"""

from __future__ import annotations

from pydantic import Field, SecretStr

from perception.settings import Strict

__all__ = ["DashboardConfig", "MqttChannelConfig"]


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
