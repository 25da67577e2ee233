"""Agent steering: the host injects scene hints, focus targets and rules into perception.

A :class:`SteeringRequest` has allowlisted fields only (``scene_description``, ``focus_targets``,
``rules`` and an ``exit`` condition; anything else is rejected), bounded lengths, and text
flattened to one line so it cannot forge prompt sections. :class:`SteeringBoard` keeps the active
injections per camera and enforces:

* a media-time **cooldown** (``cooldown_s``, ≈60 s) between two injections on one camera;
* a **per-event budget** (``per_event_budget`` injections per event);
* an explicit **exit condition** checked after every segment (:meth:`SteeringBoard.advance`):
  after N segments, after N media seconds, once a focus target is seen, or at the end of the event;
  a hard ceiling of ``max_lifetime_segments`` applies to every injection.
"""

from __future__ import annotations

import itertools
import logging
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = ["ExitCondition", "Steering", "SteeringBoard", "SteeringRejected", "SteeringRequest"]

logger = logging.getLogger(__name__)

_CONTROL = re.compile(r"[\x00-\x1f\x7f#`]+")


def _flatten(text: str) -> str:
    """One line, no control characters, no markdown headings or code fences."""
    return " ".join(_CONTROL.sub(" ", text).split())


class ExitCondition(BaseModel):
    """When a steering injection ends."""

    model_config = ConfigDict(extra="forbid")

    until: Literal["segments", "media_seconds", "target_seen", "event_end"] = Field(
        description="segments: after `segments` analysed segments; media_seconds: after `seconds` of media "
        "time; target_seen: once `target` (an entity id or a focus label) is seen; event_end: when the event closes"
    )
    segments: int | None = Field(None, ge=1, le=100)
    seconds: float | None = Field(None, gt=0, le=3600)
    target: str | None = Field(None, min_length=1, max_length=60)

    @model_validator(mode="after")
    def _needs_its_value(self) -> ExitCondition:
        needed = {"segments": self.segments, "media_seconds": self.seconds, "target_seen": self.target}
        if self.until in needed and needed[self.until] is None:
            key = {"segments": "segments", "media_seconds": "seconds", "target_seen": "target"}[self.until]
            raise ValueError(f"exit condition until={self.until!r} needs `{key}`; set it, or use until='event_end'")
        return self


class SteeringRequest(BaseModel):
    """What the host agent may inject (allowlisted fields only)."""

    model_config = ConfigDict(extra="forbid")

    scene_description: str | None = Field(None, max_length=300)
    focus_targets: list[str] = Field(default_factory=list, max_length=8)
    rules: list[str] = Field(default_factory=list, max_length=5)
    exit: ExitCondition

    @field_validator("scene_description")
    @classmethod
    def _flat_scene(cls, v: str | None) -> str | None:
        return _flatten(v) or None if v is not None else None

    @field_validator("focus_targets", "rules")
    @classmethod
    def _flat_items(cls, v: list[str]) -> list[str]:
        out = [_flatten(s)[:200] for s in v]
        return [s for s in out if s]

    @model_validator(mode="after")
    def _not_empty(self) -> SteeringRequest:
        if not (self.scene_description or self.focus_targets or self.rules):
            raise ValueError("a steering request needs a scene_description, focus_targets or rules")
        return self


class SteeringRejected(ValueError):
    """The board refused an injection (cooldown or budget); the message says when to retry."""


@dataclass
class Steering:
    """One active injection."""

    id: str
    camera_id: str
    request: SteeringRequest
    event_id: str
    started_t: float
    segments_seen: int = 0
    ended: str | None = None

    def lines(self) -> list[str]:
        """The steering layer's lines for this injection."""
        r = self.request
        out: list[str] = []
        if r.scene_description:
            out.append(f"[{self.id}] scene (from the user's agent): {r.scene_description}")
        if r.focus_targets:
            out.append(f"[{self.id}] focus on: {', '.join(r.focus_targets)}")
        out.extend(f"[{self.id}] rule: {rule}" for rule in r.rules)
        return out


@dataclass
class SteeringBoard:
    """Active steering per camera, with cooldown, budget and exit conditions."""

    cooldown_s: float = 60.0
    per_event_budget: int = 3
    max_lifetime_segments: int = 100
    _active: dict[str, list[Steering]] = field(default_factory=dict)
    _last_injection_t: dict[str, float] = field(default_factory=dict)
    _used: dict[str, int] = field(default_factory=dict)  # event id → injections
    _ids: itertools.count = field(default_factory=lambda: itertools.count(1))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def inject(self, request: SteeringRequest, *, camera_id: str, media_t: float, event_id: str) -> Steering:
        """Activate ``request`` on ``camera_id`` at media time ``media_t`` in event ``event_id``.

        Raises:
            SteeringRejected: within the cooldown, or the event's budget is used up.
        """
        with self._lock:
            last = self._last_injection_t.get(camera_id)
            if last is not None and media_t - last < self.cooldown_s:
                wait = self.cooldown_s - (media_t - last)
                raise SteeringRejected(f"steering on camera {camera_id!r} is cooling down: try again after "
                                       f"{wait:.0f} more seconds of media time")
            if self._used.get(event_id, 0) >= self.per_event_budget:
                raise SteeringRejected(f"the steering budget of event {event_id} ({self.per_event_budget} "
                                       f"injections) is used up; wait for the next event")
            steering = Steering(f"steer_{next(self._ids)}", camera_id, request, event_id, media_t)
            self._active.setdefault(camera_id, []).append(steering)
            self._last_injection_t[camera_id] = media_t
            self._used[event_id] = self._used.get(event_id, 0) + 1
        logger.info("steering %s on %s until %s", steering.id, camera_id, request.exit.until)
        return steering

    def active(self, camera_id: str) -> list[Steering]:
        with self._lock:
            return list(self._active.get(camera_id, []))

    def lines(self, camera_id: str) -> list[str]:
        """Prompt lines of every active injection on ``camera_id``."""
        return [line for s in self.active(camera_id) for line in s.lines()]

    def budget_left(self, event_id: str) -> int:
        with self._lock:
            return max(0, self.per_event_budget - self._used.get(event_id, 0))

    def advance(self, camera_id: str, *, t_end: float, event_id: str, seen: Iterable[str] = ()) -> list[Steering]:
        """Account for one analysed segment; returns the injections that just expired."""
        seen_set = {s.lower() for s in seen}
        expired: list[Steering] = []
        with self._lock:
            keep: list[Steering] = []
            for s in self._active.get(camera_id, []):
                s.segments_seen += 1
                s.ended = _exit_reason(s, t_end, event_id, seen_set, self.max_lifetime_segments)
                (expired if s.ended else keep).append(s)
            self._active[camera_id] = keep
        for s in expired:
            logger.info("steering %s on %s ended: %s", s.id, camera_id, s.ended)
        return expired


def _exit_reason(s: Steering, t_end: float, event_id: str, seen: set[str], ceiling: int) -> str | None:
    cond = s.request.exit
    if cond.until == "segments" and cond.segments is not None and s.segments_seen >= cond.segments:
        return f"{cond.segments} segment(s) analysed"
    if cond.until == "media_seconds" and cond.seconds is not None and t_end - s.started_t >= cond.seconds:
        return f"{cond.seconds:g} s of media time passed"
    if cond.until == "target_seen" and cond.target is not None and cond.target.lower() in seen:
        return f"target {cond.target} seen"
    if event_id != s.event_id:
        return "event ended"
    if s.segments_seen >= ceiling:
        return f"lifetime ceiling of {ceiling} segments"
    return None
