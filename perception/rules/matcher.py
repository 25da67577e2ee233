"""Local rule matcher: structured rule conditions over one committed segment → rule signals.

A rule signal is *evidence* that a rule matched (which rule, which entity, when, why); the
notification resolver (``plugin/acting/notify.py``) decides whether anybody is told. Conditions
(:class:`memory.procedural.RuleConditions`) are ANDed:

* ``entities``: an entity id or a display name/alias present in the segment (``"*"`` = anyone:
  an identified entity, or a face or person box the resolver could not (yet) identify, counted in
  ``SegmentWrite.people``). With ``unknown_people`` only people without a name match.
  Names come from the segment's entity records (``SegmentWrite.entities``).
* ``said`` / ``text_read``: any of the phrases occurs in the transcript / the text read on screen
  (case and punctuation ignored).
* ``objects``: object classes in ``trace.objects`` (any or all of them).
* ``overlap``: for each label pair, a box of the first label intersects a box of the second.
* ``zone``: a box of a matching label (the entities' kinds, the object classes, or any box when the
  rule names neither) has its centre inside the normalised polygon.
* ``time_window``: the segment's wall-clock start falls in the daily local-time window.
* ``absent_minutes``: none of ``entities`` has been seen on this camera for that long. The matcher
  remembers when each entity was last seen per camera; an entity never seen counts from the
  first segment the matcher saw on that camera (or the entity's stored ``last_seen``).

A rule yields at most one signal per segment, naming everyone involved; its dedup key is the
rule (``entity_id="*"``), so the resolver notifies once per event, not once per person.

Boxes: a committed segment carries no boxes today, so ``zone``/``overlap`` use a box provider,
called only when an active rule needs boxes. :class:`KeyframeBoxes` re-runs detection on the
segment's key frames: YuNet faces, labelled ``person`` (with the entity id when the key frame
shows exactly one entity and one face; a face box stands for the person, so a zone tests where
the *face* is), plus object boxes when an object detector is given (the server passes the SSD
household detector). Drivers that already hold boxes can pass their own provider.

Blocking code (JPEG decode, ONNX); it runs on the ingest thread via ``on_commit``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol
from zoneinfo import ZoneInfo

import cv2
import numpy as np
from pydantic import BaseModel, Field

from memory.models import SegmentWrite
from memory.procedural import Rule, TimeWindow
from perception.detectors.faces import FaceDetector

__all__ = ["Box", "BoxProvider", "KeyframeBoxes", "RuleMatcher", "RuleSignal", "in_time_window", "point_in_polygon"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Box:
    """A labelled box in normalised image coordinates (``x, y`` = top-left, ``w, h`` in [0, 1])."""

    label: str
    x: float
    y: float
    w: float
    h: float
    entity_id: str | None = None
    keyframe_id: str | None = None

    @property
    def centre(self) -> tuple[float, float]:
        """The box centre."""
        return self.x + self.w / 2, self.y + self.h / 2

    def overlaps(self, other: Box) -> bool:
        """True when the two boxes share some area."""
        return (min(self.x + self.w, other.x + other.w) > max(self.x, other.x)
                and min(self.y + self.h, other.y + other.h) > max(self.y, other.y))


BoxProvider = Callable[[SegmentWrite], list[Box]]


class RuleSignal(BaseModel):
    """Evidence that a rule matched a segment (or an absence), for the notification resolver."""

    rule_id: str
    camera_id: str
    entity_id: str = Field("*", description="the matched entity (dedup key); '*' when the rule names none")
    trace_id: str = ""
    t_start: float = Field(0.0, description="media seconds")
    wall_start: float = Field(description="wall-clock epoch seconds the match starts")
    wall_end: float = Field(description="wall-clock epoch seconds the match ends")
    evidence: list[str] = Field(default_factory=list, description="why it matched, in words")
    keyframe_id: str = ""
    origin: str = Field("local", description="local matcher, vlm, or source (live source events)")
    entities: list[str] = Field(default_factory=list, description="everyone involved (entity ids)")


def point_in_polygon(point: tuple[float, float], polygon: Sequence[tuple[float, float]]) -> bool:
    """Even-odd ray casting; points on an edge may fall either way."""
    x, y = point
    inside = False
    n = len(polygon)
    for i in range(n):
        x1, y1 = polygon[i]
        x2, y2 = polygon[(i + 1) % n]
        if (y1 > y) != (y2 > y) and x < x1 + (y - y1) * (x2 - x1) / (y2 - y1):
            inside = not inside
    return inside


def in_time_window(wall: float, window: TimeWindow, timezone: str | None) -> bool:
    """Whether epoch ``wall`` falls in the daily ``window`` of ``timezone`` (local zone when None)."""
    tz = ZoneInfo(timezone) if timezone else None
    local = datetime.fromtimestamp(wall, tz) if tz else datetime.fromtimestamp(wall).astimezone()
    now = local.hour * 60 + local.minute
    sh, sm = map(int, window.start.split(":"))
    eh, em = map(int, window.end.split(":"))
    start, end = sh * 60 + sm, eh * 60 + em
    if start == end:
        return True
    return start <= now < end if start < end else now >= start or now < end


class _Detector(Protocol):
    @property
    def available(self) -> bool: ...

    def detect(self, image_bgr: np.ndarray) -> list[Any]: ...


@dataclass
class KeyframeBoxes:
    """Box provider: YuNet faces (label ``person``) and, when given, object boxes on the key frames."""

    faces: FaceDetector | None = field(default_factory=FaceDetector)
    objects: _Detector | None = None

    def __call__(self, write: SegmentWrite) -> list[Box]:
        boxes: list[Box] = []
        for kf in write.keyframes:
            image = cv2.imdecode(np.frombuffer(kf.jpeg, np.uint8), cv2.IMREAD_COLOR)
            if image is None:
                continue
            h, w = image.shape[:2]
            faces = self.faces.detect(image) if self.faces is not None and self.faces.available else []
            owner = kf.entity_ids[0] if len(kf.entity_ids) == 1 and len(faces) == 1 else None
            for det in faces:
                bx, by, bw, bh = det.box
                boxes.append(Box("person", bx / w, by / h, bw / w, bh / h, entity_id=owner, keyframe_id=kf.id))
            found = self.objects.detect(image) if self.objects is not None and self.objects.available else []
            for det in found:
                bx, by, bw, bh = det.box
                boxes.append(Box(det.label.lower(), bx / w, by / h, bw / w, bh / h, keyframe_id=kf.id))
        return boxes


@dataclass
class RuleMatcher:
    """Evaluates rules on committed segments; keeps per-camera last-seen times for absence rules."""

    box_provider: BoxProvider | None = None
    last_seen: dict[tuple[str, str], float] = field(default_factory=dict)
    first_wall: dict[str, float] = field(default_factory=dict)

    def evaluate(self, write: SegmentWrite, rules: Sequence[Rule],
                 seen_before: Callable[[str], float | None] | None = None) -> list[RuleSignal]:
        """Signals of ``rules`` on ``write``; ``seen_before(ref)`` gives a stored last-seen time for absences."""
        trace = write.trace
        camera = write.camera_id
        wall_end = trace.wall_start + max(0.0, trace.t_end - trace.t_start)
        self.first_wall.setdefault(camera, trace.wall_start)
        present = list(dict.fromkeys(trace.entity_ids))
        names = {e.id: [n for n in [e.name, *e.aliases] if n] for e in write.entities}
        kinds = {e.id: e.kind for e in write.entities}
        for eid in present:
            self.last_seen[(camera, eid)] = wall_end
            for name in names.get(eid, []):
                self.last_seen[(camera, name.lower())] = wall_end
        boxes: list[Box] | None = None
        signals: list[RuleSignal] = []
        for rule in rules:
            cond = rule.conditions
            if cond.is_empty() or not rule.enabled or not rule.applies_to(camera):
                continue
            if (cond.zone or cond.overlap) and boxes is None:
                boxes = self._boxes(write)
            signals.extend(self._match(rule, write, present, names, kinds, boxes or [], wall_end, seen_before))
        return signals

    def _boxes(self, write: SegmentWrite) -> list[Box]:
        if self.box_provider is None:
            return []
        try:
            return self.box_provider(write)
        except Exception:  # a broken provider must not stop ingestion; the zone rules just don't match
            logger.exception("box provider failed on %s#%d", write.source, write.segment_index)
            return []

    def _match(self, rule: Rule, write: SegmentWrite, present: list[str], names: dict[str, list[str]],
               kinds: dict[str, str], boxes: list[Box], wall_end: float,
               seen_before: Callable[[str], float | None] | None) -> list[RuleSignal]:
        cond, trace = rule.conditions, write.trace
        evidence: list[str] = []
        if cond.time_window is not None:
            if not in_time_window(trace.wall_start, cond.time_window, cond.timezone):
                return []
            evidence.append(f"within {cond.time_window.start}–{cond.time_window.end}")
        wanted = [w.strip().lower() for w in cond.entities if w.strip()]
        if cond.absent_minutes is not None:
            return self._absence(rule, write, wanted, evidence, wall_end, seen_before)
        matched: list[str] = []
        if wanted:
            for eid in present:
                refs = {eid.lower(), *(n.lower() for n in names.get(eid, []))}
                if cond.unknown_people and names.get(eid):
                    continue
                if "*" in wanted or refs & set(wanted):
                    matched.append(eid)
            unidentified = max(0, write.people - len(present)) if "*" in wanted else 0
            if not matched and not unidentified:
                return []
            who = [_label(e, names) for e in matched]
            if unidentified:
                who.append(f"{unidentified} unidentified {'person' if unidentified == 1 else 'people'}")
            evidence.append("present: " + ", ".join(who))
        if cond.said:
            heard = [p for p in cond.said if _norm(p) and _norm(p) in _norm(trace.transcript)]
            if not heard:
                return []
            evidence.append("said: " + ", ".join(f'"{p}"' for p in heard))
        if cond.text_read:
            read = [p for p in cond.text_read if _norm(p) and _norm(p) in _norm(trace.ocr_text)]
            if not read:
                return []
            evidence.append("text read: " + ", ".join(f'"{p}"' for p in read))
        if cond.objects:
            have = {o.strip().lower() for o in trace.objects}
            need = [o.strip().lower() for o in cond.objects]
            hits = [o for o in need if o in have]
            if not hits or (cond.objects_mode == "all" and len(hits) < len(need)):
                return []
            evidence.append("objects: " + ", ".join(hits))
        for a, b in cond.overlap:
            pair = [(p, q) for p in boxes if p.label.lower() == a.lower() for q in boxes if q.label.lower() == b.lower()
                    and p.overlaps(q)]
            if not pair:
                return []
            evidence.append(f"{a} overlaps {b}")
        keyframe = trace.keyframe_ids[0] if trace.keyframe_ids else ""
        if cond.zone:
            labels = {kinds.get(e, "person") for e in matched} | {o.lower() for o in cond.objects}
            inside = [bx for bx in boxes if (not labels or bx.label.lower() in labels)
                      and (not matched or bx.entity_id is None or bx.entity_id in matched)
                      and point_in_polygon(bx.centre, cond.zone)]
            if not inside:
                return []
            keyframe = inside[0].keyframe_id or keyframe
            evidence.append(f"{inside[0].label} inside the zone")
        if matched and not cond.zone:
            keyframe = _first_frame(write, matched[0]) or keyframe
        return [self._signal(rule, write, "*", evidence, keyframe, wall_end, matched)]

    def _absence(self, rule: Rule, write: SegmentWrite, wanted: list[str], evidence: list[str], wall_end: float,
                 seen_before: Callable[[str], float | None] | None) -> list[RuleSignal]:
        camera = write.camera_id
        limit_s = float(rule.conditions.absent_minutes or 0) * 60.0
        refs = wanted or ["*"]
        last = None
        for ref in refs:
            if ref == "*":
                seen = max((t for (cam, _), t in self.last_seen.items() if cam == camera), default=None)
            else:
                seen = self.last_seen.get((camera, ref))
                if seen is None and seen_before is not None:
                    seen = seen_before(ref)
            if seen is not None:
                last = seen if last is None else max(last, seen)
        since = last if last is not None else self.first_wall[camera]
        if wall_end - since < limit_s:
            return []
        minutes = (wall_end - since) / 60.0
        evidence.append(f"{', '.join(refs)} not seen for {minutes:.1f} min")
        key = "absent:" + ",".join(sorted(refs))
        keyframe = write.trace.keyframe_ids[0] if write.trace.keyframe_ids else ""
        return [self._signal(rule, write, key, evidence, keyframe, wall_end)]

    @staticmethod
    def _signal(rule: Rule, write: SegmentWrite, entity: str, evidence: list[str], keyframe: str,
                wall_end: float, entities: Sequence[str] = ()) -> RuleSignal:
        return RuleSignal(rule_id=rule.id, camera_id=write.camera_id, entity_id=entity, trace_id=write.trace.id,
                          t_start=write.trace.t_start, wall_start=write.trace.wall_start, wall_end=wall_end,
                          evidence=list(evidence), keyframe_id=keyframe, entities=list(entities))


def _norm(text: str) -> str:
    """Lower case, punctuation dropped, single spaces: what phrase matching compares."""
    return " ".join(re.findall(r"[a-z0-9']+", text.lower()))


def _first_frame(write: SegmentWrite, entity_id: str) -> str:
    return next((k.id for k in write.keyframes if entity_id in k.entity_ids), "")


def _label(entity_id: str, names: dict[str, list[str]]) -> str:
    found = names.get(entity_id)
    return f"{entity_id} ({found[0]})" if found else entity_id
