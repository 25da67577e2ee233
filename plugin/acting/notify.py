"""The deterministic notification resolver: rule signals + policy + short-term record → decisions.

A rule match is evidence, not a trigger. For every signal (from the local matcher on each
committed segment, later from the VLM, or a live source going offline/back) the resolver decides,
in this order, and stores the decision with its reason (``notifications`` table):

1. ``threshold``   — the rule's severity is below the camera policy's ``min_severity``;
2. ``duplicate``   — the same rule × entity already notified this event: the previous match ended
   at most ``event_gap_s`` before this one started (or this very segment was decided before);
3. ``cooldown``    — the last delivery for rule × entity was less than the rule's ``cooldown_s`` ago;
4. ``quiet_hours`` — inside the policy's quiet hours, unless the rule is ``critical``;
5. ``no_channel``  — the policy names no channel;
6. ``sent``        — delivered to the policy's channels (poll/resource always, HTTP ones queued).

Times are the segment's wall clock (for files: mtime + media time), so re-ingesting a file gives
the same decisions. Decision ids derive from rule × entity × segment, so a replayed segment
returns the stored decision and never re-delivers. The short-term record (per rule × entity ×
camera: last delivery, end of the last match) lives in memory and is seeded from the store.

The policy of a camera: one set with ``notify_policy`` for that camera, else the manifest's
``notifications.cameras[camera]``, else one set with ``notify_policy`` for ``"*"``, else the
manifest's ``notifications.policy``.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio

from memory.errors import NotFoundError
from memory.models import SegmentWrite, stable_id
from memory.procedural import (
    NotificationRecord,
    NotifyPolicy,
    ProceduralMemory,
    Rule,
    RuleConditions,
    severity_rank,
    to_notification,
)
from memory.store.facade import MemoryStore
from perception.detectors.objects import detector_labels
from perception.rules.compiler import CompiledRule, compile_rule, rephrase_help
from perception.rules.matcher import Box, KeyframeBoxes, RuleMatcher, RuleSignal, in_time_window
from plugin.acting.delivery import (
    DeliveryWorker,
    DirectChannel,
    HttpChannel,
    NotificationHub,
    NtfyChannel,
    OpenClawChannel,
    WebhookChannel,
    run_publisher,
)
from plugin.manifest import Manifest, NotificationsConfig, NotifyPolicyConfig

__all__ = [
    "NotificationService",
    "build_channels",
    "chain_commits",
    "policy_from_config",
    "serve_notifications",
    "watch_store",
]

logger = logging.getLogger(__name__)

#: how often the server looks for notifications sent by other processes sharing the store
STORE_WATCH_S = 2.0

#: pseudo-rules for live source events
SOURCE_OFFLINE = Rule(id="rule_source_offline", text="a live source went offline", severity="warning", cooldown_s=0)
SOURCE_ONLINE = Rule(id="rule_source_online", text="a live source is back online", severity="info", cooldown_s=0)


@dataclass
class _Recent:
    """Short-term record of one rule × entity × camera."""

    last_sent: float | None = None
    last_match_end: float | None = None
    event_sent: bool = False


def policy_from_config(camera: str, cfg: NotifyPolicyConfig) -> NotifyPolicy:
    """The memory-level policy for ``camera`` from a manifest policy section."""
    data = cfg.model_dump()
    return NotifyPolicy.model_validate({**data, "camera_id": camera})


def build_channels(cfg: NotificationsConfig) -> dict[str, HttpChannel | DirectChannel]:
    """Delivery channels named in the manifest (secrets already substituted from ``${ENV}``)."""
    ch = cfg.channels
    out: dict[str, HttpChannel | DirectChannel] = {}
    if ch.mqtt is not None:
        from plugin.acting.mqtt import MqttChannel

        out["mqtt"] = MqttChannel(ch.mqtt)
    if ch.webhook is not None:
        out["webhook"] = WebhookChannel(ch.webhook.url, ch.webhook.secret.get_secret_value())
    if ch.openclaw is not None:
        out["openclaw"] = OpenClawChannel(ch.openclaw.url, ch.openclaw.token.get_secret_value())
    if ch.ntfy is not None:
        out["ntfy"] = NtfyChannel(ch.ntfy.url, ch.ntfy.token.get_secret_value() if ch.ntfy.token else "")
    return out


class NotificationService:
    """Rules evaluation + resolver + delivery for one store; safe to call from several threads."""

    def __init__(self, store: MemoryStore, manifest: Manifest, hub: NotificationHub | None = None,
                 delivery: DeliveryWorker | None = None, matcher: RuleMatcher | None = None,
                 clock: Callable[[], float] = time.time, vlm: bool = False) -> None:
        self.procedural = ProceduralMemory(store)
        #: a VLM judges text-only rules (its rule signals reach the resolver)
        self.vlm = vlm
        self.cameras = [s.camera_id for s in manifest.sources if s.camera_id]
        p = manifest.perception
        self.labels = detector_labels(p.object_model, p.object_labels, p.object_type) if p.objects_on else []
        self.config = manifest.notifications
        self.hub = hub or NotificationHub()
        self.delivery = delivery
        self.matcher = matcher or RuleMatcher(box_provider=_lazy_boxes(p))
        self.clock = clock
        self._lock = threading.RLock()
        self._recent: dict[tuple[str, str, str], _Recent] = {}
        self._sources: dict[str, str] = {}
        #: legacy (2025-era) MCP sessions that get resource-updated pushes (see tools/notify.py)
        self.legacy_sessions: set[Any] = set()
        #: the MQTT channel (also told every source's online/offline), when configured
        self.mqtt: Any = None
        #: ids this process sent lately (the store watcher publishes only other processes' ones)
        self.local_sent: deque[str] = deque(maxlen=1000)
        for rule in manifest.rules:
            conditions = RuleConditions.model_validate(rule.conditions) if rule.conditions else None
            try:
                self.add_rule(rule.text, rule.cameras, conditions, rule.severity, rule.cooldown_s, rule.enabled)
            except ValueError as exc:
                logger.error("manifest rule %r is not active: %s", rule.text, exc)

    @classmethod
    def for_manifest(cls, store: MemoryStore, manifest: Manifest, hub: NotificationHub | None = None,
                     start_delivery: bool = True, vlm: bool = False) -> NotificationService:
        """Build the service with the manifest's HTTP channels (delivery thread started when asked)."""
        service = cls(store, manifest, hub=hub, vlm=vlm)
        channels = build_channels(manifest.notifications)
        if channels:
            ch = manifest.notifications.channels
            service.delivery = DeliveryWorker(channels, on_status=service.procedural.set_channel_status,
                                              already_delivered=service._delivered, max_attempts=ch.max_attempts,
                                              backoff_s=ch.backoff_s, timeout_s=ch.timeout_s)
            service.mqtt = channels.get("mqtt")
            if start_delivery:
                service.delivery.start()
                if service.mqtt is not None:
                    known = [s.camera_id for s in store.ingest_sources() if s.camera_id]
                    service.mqtt.start([*service.cameras, *known])
        return service

    def close(self, drain_s: float = 0.0) -> None:
        """Stop delivery, first waiting up to ``drain_s`` for queued notifications."""
        if self.delivery is not None:
            if drain_s > 0 and not self.delivery.drain(drain_s):
                logger.warning("notifications still queued after %.0fs; they are not delivered", drain_s)
            self.delivery.stop()
        if self.mqtt is not None:
            self.mqtt.stop()

    # ------------------------------------------------------------------ policy and rules

    def policy(self, camera: str) -> NotifyPolicy:
        """The effective policy of ``camera`` (see the module docstring for the order)."""
        stored = self.procedural.stored_policy(camera)
        if stored is None and camera not in self.config.cameras:
            stored = self.procedural.stored_policy("*")
        if stored is not None:
            return stored.model_copy(update={"camera_id": camera})
        return policy_from_config(camera, self.config.cameras.get(camera, self.config.policy))

    def active_rules(self, camera: str) -> list[Rule]:
        """Enabled rules in scope for ``camera`` — their text goes into the VLM prompt."""
        return self.procedural.active_rules(camera)

    def compile(self, text: str) -> CompiledRule:
        """What the local compiler makes of a rule's text, with today's names, cameras and detector classes."""
        names: list[str] = []
        for entity in self.procedural.store.list_entities(limit=10_000):
            names.extend(n for n in [entity.name, *entity.aliases] if n)
        cameras = {*self.cameras, *(s.camera_id for s in self.procedural.store.ingest_sources() if s.camera_id)}
        return compile_rule(text, names=names, cameras=sorted(cameras), labels=self.labels)

    def add_rule(self, text: str, cameras: list[str] | None = None, conditions: RuleConditions | None = None,
                 severity: str = "info", cooldown_s: float = 300.0, enabled: bool = True) -> Rule:
        """Store a rule; without ``conditions`` its text is compiled into them where it can be.

        A rule the compiler understands completely is evaluated locally. One it understands in part
        is judged by the VLM when one is configured, else evaluated on the understood part (the
        rule's ``conditions.needs_vlm`` says what is ignored).

        Raises:
            ValueError: nothing of the text was understood and no VLM is configured (nothing stored);
                the message says how to rephrase it.
        """
        key = None
        if conditions is None or conditions.is_empty():
            compiled = self.compile(text)
            cond = compiled.conditions
            if cond.is_empty() and not self.vlm:
                raise ValueError(f"cannot act on the rule {text.strip()[:120]!r} without a vision-language model: "
                                 f"nothing in it is a condition the local compiler knows; {rephrase_help(self.labels)}")
            if self.vlm and not compiled.complete:  # the model judges the whole text; keep what was understood
                cond = RuleConditions(understood=cond.understood, needs_vlm=cond.needs_vlm)
            key = (list(cameras or []), RuleConditions())  # one id per text, however it is read over time
            conditions = cond
            cameras = sorted({*(cameras or []), *compiled.cameras})
        return self.procedural.add_rule(text, cameras, conditions, severity, cooldown_s, enabled,  # type: ignore[arg-type]
                                        key=key)

    def could_match(self, camera: str, people: int, objects: Sequence[str]) -> bool:
        """Whether an active rule of ``camera`` could match a segment like the last one (never skip it)."""
        have = {o.lower() for o in objects}
        for rule in self.active_rules(camera):
            cond = rule.conditions
            if cond.is_empty():
                if self.vlm:
                    return True
                continue
            if cond.entities and people > 0 and cond.absent_minutes is None:
                return True
            if cond.objects and have & {o.lower() for o in cond.objects}:
                return True
        return False

    # ------------------------------------------------------------------ inputs

    def on_commit(self, write: SegmentWrite) -> list[NotificationRecord]:
        """Evaluate the camera's rules on a committed segment and resolve every signal.

        Local conditions are evaluated on the identity-phase (or only) write; the VLM's rule
        signals, wherever they come, apply to the rules without local conditions.
        """
        rules = {r.id: r for r in self.active_rules(write.camera_id)}
        if not rules:
            return []
        signals = [] if write.enrichment else self.matcher.evaluate(write, list(rules.values()),
                                                                    seen_before=self._seen_before)
        signals.extend(self._vlm_signals(write, rules.values()))
        return [self.resolve(s, rules[s.rule_id], write) for s in signals]

    def _vlm_signals(self, write: SegmentWrite, rules: Iterable[Rule]) -> list[RuleSignal]:
        """The VLM's matched rules as signals; the people involved are the resolver's, never the VLM's."""
        if not write.vlm_signals:
            return []
        by_text = {_text_key(r.text): r for r in rules if r.conditions.is_empty()}
        trace = write.trace
        out: list[RuleSignal] = []
        for claim in write.vlm_signals:
            rule = by_text.get(_text_key(claim.rule))
            if rule is None or any(s.rule_id == rule.id for s in out):
                continue
            evidence = [f"vision model: {claim.evidence}" if claim.evidence else "vision model: matched"]
            if write.risk not in ("", "none"):
                evidence.append(f"risk {write.risk}")
            if trace.entity_ids:
                evidence.append("present: " + ", ".join(trace.entity_ids))
            out.append(RuleSignal(rule_id=rule.id, camera_id=write.camera_id, entity_id="*", trace_id=trace.id,
                                  t_start=trace.t_start, wall_start=trace.wall_start,
                                  wall_end=trace.wall_start + max(0.0, trace.t_end - trace.t_start),
                                  evidence=evidence, keyframe_id=trace.keyframe_ids[0] if trace.keyframe_ids else "",
                                  origin="vlm", entities=list(trace.entity_ids)))
        return out

    def on_source_event(self, camera_id: str, state: str, detail: str = "") -> NotificationRecord | None:
        """A live source went ``"offline"`` or came back ``"online"``; notify the change once."""
        with self._lock:
            previous = self._sources.get(camera_id)
            self._sources[camera_id] = state
        if self.mqtt is not None:
            self.mqtt.source_state(camera_id, state)
        if state == "online" and previous != "offline":
            return None  # first connection, or already online: nothing to tell
        rule = SOURCE_OFFLINE if state == "offline" else SOURCE_ONLINE
        if state == previous:
            return None  # a repeated offline report during the same outage
        now = self.clock()
        what = "went offline" if state == "offline" else "is back online"
        signal = RuleSignal(rule_id=rule.id, camera_id=camera_id, entity_id=camera_id, trace_id=f"src_{now:.3f}",
                            wall_start=now, wall_end=now, evidence=[f"source {what}" + (f": {detail}" if detail
                                                                                         else "")], origin="source")
        return self.resolve(signal, rule)

    # ------------------------------------------------------------------ the resolver

    def resolve(self, signal: RuleSignal, rule: Rule, write: SegmentWrite | None = None, *, message: str | None = None,
                payload: dict[str, Any] | None = None) -> NotificationRecord:
        """Decide what to do with one signal, store the decision and deliver it when sent.

        ``message`` replaces the rule's text in the notification (a reminder's own words); ``payload``
        adds facts to it (the memories a reminder came from).
        """
        with self._lock:
            decision_id = stable_id("ntf_", self.procedural.store.user_id, rule.id, signal.entity_id,
                                    signal.trace_id or f"{signal.wall_start:.3f}")
            existing = self.procedural.get_decision(decision_id)
            if existing is not None:
                return existing  # a replayed segment: decided (and delivered) before
            policy = self.policy(signal.camera_id)
            key = (rule.id, signal.entity_id, signal.camera_id)
            recent = self._recent.get(key) or self._seed(key)
            continuing = (recent.last_match_end is not None
                          and signal.wall_start - recent.last_match_end <= policy.event_gap_s)
            if not continuing:
                recent.event_sent = False
            reason = self._reason(signal, rule, policy, recent, continuing)
            recent.last_match_end = max(signal.wall_end, recent.last_match_end or signal.wall_end)
            if reason == "sent":
                recent.last_sent, recent.event_sent = signal.wall_start, True
            self._recent[key] = recent
            rec = self._record(decision_id, signal, rule, policy, reason, message, payload)
        if reason == "sent":
            self._deliver(rec, signal, rule, policy, write)
        logger.info("rule %s × %s on %s: %s (%s)", rule.id, signal.entity_id, signal.camera_id, rec.decision, reason)
        return rec

    def _reason(self, signal: RuleSignal, rule: Rule, policy: NotifyPolicy, recent: _Recent, continuing: bool) -> str:
        if severity_rank(rule.severity) < severity_rank(policy.min_severity):
            return "threshold"
        if continuing and recent.event_sent:
            return "duplicate"
        if recent.last_sent is not None and signal.wall_start - recent.last_sent < rule.cooldown_s:
            return "cooldown"
        if (policy.quiet_hours is not None and rule.severity != "critical"
                and in_time_window(signal.wall_start, policy.quiet_hours, policy.timezone)):
            return "quiet_hours"
        if not policy.channels:
            return "no_channel"
        return "sent"

    def _seed(self, key: tuple[str, str, str]) -> _Recent:
        last = self.procedural.last_sent(*key)
        return _Recent(last_sent=last.event_time if last else None)

    def _record(self, decision_id: str, signal: RuleSignal, rule: Rule, policy: NotifyPolicy, reason: str,
                message: str | None = None, payload: dict[str, Any] | None = None) -> NotificationRecord:
        sent = reason == "sent"
        channels: dict[str, str] = {}
        if sent:
            for name in policy.channels:
                if name == "poll":
                    channels[name] = "delivered"
                elif self.delivery is not None and name in self.delivery.channels:
                    channels[name] = "queued"
                else:
                    channels[name] = "unconfigured"
                    logger.warning("policy of %s names channel %r but notifications.channels has no %s section",
                                   signal.camera_id, name, name)
        evidence = "; ".join(signal.evidence)
        if message is None:
            message = f"[{rule.severity}] {signal.camera_id}: {rule.text}" + (f" — {evidence}" if evidence else "")
        rec = NotificationRecord(
            id=decision_id, seq=self.procedural.next_seq(), rule_id=rule.id, trace_id=signal.trace_id,
            camera_id=signal.camera_id, entity_id=signal.entity_id, severity=rule.severity,
            decision="sent" if sent else "suppressed", reason=reason, message=message, event_time=signal.wall_start,
            keyframe_id=signal.keyframe_id, channels=channels, created_at=self.clock(),
            payload={**(payload or {}), "rule_text": rule.text, "evidence": signal.evidence,
                     "t_start": signal.t_start, "origin": signal.origin, "entities": signal.entities})
        return self.procedural.record(rec)

    def _deliver(self, rec: NotificationRecord, signal: RuleSignal, rule: Rule, policy: NotifyPolicy,
                 write: SegmentWrite | None) -> None:
        self.local_sent.append(rec.id)
        self.hub.publish()
        http = [c for c, status in rec.channels.items() if status == "queued"]
        if not http or self.delivery is None:
            return
        jpeg = None
        if policy.attach_keyframe and write is not None and rec.keyframe_id:
            frame = next((k for k in write.keyframes if k.id == rec.keyframe_id), None)
            jpeg = base64.b64encode(frame.jpeg).decode("ascii") if frame is not None else None
        queued = self.delivery.submit(to_notification(rec, jpeg), http)
        for name in set(http) - set(queued):
            self.procedural.set_channel_status(rec.id, name, "dropped")

    def _delivered(self, decision_id: str, channel: str) -> bool:
        rec = self.procedural.get_decision(decision_id)
        return rec is not None and rec.channels.get(channel) == "delivered"

    def _seen_before(self, ref: str) -> float | None:
        """Stored last sighting of an entity id (for absence rules after a restart)."""
        try:
            return self.procedural.store.get_entity(ref).last_seen or None
        except NotFoundError:  # names and unknown ids: absence counts from the camera's first segment
            return None


def _text_key(text: str) -> str:
    return " ".join(text.lower().split()).strip(" .!?")


def _object_detector(settings: Any) -> Any:
    """The manifest's object detector (the one that filled trace.objects), or None where unavailable."""
    try:
        from perception.detectors.backends import object_detector
    except ImportError:
        logger.warning("object detector unavailable; zone/overlap rules only see face boxes")
        return None
    return object_detector(settings) if settings is not None else None


def _lazy_boxes(settings: Any = None) -> Callable[[SegmentWrite], list[Box]]:
    """A box provider that loads its models only the first time a zone/overlap rule needs boxes."""
    holder: list[KeyframeBoxes] = []

    def provide(write: SegmentWrite) -> list[Box]:
        if not holder:
            holder.append(KeyframeBoxes(objects=_object_detector(settings)))
        return holder[0](write)

    return provide


def chain_commits(*hooks: Callable[[SegmentWrite], Any] | None) -> Callable[[SegmentWrite], None]:
    """One ``on_commit`` callback that calls every given hook in order (``None`` entries are skipped).

    A failing hook is logged with its traceback and the others still run: post-commit work (rules,
    consolidation) must never stop ingestion, whose segment is already committed.
    """
    active = [h for h in hooks if h is not None]

    def on_commit(write: SegmentWrite) -> None:
        for hook in active:
            try:
                hook(write)
            except Exception:  # the hook boundary: log and carry on
                logger.exception("post-commit hook %r failed for segment %d", hook, write.segment_index)

    return on_commit


@asynccontextmanager
async def serve_notifications(service: NotificationService, bus: Any) -> AsyncIterator[NotificationService]:
    """Publish a running service's notifications for a server's lifespan (resource-updated events).

    The service itself (and its delivery thread) belongs to the engine; this only runs the
    publisher and the watcher for notifications other processes sent through the same store.
    """
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(run_publisher, service.hub, bus, service.legacy_sessions)
        tasks.start_soon(watch_store, service, STORE_WATCH_S)
        try:
            yield service
        finally:
            tasks.cancel_scope.cancel()


async def watch_store(service: NotificationService, interval_s: float) -> None:
    """Forever: publish a change when another process (e.g. ``reflectworld ingest``) sent notifications."""
    newest = await anyio.to_thread.run_sync(lambda: service.procedural.decisions(0, "sent", limit=1, newest=True))
    cursor = newest[0].seq if newest else 0
    while True:
        await anyio.sleep(interval_s)
        new = await anyio.to_thread.run_sync(service.procedural.decisions, cursor, "sent")
        if new:
            cursor = max(r.seq for r in new)
            if any(r.id not in service.local_sent for r in new):
                service.hub.publish()
