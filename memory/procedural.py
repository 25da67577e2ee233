"""Procedural memory: user rules, per-camera notification policies and notification decisions.

Three kinds of rows live over two tables of the store (``memory/store/schema.py``):

* **Rules** (table ``rules``, ids ``rule_<12 hex>``): the user's rule text (surfaced into the VLM
  prompt), optional structured :class:`RuleConditions` evaluated locally
  (``perception/rules.py``), camera scope, severity, cooldown, enabled flag. The id is derived
  from (text, cameras, conditions), so adding the same rule twice is one row.
* **Policies** (also table ``rules``, ids ``pol_<12 hex>``, ``severity = "policy"``): one
  :class:`NotifyPolicy` per camera (``"*"`` is the default for every camera). They are stored
  beside the rules because both are procedural memory ("how to act"); listing rules skips them.
* **Decisions** (table ``notifications``, ids ``ntf_<12 hex>``): every decision of the
  notification resolver, sent or suppressed, with its reason, the per-channel delivery status and
  a ``seq`` cursor (microseconds since the epoch, strictly increasing per process) for long-polls.

Everything here is blocking; async callers use ``anyio.to_thread.run_sync``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .models import Record, stable_id
from .search.modes import sql_literal
from .store.facade import MemoryStore

__all__ = [
    "NOTIFICATIONS_URI",
    "SEVERITIES",
    "Decision",
    "Notification",
    "NotificationRecord",
    "NotifyPolicy",
    "ProceduralMemory",
    "QuietHours",
    "Rule",
    "RuleConditions",
    "Severity",
    "TimeWindow",
    "severity_rank",
    "to_notification",
]

logger = logging.getLogger(__name__)

Severity = Literal["info", "warning", "critical"]
SEVERITIES: tuple[str, ...] = ("info", "warning", "critical")
Decision = Literal["sent", "suppressed"]
Reason = Literal["sent", "cooldown", "quiet_hours", "threshold", "duplicate", "no_channel"]

_HHMM = r"^([01]\d|2[0-3]):[0-5]\d$"


def severity_rank(severity: str) -> int:
    """0 for info, 1 for warning, 2 for critical (unknown values rank as info)."""
    return SEVERITIES.index(severity) if severity in SEVERITIES else 0


class TimeWindow(BaseModel):
    """A daily window of local time, ``HH:MM``–``HH:MM``; ``start > end`` wraps past midnight."""

    model_config = ConfigDict(extra="forbid")

    start: str = Field(pattern=_HHMM, description="local time the window opens, e.g. 22:00")
    end: str = Field(pattern=_HHMM, description="local time the window closes, e.g. 06:30")


QuietHours = TimeWindow


#: the MCP resource under which sent notifications are published
NOTIFICATIONS_URI = "reflectworld://notifications"


class RuleConditions(BaseModel):
    """Structured conditions evaluated locally on every committed segment; all given ones must hold.

    ``entities`` matches entity ids or display names/aliases (case-insensitive); ``"*"`` matches
    any entity. ``objects`` matches detected object classes (``trace.objects``). ``zone`` and
    ``overlap`` need boxes (see ``perception/rules.py`` for where boxes come from).
    """

    model_config = ConfigDict(extra="forbid")

    entities: list[str] = Field(default_factory=list, max_length=64, description="entity ids or names; '*' = anyone")
    objects: list[str] = Field(default_factory=list, max_length=64, description="object classes, e.g. ['dog', 'couch']")
    objects_mode: Literal["any", "all"] = Field("any", description="any/all of `objects` must be present")
    overlap: list[tuple[str, str]] = Field(default_factory=list, max_length=32,
                                           description="label pairs whose boxes must overlap, e.g. [['dog','couch']]")
    zone: list[tuple[Annotated[float, Field(ge=0, le=1)], Annotated[float, Field(ge=0, le=1)]]] | None = Field(
        None, min_length=3, max_length=64, description="polygon of normalised (x, y) points in [0, 1]; a matching box centre must lie inside")
    time_window: TimeWindow | None = Field(None, description="only at these local times")
    timezone: str | None = Field(None, description="IANA zone for time_window, e.g. Europe/Paris; default: local")
    absent_minutes: float | None = Field(
        None, gt=0, le=7 * 24 * 60, description="fires when none of `entities` was seen for this many minutes")
    unknown_people: bool = Field(False, description="only people without a name (strangers) match `entities`")
    said: list[str] = Field(default_factory=list, max_length=8,
                            description="phrases, any of which must be in the segment's transcript")
    text_read: list[str] = Field(default_factory=list, max_length=8,
                                 description="phrases, any of which must be in the text read on screen")
    understood: list[str] = Field(default_factory=list, description="how the rule's text was read (informational)")
    needs_vlm: list[str] = Field(default_factory=list,
                                 description="parts of the text only a VLM can judge (informational)")

    def is_empty(self) -> bool:
        """True when the rule has no locally evaluable condition (text only: for the VLM)."""
        return not (self.entities or self.objects or self.overlap or self.zone or self.time_window
                    or self.absent_minutes or self.said or self.text_read)


class Rule(Record):
    """A user rule: text for the VLM prompt plus optional local conditions."""

    id: str = Field(description="rule_<12 hex>")
    text: str
    conditions: RuleConditions = Field(default_factory=RuleConditions)
    camera_ids: list[str] = Field(default_factory=list, description="empty = every camera")
    severity: Severity = "info"
    cooldown_s: float = Field(300.0, ge=0)
    enabled: bool = True
    created_at: float = 0.0

    def applies_to(self, camera_id: str) -> bool:
        """Whether the rule is in scope for ``camera_id``."""
        return not self.camera_ids or camera_id in self.camera_ids


class NotifyPolicy(BaseModel):
    """Per-camera notification policy (camera ``"*"`` is the default for every camera)."""

    model_config = ConfigDict(extra="forbid")

    camera_id: str = "*"
    channels: list[str] = Field(default_factory=lambda: ["poll"],
                                description="poll, webhook, openclaw, ntfy (those configured)")
    min_severity: Severity = Field("info", description="rules below this severity are suppressed")
    quiet_hours: QuietHours | None = Field(None, description="suppress below critical in this daily window")
    timezone: str | None = Field(None, description="IANA zone of quiet_hours; default: the server's local zone")
    event_gap_s: float = Field(60.0, ge=0, le=86400,
                               description="matches closer than this belong to one event (later ones: duplicate)")
    attach_keyframe: bool = Field(True, description="attach the key frame (base64) to webhook payloads")
    proactive: bool = Field(True, description="proactive reminders from memory on this camera (false = muted)")


class NotificationRecord(Record):
    """One decision of the notification resolver, sent or suppressed, with its reason."""

    id: str = Field(description="ntf_<12 hex>, derived from rule × entity × trace")
    seq: int = Field(0, description="cursor for notify_poll: microseconds since the epoch, increasing")
    rule_id: str
    trace_id: str = ""
    camera_id: str
    entity_id: str = Field("", description="dedup key: the matched entity id, or '*'")
    severity: Severity = "info"
    decision: Decision
    reason: Reason
    message: str = ""
    event_time: float = Field(0.0, description="wall-clock epoch seconds of the matched segment")
    keyframe_id: str = ""
    channels: dict[str, str] = Field(default_factory=dict, description="channel → queued/delivered/failed")
    payload: dict[str, Any] = Field(default_factory=dict, description="extra facts (evidence, rule text…)")
    created_at: float = 0.0


class ProceduralMemory:
    """Rules, policies and notification decisions over an open :class:`MemoryStore`."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self._seq_lock = threading.Lock()
        self._last_seq = 0
        #: (rules table version, its rules): every segment asks for the rules twice, and reading the
        #: version costs a hundredth of a scan; any writer, in any process, makes a new version
        self._rules: tuple[int, list[Rule]] | None = None

    # ------------------------------------------------------------------ rules

    def add_rule(self, text: str, camera_ids: list[str] | None = None, conditions: RuleConditions | None = None,
                 severity: Severity = "info", cooldown_s: float = 300.0, enabled: bool = True,
                 key: tuple[list[str], RuleConditions] | None = None) -> Rule:
        """Store a rule (idempotent on text × cameras × conditions) and return it.

        ``key`` gives the cameras and conditions the id derives from when they differ from the stored
        ones (a rule compiled from its text keeps one id however the compiler reads it over time).
        """
        if not text.strip():
            raise ValueError("rule text is empty; describe what should be noticed, e.g. 'a person at the door'")
        cams = sorted(set(camera_ids or []))
        cond = conditions or RuleConditions()
        key_cams, key_cond = key if key is not None else (cams, cond)
        rule_id = stable_id("rule_", self.store.user_id, text.strip(), ",".join(sorted(set(key_cams))),
                            key_cond.model_dump_json())
        existing = self.get_rule(rule_id)
        rule = Rule(id=rule_id, text=text.strip(), conditions=cond, camera_ids=cams, severity=severity,
                    cooldown_s=cooldown_s, enabled=enabled,
                    created_at=existing.created_at if existing else time.time())
        self.store.upsert_rows("rules", [_rule_row(rule)])
        return rule

    def get_rule(self, rule_id: str) -> Rule | None:
        """The rule ``rule_id``, or None."""
        rows = self.store.scan_rows("rules", f"id = {sql_literal(rule_id)}", limit=1)
        return _rule_from_row(rows[0]) if rows and rule_id.startswith("rule_") else None

    def list_rules(self, camera: str | None = None, include_disabled: bool = True) -> list[Rule]:
        """Rules (oldest first), optionally only those in scope for ``camera``."""
        version = self.store.table_version("rules")
        cached = self._rules
        if cached is None or cached[0] != version:
            cached = self._rules = (version, [_rule_from_row(r) for r in self.store.scan_rows("rules", "id LIKE 'rule_%'")])
        rules = [r for r in cached[1] if (include_disabled or r.enabled) and (camera is None or r.applies_to(camera))]
        return sorted(rules, key=lambda r: (r.created_at, r.id))

    def active_rules(self, camera: str) -> list[Rule]:
        """Enabled rules in scope for ``camera`` (what the matcher and the VLM prompt use)."""
        return self.list_rules(camera=camera, include_disabled=False)

    def remove_rule(self, rule_id: str) -> bool:
        """Delete a rule; False when there was none (its past decisions are kept)."""
        if not rule_id.startswith("rule_"):
            return False
        return self.store.delete_rows("rules", f"id = {sql_literal(rule_id)}") > 0

    # ------------------------------------------------------------------ policies

    def set_policy(self, policy: NotifyPolicy) -> NotifyPolicy:
        """Store the policy of ``policy.camera_id`` (replacing the previous one)."""
        row = {"id": _policy_id(policy.camera_id), "text": "", "conditions_json": policy.model_dump_json(),
               "camera_ids": [policy.camera_id], "severity": "policy", "cooldown_s": 0.0, "enabled": True,
               "created_at": time.time()}
        self.store.upsert_rows("rules", [row])
        return policy

    def stored_policy(self, camera: str) -> NotifyPolicy | None:
        """The policy stored for exactly ``camera`` (``"*"`` = the default), or None."""
        rows = self.store.scan_rows("rules", f"id = {sql_literal(_policy_id(camera))}", limit=1)
        return NotifyPolicy.model_validate_json(rows[0]["conditions_json"]) if rows else None

    # ------------------------------------------------------------------ decisions

    def next_seq(self) -> int:
        """A strictly increasing cursor value (microseconds since the epoch)."""
        with self._seq_lock:
            self._last_seq = max(self._last_seq + 1, time.time_ns() // 1000)
            return self._last_seq

    def record(self, rec: NotificationRecord) -> NotificationRecord:
        """Store (insert or replace) one decision."""
        self.store.upsert_rows("notifications", [_notification_row(rec)])
        return rec

    def get_decision(self, decision_id: str) -> NotificationRecord | None:
        """The decision ``decision_id``, or None."""
        rows = self.store.scan_rows("notifications", f"id = {sql_literal(decision_id)}", limit=1)
        return _notification_from_row(rows[0]) if rows else None

    def set_channel_status(self, decision_id: str, channel: str, status: str) -> None:
        """Record the delivery status of one channel of a decision."""
        rec = self.get_decision(decision_id)
        if rec is None:
            logger.warning("delivery status for unknown notification %s (%s=%s)", decision_id, channel, status)
            return
        self.record(rec.model_copy(update={"channels": {**rec.channels, channel: status}}))

    def decisions(self, since_seq: int = 0, decision: Decision | None = None, camera: str | None = None,
                  rule_id: str | None = None, limit: int = 100, newest: bool = False) -> list[NotificationRecord]:
        """Decisions with ``seq > since_seq``, oldest first (the first ``limit``, or the last when ``newest``)."""
        clauses = [f"seq > {int(since_seq)}"]
        if decision:
            clauses.append(f"decision = {sql_literal(decision)}")
        if camera:
            clauses.append(f"camera_id = {sql_literal(camera)}")
        if rule_id:
            clauses.append(f"rule_id = {sql_literal(rule_id)}")
        rows = self.store.scan_rows("notifications", " AND ".join(clauses))
        rows.sort(key=lambda r: (r["seq"] or 0, r["id"]))
        return [_notification_from_row(r) for r in (rows[-limit:] if newest else rows[:limit])]

    def last_sent(self, rule_id: str, entity_id: str, camera: str) -> NotificationRecord | None:
        """The latest sent decision for rule × entity on ``camera`` (seeds the short-term record)."""
        where = (f"decision = 'sent' AND rule_id = {sql_literal(rule_id)} AND entity_id = {sql_literal(entity_id)} "
                 f"AND camera_id = {sql_literal(camera)}")
        rows = self.store.scan_rows("notifications", where)
        if not rows:
            return None
        return _notification_from_row(max(rows, key=lambda r: (r["event_time"] or 0.0, r["seq"] or 0)))


def _policy_id(camera: str) -> str:
    return stable_id("pol_", camera)


def _rule_row(rule: Rule) -> dict[str, Any]:
    return {"id": rule.id, "text": rule.text, "conditions_json": rule.conditions.model_dump_json(),
            "camera_ids": rule.camera_ids, "severity": rule.severity, "cooldown_s": rule.cooldown_s,
            "enabled": rule.enabled, "created_at": rule.created_at}


def _rule_from_row(row: dict[str, Any]) -> Rule:
    conditions = RuleConditions.model_validate_json(row["conditions_json"] or "{}")
    return Rule(id=row["id"], text=row["text"] or "", conditions=conditions, camera_ids=list(row["camera_ids"] or []),
                severity=row["severity"] or "info", cooldown_s=row["cooldown_s"] or 0.0,
                enabled=bool(row["enabled"]), created_at=row["created_at"] or 0.0)


def _notification_row(rec: NotificationRecord) -> dict[str, Any]:
    row = rec.model_dump(exclude={"channels", "payload"})
    row["channels_json"] = json.dumps(rec.channels, sort_keys=True)
    row["payload_json"] = json.dumps(rec.payload, sort_keys=True, default=str)
    return row


def _notification_from_row(row: dict[str, Any]) -> NotificationRecord:
    data = {k: row[k] for k in NotificationRecord.model_fields if k in row and row[k] is not None}
    data["channels"] = json.loads(row.get("channels_json") or "{}")
    data["payload"] = json.loads(row.get("payload_json") or "{}")
    return NotificationRecord.model_validate(data)


class Notification(BaseModel):
    """A sent notification, as channels and ``notify_poll`` see it."""

    id: str = Field(description="ntf_… (stable: the idempotency key)")
    seq: int = Field(description="cursor: pass the largest seen as `since` to notify_poll")
    rule_id: str
    rule_text: str
    camera_id: str
    entity_id: str = Field(description="dedup key: '*' for a rule's event, 'absent:…' for an absence, or the camera")
    entities: list[str] = Field(default_factory=list, description="everyone involved (entity ids)")
    severity: str
    message: str
    event_time: float = Field(description="wall-clock epoch seconds of the event")
    t_start: float = Field(0.0, description="media seconds within the source")
    trace_id: str = ""
    keyframe_id: str = Field("", description="open with memory_visual_evidence")
    evidence: list[str] = Field(default_factory=list)
    keyframe_jpeg_base64: str | None = Field(None, description="the key frame itself, when attached")


def to_notification(rec: NotificationRecord, keyframe_b64: str | None = None) -> Notification:
    """The channel/poll view of a sent decision."""
    return Notification(id=rec.id, seq=rec.seq, rule_id=rec.rule_id, rule_text=str(rec.payload.get("rule_text", "")),
                        camera_id=rec.camera_id, entity_id=rec.entity_id,
                        entities=list(rec.payload.get("entities") or []), severity=rec.severity, message=rec.message,
                        event_time=rec.event_time, t_start=float(rec.payload.get("t_start") or 0.0),
                        trace_id=rec.trace_id, keyframe_id=rec.keyframe_id,
                        evidence=list(rec.payload.get("evidence") or []), keyframe_jpeg_base64=keyframe_b64)
