"""Context layers: the past participates in seeing the present (DESIGN §5).

Every VLM prompt carries five bounded layers, so its size does not grow with stream length:

* **working memory** (:class:`WorkingMemory`, one per camera's active event): a rolling event
  summary of at most ``rolling_words`` words, the last ``recent_summaries`` segment summaries,
  the active entities (dropped ``entity_inactive_s`` media seconds after last seen) and at most
  ``max_targets`` tracked targets (dropped after ``target_max_missed`` segments without them).
  The event rotates after ``max_event_segments`` segments or an ``event_gap_s`` media-time gap;
  the first segment of an event is a scheduler hard guard.
* **camera context**: scene type, routines and anomaly baseline from the store's
  ``camera_context`` table (written by semantic memory; absent → the layer says so).
* **entity history** on a re-ID hit: the entity's latest observations and facts.
* **active rules**: plain strings supplied by the caller (the rules module owns them).
* **steering**: the host agent's active injections (:mod:`perception.describe.steering`).

:class:`ContextBuilder` renders them as ``## <title>`` sections, each capped at ``layer_chars``.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from perception.describe.local import format_ts
from perception.segmenting.scheduler import Scheduler
from perception.describe.steering import SteeringBoard

__all__ = ["LAYER_TITLES", "ContextBounds", "ContextBuilder", "EntityHistory", "LatestFrame", "PerceptionRuntime",
           "PromptContext", "Target", "WorkingMemory", "camera_context_from_store", "clamp_words", "entity_history_from_store"]

logger = logging.getLogger(__name__)

#: layer key → section title in the prompt (the order is the prompt order)
LAYER_TITLES: dict[str, str] = {"working_memory": "Working memory", "camera": "Camera context",
                                "entities": "Entity history", "rules": "Active rules", "steering": "Steering"}


@dataclass(frozen=True)
class ContextBounds:
    """Every bound of the context layers."""

    rolling_words: int = 100
    recent_summaries: int = 3
    max_targets: int = 8
    target_max_missed: int = 3
    entity_inactive_s: float = 180.0
    max_active_entities: int = 12
    max_event_segments: int = 120
    event_gap_s: float = 60.0
    history_entities: int = 3
    history_observations: int = 3
    history_facts: int = 3
    max_rules: int = 8
    layer_chars: int = 1200


def clamp_words(text: str, limit: int, keep: str = "head") -> str:
    """At most ``limit`` words of ``text`` (the first ones, or the last ones with ``keep="tail"``)."""
    words = text.split()
    if len(words) <= limit:
        return " ".join(words)
    return " ".join(words[:limit]) + " …" if keep == "head" else "… " + " ".join(words[-limit:])


def _clamp_chars(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


@dataclass
class Target:
    """A tracked target (an entity or anchor label the event is following)."""

    target_id: str
    label: str
    last_segment: int
    missed: int = 0


@dataclass
class WorkingMemory:
    """The short-term memory of one camera's active event."""

    camera_id: str
    bounds: ContextBounds = field(default_factory=ContextBounds)
    event_index: int = 0
    event_start_t: float | None = None
    last_t: float | None = None
    segments: int = 0
    total_segments: int = 0
    rolling_summary: str = ""
    recent: deque[str] = field(default_factory=deque)
    entities: dict[str, float] = field(default_factory=dict)  # entity id → media time last seen
    targets: dict[str, Target] = field(default_factory=dict)
    last_summary: str = ""

    @property
    def event_id(self) -> str:
        return f"{self.camera_id}#{self.event_index}"

    @property
    def active(self) -> bool:
        return self.segments > 0

    def starts_event(self, t_start: float) -> bool:
        """Whether a segment starting at ``t_start`` opens a new event (nothing yet, rotation or gap)."""
        if self.segments == 0 or self.segments >= self.bounds.max_event_segments:
            return True
        return self.last_t is not None and t_start - self.last_t > self.bounds.event_gap_s

    def rotate(self, t_start: float) -> None:
        """Close the current event and open the next one at ``t_start`` (entities stay active)."""
        if self.segments:
            logger.debug("event %s rotates after %d segments", self.event_id, self.segments)
            self.event_index += 1
        self.segments = 0
        self.event_start_t = t_start
        self.rolling_summary = ""
        self.recent.clear()
        self.targets.clear()

    def observe(self, *, t_start: float, t_end: float, summary: str, entity_ids: Sequence[str] = (),
                targets: dict[str, str] | None = None, event_summary: str | None = None) -> bool:
        """Fold one analysed segment in; returns whether it opened a new event.

        ``targets`` maps target id → label for the targets seen in this segment; ``event_summary``
        (from a VLM) replaces the rolling summary, otherwise the segment summary is appended to it.
        """
        b = self.bounds
        opened = self.starts_event(t_start)
        if opened:
            self.rotate(t_start)
        self.segments += 1
        self.total_segments += 1
        self.last_t = t_end
        self.last_summary = summary
        self.recent.append(summary)
        while len(self.recent) > b.recent_summaries:
            self.recent.popleft()
        rolled = event_summary if event_summary else f"{self.rolling_summary} {summary}"
        self.rolling_summary = clamp_words(rolled, b.rolling_words, keep="head" if event_summary else "tail")
        for entity_id in entity_ids:
            self.entities[entity_id] = t_end
        self.entities = {e: t for e, t in self.entities.items() if t_end - t <= b.entity_inactive_s}
        if len(self.entities) > b.max_active_entities:
            newest = sorted(self.entities.items(), key=lambda kv: (-kv[1], kv[0]))[: b.max_active_entities]
            self.entities = dict(newest)
        seen = targets or {}
        for target in self.targets.values():
            target.missed = 0 if target.target_id in seen else target.missed + 1
        for target_id, label in seen.items():
            self.targets[target_id] = Target(target_id, label, self.total_segments)
        self.targets = {k: t for k, t in self.targets.items() if t.missed < b.target_max_missed}
        if len(self.targets) > b.max_targets:
            keep = sorted(self.targets.values(), key=lambda t: (t.missed, -t.last_segment, t.target_id))
            self.targets = {t.target_id: t for t in keep[: b.max_targets]}
        return opened

    def render(self) -> str:
        """The working-memory layer text."""
        lines = [f"event {self.event_id}, {self.segments} segment(s) so far"
                 + (f", started at {format_ts(self.event_start_t)}" if self.event_start_t is not None else "")]
        lines.append(f"event summary: {self.rolling_summary or '(new event)'}")
        lines.extend(f"recent segment {i + 1}: {s}" for i, s in enumerate(self.recent))
        if self.entities:
            lines.append("active entities: " + ", ".join(sorted(self.entities)))
        if self.targets:
            lines.append("tracked targets: " + "; ".join(f"{t.target_id} ({t.label}, missed {t.missed})"
                                                         for t in sorted(self.targets.values(),
                                                                         key=lambda t: t.target_id)))
        return "\n".join(lines)


@dataclass
class EntityHistory:
    """What memory already knows about an entity that re-ID just matched."""

    entity_id: str
    name: str | None = None
    observations: list[str] = field(default_factory=list)
    facts: list[str] = field(default_factory=list)


@dataclass
class PromptContext:
    """The rendered layers of one prompt, keyed by :data:`LAYER_TITLES`."""

    layers: dict[str, str]

    def render(self) -> str:
        return "\n\n".join(f"## {LAYER_TITLES[k]}\n{v}" for k, v in self.layers.items())


class ContextBuilder:
    """Assembles the bounded context layers for one segment's prompt."""

    def __init__(self, bounds: ContextBounds | None = None,
                 camera_context: Callable[[str], str | None] | None = None,
                 entity_history: Callable[[str], EntityHistory | None] | None = None) -> None:
        self.bounds = bounds or ContextBounds()
        self._camera_context = camera_context
        self._entity_history = entity_history
        self._lock = threading.Lock()
        self._memories: dict[str, WorkingMemory] = {}

    def memory(self, camera_id: str) -> WorkingMemory:
        """The working memory of ``camera_id`` (created on first use)."""
        with self._lock:
            if camera_id not in self._memories:
                self._memories[camera_id] = WorkingMemory(camera_id, self.bounds)
            return self._memories[camera_id]

    def memories(self) -> list[WorkingMemory]:
        with self._lock:
            return list(self._memories.values())

    def build(self, camera_id: str, *, reid_hits: Sequence[str] = (), rules: Sequence[str] = (),
              steering: Sequence[str] = ()) -> PromptContext:
        """All five layers for the next segment of ``camera_id``."""
        b = self.bounds
        layers: dict[str, str] = {"working_memory": self.memory(camera_id).render()}
        scene = self._safe(self._camera_context, camera_id) if self._camera_context else None
        layers["camera"] = scene or "no camera context yet"
        histories = [h for h in (self._safe(self._entity_history, e) for e in
                                 list(dict.fromkeys(reid_hits))[: b.history_entities]
                                 if self._entity_history) if h is not None]
        layers["entities"] = "\n".join(_history_text(h, b) for h in histories) or "no re-identified entities"
        layers["rules"] = "\n".join(f"- {r}" for r in list(rules)[: b.max_rules]) or "no active rules"
        layers["steering"] = "\n".join(f"- {s}" for s in steering) or "none"
        return PromptContext({k: _clamp_chars(v, b.layer_chars) for k, v in layers.items()})

    @staticmethod
    def _safe(fn: Callable[[str], Any] | None, key: str) -> Any:
        try:
            return fn(key) if fn is not None else None
        except Exception as exc:  # noqa: BLE001 - a context layer must never break perception
            logger.debug("context layer lookup for %s failed: %s", key, exc)
            return None


def _history_text(h: EntityHistory, b: ContextBounds) -> str:
    label = f"{h.name} ({h.entity_id})" if h.name else h.entity_id
    parts = [f"{label}:"]
    parts.extend(f"  seen: {o}" for o in h.observations[: b.history_observations])
    parts.extend(f"  fact: {f}" for f in h.facts[: b.history_facts])
    return "\n".join(parts)


def camera_context_from_store(store: Any) -> Callable[[str], str | None]:
    """A camera-context lookup over the store's ``camera_context`` table (``None`` when absent)."""

    def lookup(camera_id: str) -> str | None:
        quoted = camera_id.replace("'", "''")
        try:
            rows = store.scan_rows("camera_context", f"camera_id = '{quoted}'")
        except Exception as exc:  # noqa: BLE001 - table absent in older stores, or no semantic memory
            logger.debug("no camera context for %s: %s", camera_id, exc)
            return None
        if not rows:
            return None
        row = max(rows, key=lambda r: (r.get("revision") or 0, r.get("updated_at") or 0.0))
        parts = [f"scene: {row.get('scene_type') or 'unknown'}"]
        if row.get("routines"):
            parts.append("routines: " + "; ".join(row["routines"][:5]))
        if row.get("anomaly_baseline"):
            parts.append(f"baseline: {row['anomaly_baseline']}")
        return "\n".join(parts)

    return lookup


def entity_history_from_store(store: Any, observations: int = 3, facts: int = 3
                              ) -> Callable[[str], EntityHistory | None]:
    """An entity-history lookup: latest observations (store) and active facts, if any."""

    def lookup(entity_id: str) -> EntityHistory | None:
        try:
            entity = store.get_entity(entity_id)
        except Exception:  # noqa: BLE001 - unknown or forgotten entity: no history layer
            return None
        obs = [o.text for o in store.entity_observations(entity_id, limit=observations)]
        fact_texts: list[str] = []
        if hasattr(store, "facts"):
            fact_texts = [f.text for f in store.facts(entity_id=entity_id, limit=facts)]
        return EntityHistory(entity_id, getattr(entity, "name", None), obs, fact_texts)

    return lookup


@dataclass
class LatestFrame:
    """The most recent key frame of a camera (for ``perception_now``)."""

    camera_id: str
    t: float
    jpeg: bytes
    keyframe_id: str | None = None


class PerceptionRuntime:
    """Live perception state shared by the stream driver and the perception tools.

    Holds the context builder (working memory per camera), the steering board, the scheduler
    and, when configured, the VLM client; every part is thread-safe.
    """

    def __init__(self, builder: ContextBuilder | None = None, steering: SteeringBoard | None = None,
                 scheduler: Scheduler | None = None, vlm: Any = None) -> None:
        self.builder = builder or ContextBuilder()
        self.steering = steering or SteeringBoard()
        self.scheduler = scheduler or Scheduler()
        self.vlm = vlm
        self._lock = threading.Lock()
        self._latest: dict[str, LatestFrame] = {}

    def note_keyframe(self, camera_id: str, t: float, jpeg: bytes, keyframe_id: str | None = None) -> None:
        with self._lock:
            self._latest[camera_id] = LatestFrame(camera_id, t, jpeg, keyframe_id)

    def on_commit(self, write: Any) -> None:
        """Post-commit hook: remember the segment's newest key frame for ``perception_now``."""
        if write.keyframes:
            frame = max(write.keyframes, key=lambda k: k.t)
            self.note_keyframe(write.camera_id, frame.t, frame.jpeg, frame.id)

    def latest_frame(self, camera_id: str | None = None) -> LatestFrame | None:
        """The newest key frame of ``camera_id`` (of any camera when ``None``)."""
        with self._lock:
            if camera_id is not None:
                return self._latest.get(camera_id)
            return max(self._latest.values(), key=lambda f: f.t, default=None)

    def status(self) -> dict[str, Any]:
        """Scheduler counters and VLM token totals, for ``capture_status``."""
        usage = self.vlm.usage_totals() if self.vlm is not None else {}
        return {"scheduler": self.scheduler.counters(), "vlm_tokens": usage}
