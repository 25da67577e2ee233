"""Delivery channels for sent notifications.

* **Poll / resource** (:class:`NotificationHub`): decisions live in the store; the hub only says
  "something new was sent". ``notify_poll`` waits on it (long-poll), and the server's publisher task
  turns each change into an MCP ``ResourceUpdated("reflectworld://notifications")`` event (2026-era
  ``subscriptions/listen`` streams) and a ``notifications/resources/updated`` on legacy sessions.
* **HTTP** (:class:`DeliveryWorker` with :class:`WebhookChannel`, :class:`OpenClawChannel`,
  :class:`NtfyChannel`): one worker thread, a bounded queue (full → dropped and counted), retries
  with exponential backoff on connection errors, 429 and 5xx, never on other 4xx. Each request
  carries the notification id as ``Idempotency-Key``; a channel already recorded as delivered is
  never sent again (a re-ingested segment or a restart does not re-deliver), so together with the
  key a receiver sees each notification exactly once.

Webhook signature: ``X-ReflectWorld-Signature: sha256=<hex>`` is HMAC-SHA256 with the shared
secret over ``f"{timestamp}.{body}"``, ``timestamp`` being the ``X-ReflectWorld-Timestamp``
header (epoch seconds). Receivers recompute it and compare in constant time (:func:`verify_signature`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import anyio
import anyio.from_thread
import anyio.lowlevel
import httpx
from pydantic import BaseModel, Field

from memory.procedural import NOTIFICATIONS_URI, Notification

__all__ = [
    "NOTIFICATIONS_URI",
    "DeliveryWorker",
    "DirectChannel",
    "HttpChannel",
    "Notification",
    "NotificationHub",
    "NtfyChannel",
    "OpenClawChannel",
    "WebhookChannel",
    "run_publisher",
    "sign",
    "verify_signature",
]

logger = logging.getLogger(__name__)

_NTFY_PRIORITY = {"info": "3", "warning": "4", "critical": "5"}


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """The ``X-ReflectWorld-Signature`` value for ``body`` sent at ``timestamp``."""
    digest = hmac.new(secret.encode("utf-8"), timestamp.encode("ascii") + b"." + body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def verify_signature(secret: str, timestamp: str, body: bytes, signature: str) -> bool:
    """Constant-time check of a received signature (for receivers and tests)."""
    return hmac.compare_digest(sign(secret, timestamp, body), signature)


# ---------------------------------------------------------------------------------- poll / resource


class NotificationHub:
    """Change signal for sent notifications, safe to publish from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._version = 0
        self._waiters: list[tuple[anyio.Event, anyio.lowlevel.EventLoopToken, int]] = []

    @property
    def version(self) -> int:
        """How many notifications were published so far."""
        return self._version

    def publish(self) -> None:
        """Wake every waiter (called after a sent decision is stored)."""
        with self._lock:
            self._version += 1
            waiters, self._waiters = self._waiters, []
        here = threading.get_ident()
        for event, token, thread in waiters:
            try:
                if thread == here:
                    event.set()
                else:
                    anyio.from_thread.run_sync(event.set, token=token)
            except RuntimeError:  # that event loop has finished: nobody is waiting any more
                logger.debug("notification waiter's event loop is gone")

    async def wait_change(self, version: int, timeout: float | None) -> int:
        """Wait until the version differs from ``version`` or ``timeout`` passes; return the version."""
        with self._lock:
            if self._version != version:
                return self._version
            event = anyio.Event()
            self._waiters.append((event, anyio.lowlevel.current_token(), threading.get_ident()))
        with anyio.move_on_after(timeout):
            await event.wait()
        with self._lock:
            self._waiters = [w for w in self._waiters if w[0] is not event]
            return self._version


async def run_publisher(hub: NotificationHub, bus: Any, legacy_sessions: set[Any]) -> None:
    """Forever: turn each hub change into MCP resource-updated events (run in the lifespan's task group)."""
    from mcp.server.subscriptions import ResourceUpdated

    version = hub.version
    while True:
        version = await hub.wait_change(version, None)
        await bus.publish(ResourceUpdated(uri=NOTIFICATIONS_URI))
        for session in list(legacy_sessions):
            try:
                await session.send_resource_updated(NOTIFICATIONS_URI)
            except Exception:  # a closed legacy session: forget it
                logger.debug("dropping a closed legacy session from notification pushes", exc_info=True)
                legacy_sessions.discard(session)


# ---------------------------------------------------------------------------------- HTTP channels


class HttpChannel(Protocol):
    """An HTTP delivery channel: builds one request per notification."""

    name: str

    def request(self, n: Notification) -> tuple[str, dict[str, str], bytes]:
        """Return ``(url, headers, body)`` for ``n``."""
        ...


def _text(n: Notification) -> str:
    frame = f" Key frame {n.keyframe_id} (memory_visual_evidence)." if n.keyframe_id else ""
    return f"{n.message}{frame}"


@dataclass
class WebhookChannel:
    """JSON POST of the notification with an HMAC-SHA256 signature."""

    url: str
    secret: str
    name: str = "webhook"

    def request(self, n: Notification) -> tuple[str, dict[str, str], bytes]:
        body = json.dumps({"type": "reflectworld.notification", "notification": n.model_dump()},
                          sort_keys=True).encode("utf-8")
        timestamp = str(int(time.time()))
        headers = {"Content-Type": "application/json", "Idempotency-Key": n.id, "X-ReflectWorld-Event": "notification",
                   "X-ReflectWorld-Timestamp": timestamp}
        if self.secret:
            headers["X-ReflectWorld-Signature"] = sign(self.secret, timestamp, body)
        return self.url, headers, body


@dataclass
class OpenClawChannel:
    """The OpenClaw gateway hook: ``POST {gateway}/hooks/agent`` with a bearer token."""

    url: str
    token: str
    name: str = "openclaw"

    def request(self, n: Notification) -> tuple[str, dict[str, str], bytes]:
        url = self.url.rstrip("/")
        if not url.endswith("/hooks/agent"):
            url += "/hooks/agent"
        body = json.dumps({"message": f"ReflectWorld notification ({n.severity}): {_text(n)}", "name": "ReflectWorld",
                           "wakeMode": "now", "deliver": True}).encode("utf-8")
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {self.token}", "Idempotency-Key": n.id}
        return url, headers, body


@dataclass
class NtfyChannel:
    """An ntfy-style topic URL: plain-text body, title/priority/tags headers."""

    url: str
    token: str = ""
    name: str = "ntfy"

    def request(self, n: Notification) -> tuple[str, dict[str, str], bytes]:
        headers = {"Title": f"ReflectWorld: {n.camera_id}", "Priority": _NTFY_PRIORITY.get(n.severity, "3"),
                   "Tags": f"{n.severity},camera", "Idempotency-Key": n.id, "Content-Type": "text/plain; charset=utf-8"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return self.url, headers, _text(n).encode("utf-8")


@runtime_checkable
class DirectChannel(Protocol):
    """A channel with a connection of its own (MQTT): delivers one notification, says how it went."""

    name: str

    def deliver(self, n: Notification) -> str:
        """Send ``n``; ``"delivered"`` or ``"failed"``."""
        ...


#: ``status(notification_id, channel, "delivered" | "failed")``
StatusCallback = Callable[[str, str, str], None]
#: ``already_delivered(notification_id, channel) -> bool``
DeliveredCheck = Callable[[str, str], bool]


@dataclass
class DeliveryWorker:
    """A thread delivering notifications to HTTP channels, with retries and backoff."""

    channels: dict[str, HttpChannel | DirectChannel]
    on_status: StatusCallback | None = None
    already_delivered: DeliveredCheck | None = None
    max_attempts: int = 5
    backoff_s: float = 0.5
    max_backoff_s: float = 30.0
    timeout_s: float = 10.0
    queue_size: int = 256
    dropped: int = 0
    attempts: int = 0
    _queue: queue.Queue[tuple[Notification, list[str]]] = field(init=False, repr=False)
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self._queue = queue.Queue(maxsize=self.queue_size)

    def start(self) -> DeliveryWorker:
        """Start the delivery thread (idempotent)."""
        if self._thread is None and self.channels:
            self._thread = threading.Thread(target=self._run, name="reflectworld-delivery", daemon=True)
            self._thread.start()
        return self

    def submit(self, n: Notification, channels: list[str]) -> list[str]:
        """Queue ``n`` for the named channels; returns those queued (unknown names are skipped)."""
        wanted = [c for c in channels if c in self.channels]
        if not wanted:
            return []
        try:
            self._queue.put_nowait((n, wanted))
        except queue.Full:
            self.dropped += 1
            logger.error("delivery queue full (%d); dropped notification %s — are the channels reachable?",
                         self.queue_size, n.id)
            return []
        return wanted

    def drain(self, timeout: float) -> bool:
        """Wait until every queued notification was handled; False when ``timeout`` passed first."""
        deadline = time.monotonic() + timeout
        with self._queue.all_tasks_done:
            while self._queue.unfinished_tasks:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._queue.all_tasks_done.wait(left)
        return True

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread; backoff waits end at once, queued notifications stay undelivered."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        with httpx.Client(timeout=self.timeout_s, follow_redirects=False) as client:
            while not self._stop.is_set():
                try:
                    n, names = self._queue.get(timeout=0.5)
                except queue.Empty:
                    continue
                try:
                    for name in names:
                        if self._stop.is_set():
                            break
                        if self.already_delivered is not None and self.already_delivered(n.id, name):
                            logger.info("notification %s was already delivered to %s; not sending again", n.id, name)
                            continue
                        status = self._deliver(client, self.channels[name], n)
                        if self.on_status is not None:
                            self.on_status(n.id, name, status)
                except Exception:  # the worker's top loop: keep delivering the next notifications
                    logger.exception("delivery of %s failed unexpectedly", n.id)
                finally:
                    self._queue.task_done()

    def _deliver(self, client: httpx.Client, channel: HttpChannel | DirectChannel, n: Notification) -> str:
        if isinstance(channel, DirectChannel):  # keeps its own connection and retries (MQTT)
            return channel.deliver(n)
        url, headers, body = channel.request(n)
        for attempt in range(1, self.max_attempts + 1):
            self.attempts += 1
            try:
                response = client.post(url, headers=headers, content=body)
            except httpx.TransportError as exc:
                problem = f"{type(exc).__name__}: {exc}"
            else:
                if response.status_code < 300:
                    logger.info("delivered %s to %s (attempt %d)", n.id, channel.name, attempt)
                    return "delivered"
                if response.status_code != 429 and response.status_code < 500:
                    logger.error("%s rejected notification %s with HTTP %d; check the %s url/token/secret in the "
                                 "manifest", channel.name, n.id, response.status_code, channel.name)
                    return "failed"
                problem = f"HTTP {response.status_code}"
            if attempt == self.max_attempts:
                break
            delay = min(self.max_backoff_s, self.backoff_s * 2 ** (attempt - 1))
            logger.warning("delivery of %s to %s failed (%s); retry %d/%d in %.1fs", n.id, channel.name, problem,
                           attempt, self.max_attempts - 1, delay)
            if self._stop.wait(delay):
                return "failed"
        logger.error("giving up on notification %s to %s after %d attempts", n.id, channel.name, self.max_attempts)
        return "failed"
