"""The proactive stage: on each committed segment, what is in view → memory → gate → one reminder, or silence.

One post-commit hook, composed by the engine (so ``run``, ``serve``, ``ingest`` and captures all
get it), after the rule matcher:

1. **focus** — the named people recognised in the segment, the detector classes seen with at least
   ``min_object_score``, and (when ``word_weight`` > 0) the words spoken or read;
2. **retrieval** — memories that name them (``memory/search/focus.py``: notes, facts), no text query;
3. **gate** — at most one actionable item that ties to what is in view, is still open, and was not
   said before (``gate.py``; already spoken: ``memory/store/spoken.py``, stored, survives restarts);
4. **generator** — one short reminder citing the memory ids (``generator.py``);
5. **delivery** — a notification of rule ``rule_proactive`` through the notification service, so
   every channel, quiet hours, the camera policy (``notify_policy`` may mute reminders per camera)
   and the dashboard carry it; its ``t_start`` is the media second the thing was first seen in the
   segment and its ``evidence`` the memory ids.

Per camera, at most one reminder per thing in view per ``cooldown_s`` and ``daily_budget`` a day.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from datetime import datetime, timezone
from typing import Any

from memory.search.focus import Focus, FocusIndex, FocusPerson
from memory.models import SegmentWrite
from memory.procedural import Rule
from memory.store.spoken import SpokenMemory
from perception.rules.matcher import RuleSignal

from plugin.manifest_sections import ProactiveConfig
from .cues import VERB_WORDS, topic_words
from .gate import GateSettings, Item, select
from .generator import Generator

__all__ = ["PROACTIVE", "PROACTIVE_RULE_ID", "ReminderStage", "reminder_stage"]

logger = logging.getLogger(__name__)

#: the rule id every reminder carries (a pseudo-rule: reminders need none written)
PROACTIVE_RULE_ID = "rule_proactive"
PROACTIVE = Rule(id=PROACTIVE_RULE_ID, text="reminder from memory", severity="info", cooldown_s=0)
#: shortest word spoken or read that counts as in focus
MIN_WORD = 5


class ReminderStage:
    """Proactive reminders for one engine: call :meth:`on_commit` with every committed write."""

    def __init__(self, store: Any, notifications: Any, config: ProactiveConfig, identity: Any = None,
                 generator: Generator | None = None, own_client: bool = False) -> None:
        self.store = store
        self.notifications = notifications
        self.config = config
        self.identity = identity
        self.generator = generator or Generator()
        self.index = FocusIndex(store)
        self.spoken = SpokenMemory(store)
        self.gate = GateSettings(min_score=config.min_score, word_weight=config.word_weight,
                                 max_age_days=config.max_age_days)
        self.rule = PROACTIVE.model_copy(update={"severity": config.severity})
        self._lock = threading.Lock()
        #: held from reading what was said to recording what is said now
        self._deciding = threading.Lock()
        #: (camera, focus key) → wall time of the last reminder about it
        self._last: dict[tuple[str, str], float] = {}
        #: (camera, UTC day) → reminders said
        self._today: dict[tuple[str, str], int] = {}
        #: whether :meth:`close` closes the generator's client (one opened for this stage)
        self._own_client = own_client
        #: CPU seconds this stage spent (on the committing threads) and segments it looked at
        self.cpu_s = 0.0
        self.segments = 0

    # ------------------------------------------------------------------ the hook

    def on_commit(self, write: SegmentWrite) -> Any:
        """Remind of at most one memory about what this segment shows; returns the decision or None."""
        if write.enrichment or not self.config.on(write.camera_id):
            return None
        start = time.thread_time()
        try:
            return self._on_commit(write)
        finally:
            with self._lock:
                self.cpu_s += time.thread_time() - start
                self.segments += 1

    def _on_commit(self, write: SegmentWrite) -> Any:
        focus = self.focus(write)
        if focus.empty():
            return None
        candidates = self.index.candidates(focus)
        if not candidates:
            return None
        wall = write.trace.wall_start
        horizon = self.config.respeak_after_days * 86400.0 if self.config.respeak_after_days else None
        with self._deciding:  # two cameras seeing the same person at once: one of them says it
            item = select(candidates, focus, self.spoken.said(horizon, now=wall), now=wall, settings=self.gate)
            if item is None:
                return None
            return self._say(write, focus, item)

    def focus(self, write: SegmentWrite) -> Focus:
        """The named people, confident object classes and (optionally) words of a segment."""
        trace = write.trace
        people = []
        known = {e.id: e for e in write.entities}
        for eid in trace.entity_ids:
            if not eid.startswith("person_"):
                continue
            entity = known.get(eid) or (self.identity.entity(eid) if self.identity is not None else None)
            names = tuple(n for n in [getattr(entity, "name", None), *getattr(entity, "aliases", [])] if n)
            if names:
                people.append(FocusPerson(eid, names))
        scores = write.object_scores
        labels = tuple(label for label in trace.objects if label != "person"
                       and scores.get(label, 1.0) >= self.config.min_object_score)
        words: frozenset[str] = frozenset()
        if self.config.word_weight > 0:
            said = re.sub(r"\b(?:person|object|voice)_\d+:", " ", trace.transcript or "")
            words = frozenset(w for w in topic_words(f"{said} {trace.ocr_text}".lower())
                              if len(w) >= MIN_WORD and w not in VERB_WORDS)
        return Focus(people=tuple(people), labels=labels, words=words)

    # ------------------------------------------------------------------ saying it

    def _say(self, write: SegmentWrite, focus: Focus, item: Item) -> Any:
        camera, wall = write.camera_id, write.trace.wall_start
        day = datetime.fromtimestamp(wall, tz=timezone.utc).strftime("%Y-%m-%d")
        with self._lock:
            last = self._last.get((camera, item.key))
            if last is not None and abs(wall - last) < self.config.cooldown_s:
                return None
            if self._today.get((camera, day), 0) >= self.config.daily_budget:
                logger.info("reminder budget of %s reached today (%d)", camera, self.config.daily_budget)
                return None
            policy = self.notifications.policy(camera)
            if not policy.proactive:
                return None
            self._last[(camera, item.key)] = wall
        names = {p.entity_id: p.names[0] for p in focus.people if p.names}
        text, cited, how = self.generator.write(item, names)
        trace = write.trace
        t = write.seen_at.get(item.key, trace.t_start) if not item.key.startswith("word:") else trace.t_start
        t = min(max(t, trace.t_start), trace.t_end)
        keyframe = next((k.id for k in write.keyframes if item.key in k.entity_ids), None) \
            or (trace.keyframe_ids[0] if trace.keyframe_ids else "")
        signal = RuleSignal(rule_id=self.rule.id, camera_id=camera, entity_id=item.key, trace_id=trace.id,
                            t_start=t, wall_start=wall + (t - trace.t_start),
                            wall_end=wall + max(0.0, trace.t_end - trace.t_start), evidence=list(cited),
                            keyframe_id=keyframe, origin="proactive",
                            entities=[p.entity_id for p in focus.people if p.entity_id == item.key])
        shown = [c for c in item.evidence if c.id in set(cited)] or [item.candidate]
        memories = [{"id": c.id, "level": c.level, "kind": c.kind, "text": c.text, "time": c.wall} for c in shown]
        rec = self.notifications.resolve(signal, self.rule, write, message=text,
                                         payload={"reminder": text, "memories": memories, "focus": item.key,
                                                  "score": item.score, "writer": how})
        if rec.decision == "sent":
            self.spoken.record([*item.evidence_ids, *cited], rec.id, camera, text, wall)
            with self._lock:
                self._today[(camera, day)] = self._today.get((camera, day), 0) + 1
        logger.info("reminder on %s at %.1fs (%s, %s): %s", camera, t, item.key, rec.decision, text)
        return rec

    def close(self) -> None:
        """Close the chat model's connections when this stage opened them."""
        if self._own_client and self.generator.client is not None:
            self.generator.client.close()


def reminder_stage(manifest: Any, store: Any, notifications: Any, identity: Any, vlm: Any = None) -> ReminderStage:
    """The stage the manifest asks for: its ``proactive:`` settings, and the chat model that writes
    reminders — the VLM client when ``vlm:`` is set, else one for ``qa:``'s model, else none (the template)."""
    config = manifest.proactive
    client, own = None, False
    if config.generator == "auto":
        if vlm is not None:
            client = vlm
        elif manifest.qa is not None:
            from perception.describe.vlm import VLMClient

            qa = manifest.qa
            client, own = VLMClient(base_url=qa.base_url, model=qa.model, api_key=qa.api_key.get_secret_value(),
                                    timeout_s=qa.timeout_s, max_attempts=2), True
    return ReminderStage(store, notifications, config, identity=identity, generator=Generator(client), own_client=own)
