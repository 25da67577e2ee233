"""Semantic consolidation: evidence → fact edits (ADD / UPDATE / DELETE / NONE) → the ``facts`` table.

DESIGN §6, in code:

* **When.** An entity is due every ``every_n`` (N = 5) new observations: when its sightings (the
  count :meth:`~memory.store.facade.MemoryStore.write_segment` makes from the stored observations) are N past
  ``consolidated_at``, the sightings at its last run, kept per user and entity in the ``semantic_state``
  table. :meth:`ConsolidationEngine.note_segment` only reads: the row is written when the entity is
  consolidated (a commit per segment cost more than the rest of the check). The counter is derived
  from the stored sightings, so a segment re-committed after a crash never counts twice, and a
  dropped notification only delays the run to the entity's next commit.
* **What is read.** The entity's prior observations (newest first, at most ``history_limit``),
  the traces behind them and its active facts. The current segment is excluded as
  self-evidence; without any prior observation the run is skipped (and counted as skipped).
* **Edit records** (:class:`FactEdit`), the same for every consolidator (the local one in
  ``memory/semantic/local_consolidator.py``, the LLM one in ``perception/describe/llm_consolidator.py``):

  - ``ADD``: a new fact (``text``, ``kind``, optional ``key`` naming the slot it fills). An ADD
    whose key (or normalised text) matches an active fact re-confirms it instead; a different
    text for the same key supersedes the old fact, as an UPDATE would.
  - ``UPDATE fact_id``: the fact is superseded by a new one (``supersedes`` / ``superseded_by``).
  - ``DELETE fact_id``: the fact is retired (status ``superseded``, no successor).
  - ``NONE [fact_id]``: nothing changes; with a ``fact_id`` the evidence re-confirms that fact.

  UPDATE / DELETE / NONE naming a fact that does not exist, is already superseded or is about
  another entity are dropped. Evidence ids must come from the request (prior observations, their
  traces, the entity itself); ids of the current segment are stripped, and an edit left without
  evidence is dropped.
* **Importance.** ADD enters at ``initial_importance`` (identity facts at 1); each re-confirmation
  with evidence not already attached raises ``w ← w + (1 − w)·γ`` (γ = 0.2), capped at 1.
* **Identity facts** (kind ``identity``) are protected from automatic UPDATE and DELETE.
* **Nothing is erased.** A superseded row keeps its text, evidence and importance, and records
  the edit's evidence (``retired_by``) and ``reason``.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from ..errors import NotFoundError
from ..models import Entity, Fact, Observation, SegmentWrite, Trace, stable_id
from ..store.facade import MemoryStore

__all__ = [
    "ConsolidationEngine", "ConsolidationReport", "ConsolidationRequest", "ConsolidationSettings",
    "Consolidator", "EditOutcome", "FactEdit", "apply_edits", "reconfirm",
]

logger = logging.getLogger(__name__)

EditOp = Literal["ADD", "UPDATE", "DELETE", "NONE"]
STATE_TABLE = "semantic_state"


def reconfirm(w: float, gamma: float) -> float:
    """One re-confirmation: ``w + (1 − w)·γ``, capped at 1."""
    return min(1.0, w + (1.0 - w) * gamma)


class FactEdit(BaseModel):
    """One edit a consolidator proposes; :func:`apply_edits` validates and applies it."""

    model_config = ConfigDict(extra="forbid")

    op: EditOp
    fact_id: str | None = Field(None, description="UPDATE/DELETE: the fact edited; NONE: the fact re-confirmed")
    text: str = Field("", description="ADD/UPDATE: the fact in one sentence")
    kind: str = Field("", description="identity | attribute | habit | relation | place | name; empty = keep")
    key: str = Field("", description="slot the fact fills (e.g. habit/morning); empty = its normalised text")
    evidence_ids: list[str] = Field(default_factory=list, description="supporting observation / trace ids")
    reason: str = ""


class EditOutcome(BaseModel):
    """What became of one edit."""

    edit: FactEdit
    applied: bool
    result: Literal["added", "updated", "deleted", "reconfirmed", "unchanged", "dropped"]
    reason: str = ""
    fact_id: str | None = Field(None, description="the fact written or re-confirmed")
    importance: float | None = None


@dataclass
class ConsolidationRequest:
    """What a consolidator may read: the entity, its prior evidence and its current facts."""

    entity: Entity
    observations: list[Observation]
    traces: dict[tuple[str, int], Trace]
    facts: list[Fact]
    places: dict[str, str] = field(default_factory=dict)
    excluded_ids: set[str] = field(default_factory=set)
    user_id: str = "default"

    def trace_of(self, obs: Observation) -> Trace | None:
        """The trace of the segment ``obs`` was made in."""
        return self.traces.get((obs.source, obs.segment_index))

    def evidence_pool(self) -> set[str]:
        """Ids an edit may cite: prior observations, their traces and the entity itself."""
        ids = {o.id for o in self.observations} | {t.id for t in self.traces.values()} | {self.entity.id}
        return ids - self.excluded_ids

    def place_of(self, camera_id: str) -> str:
        """The place a camera shows (its context's scene type), or the camera id."""
        return self.places.get(camera_id) or camera_id


class Consolidator(Protocol):
    """Turns a request into edit records (local rules or an LLM)."""

    name: str

    def propose(self, request: ConsolidationRequest) -> list[FactEdit]:
        """The edits the evidence supports."""
        ...


@dataclass(frozen=True)
class ConsolidationSettings:
    """N, γ and the bounds of one run."""

    every_n: int = 5
    gamma: float = 0.2
    initial_importance: float = 0.5
    history_limit: int = 200
    max_evidence: int = 64


class ConsolidationReport(BaseModel):
    """One consolidation run of one entity."""

    entity_id: str
    consolidator: str
    skipped: bool = False
    reason: str = ""
    outcomes: list[EditOutcome] = Field(default_factory=list)


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", " ", text.lower()).strip()


def _fact_key(edit: FactEdit) -> str:
    return edit.key or "text/" + _norm(edit.text)


def _dropped(edit: FactEdit, why: str) -> EditOutcome:
    return EditOutcome(edit=edit, applied=False, result="dropped", reason=why)


class _Applier:
    """Applies edits in order against the entity's facts, collecting the rows to write."""

    def __init__(self, store: MemoryStore, request: ConsolidationRequest, settings: ConsolidationSettings,
                 now: float, manual: bool) -> None:
        self.store, self.request, self.settings, self.now, self.manual = store, request, settings, now, manual
        self.pool = request.evidence_pool()
        self.facts: dict[str, Fact] = {f.id: f for f in request.facts}
        self.changed: dict[str, Fact] = {}

    def lookup(self, fact_id: str | None) -> Fact | None:
        if not fact_id:
            return None
        if fact_id not in self.facts:
            found = self.store.facts(ids=[fact_id], include_superseded=True)
            if found:
                self.facts[fact_id] = found[0]
        return self.facts.get(fact_id)

    def put(self, fact: Fact) -> Fact:
        self.facts[fact.id] = self.changed[fact.id] = fact
        return fact

    def target(self, edit: FactEdit) -> tuple[Fact | None, str]:
        """The fact an UPDATE/DELETE/NONE names, or why it is dropped."""
        fact = self.lookup(edit.fact_id)
        if fact is None:
            return None, f"unknown fact id {edit.fact_id!r}"
        if fact.status != "active":
            return None, f"fact {fact.id} is already superseded"
        if self.request.entity.id not in fact.entity_ids:
            return None, f"fact {fact.id} is about {', '.join(fact.entity_ids)}, not {self.request.entity.id}"
        return fact, ""

    def new_id(self, key: str) -> str:
        generation = 0
        while True:
            candidate = stable_id("fct_", self.store.user_id, self.request.entity.id, key, generation)
            if self.lookup(candidate) is None:
                return candidate
            generation += 1

    def apply(self, edit: FactEdit) -> EditOutcome:
        evidence = list(dict.fromkeys(e for e in edit.evidence_ids if e in self.pool))
        def drop(why: str) -> EditOutcome:
            return _dropped(edit, why)

        if edit.op == "ADD":
            return self.add(edit, evidence)
        if edit.op == "NONE" and not edit.fact_id:
            return EditOutcome(edit=edit, applied=True, result="unchanged")
        fact, why = self.target(edit)
        if fact is None:
            return drop(why)
        if edit.op == "NONE":
            return self.confirm(edit, fact, evidence)
        if fact.kind == "identity" and not self.manual:
            return drop(f"fact {fact.id} is an identity fact, protected from automatic {edit.op}")
        if not evidence:
            return drop("no prior evidence cited (ids of the current segment do not count)")
        if edit.op == "DELETE":
            self.retire(fact, None, evidence, edit.reason)
            return EditOutcome(edit=edit, applied=True, result="deleted", fact_id=fact.id)
        if not edit.text.strip():
            return drop("UPDATE without text")
        new = self.create(edit, evidence, key=fact.key, kind=edit.kind if edit.kind not in ("", "identity")
                          else fact.kind, supersedes=fact.id)
        self.retire(fact, new.id, evidence, edit.reason)
        return EditOutcome(edit=edit, applied=True, result="updated", fact_id=new.id, importance=new.importance)

    def add(self, edit: FactEdit, evidence: list[str]) -> EditOutcome:
        def drop(why: str) -> EditOutcome:
            return _dropped(edit, why)

        if not edit.text.strip():
            return drop("ADD without text")
        if not evidence:
            return drop("no prior evidence cited (ids of the current segment do not count)")
        key = _fact_key(edit)
        same_slot = next((f for f in self.facts.values() if f.status == "active" and f.key == key
                          and self.request.entity.id in f.entity_ids), None)
        if same_slot is not None:
            if _norm(same_slot.text) == _norm(edit.text):
                return self.confirm(edit, same_slot, evidence)
            if same_slot.kind == "identity" and not self.manual:
                return drop(f"fact {same_slot.id} is an identity fact, protected from automatic UPDATE")
            new = self.create(edit, evidence, key=key, kind=edit.kind or same_slot.kind, supersedes=same_slot.id)
            self.retire(same_slot, new.id, evidence, edit.reason)
            return EditOutcome(edit=edit, applied=True, result="updated", fact_id=new.id, importance=new.importance)
        new = self.create(edit, evidence, key=key, kind=edit.kind or "attribute", supersedes=None)
        return EditOutcome(edit=edit, applied=True, result="added", fact_id=new.id, importance=new.importance)

    def create(self, edit: FactEdit, evidence: list[str], *, key: str, kind: str, supersedes: str | None) -> Fact:
        w = 1.0 if kind == "identity" else self.settings.initial_importance
        return self.put(Fact(id=self.new_id(key), entity_ids=[self.request.entity.id], text=edit.text.strip(),
                             kind=kind, importance=w, evidence_ids=evidence[-self.settings.max_evidence:],
                             key=key, supersedes=supersedes, reason=edit.reason, created_at=self.now,
                             updated_at=self.now))

    def retire(self, fact: Fact, successor: str | None, evidence: list[str], reason: str) -> None:
        self.put(fact.model_copy(update={"status": "superseded", "superseded_by": successor, "retired_by": evidence,
                                         "reason": reason, "updated_at": self.now}))

    def confirm(self, edit: FactEdit, fact: Fact, evidence: list[str]) -> EditOutcome:
        new_evidence = [e for e in evidence if e not in fact.evidence_ids]
        if not new_evidence:
            return EditOutcome(edit=edit, applied=True, result="unchanged", fact_id=fact.id,
                               importance=fact.importance, reason="no evidence beyond what the fact already cites")
        w = reconfirm(fact.importance, self.settings.gamma)
        ids = [*fact.evidence_ids, *new_evidence][-self.settings.max_evidence:]
        updated = self.put(fact.model_copy(update={"importance": w, "evidence_ids": ids, "updated_at": self.now,
                                                   "confirmations": fact.confirmations + 1}))
        return EditOutcome(edit=edit, applied=True, result="reconfirmed", fact_id=updated.id, importance=w)


def apply_edits(store: MemoryStore, request: ConsolidationRequest, edits: Sequence[FactEdit],
                settings: ConsolidationSettings | None = None, now: float | None = None,
                manual: bool = False) -> list[EditOutcome]:
    """Validate and apply ``edits`` in order; returns one outcome per edit.

    ``manual=True`` (a user's own edit) may update or delete identity facts; consolidators never do.
    """
    applier = _Applier(store, request, settings or ConsolidationSettings(), time.time() if now is None else now,
                       manual)
    outcomes = [applier.apply(edit) for edit in edits]
    if applier.changed:
        store.upsert_facts(list(applier.changed.values()))
    for o in outcomes:
        if not o.applied:
            logger.info("dropped %s edit for %s: %s", o.edit.op, request.entity.id, o.reason)
    return outcomes


class ConsolidationEngine:
    """Persistent per-entity counters and consolidation runs over one store (blocking code)."""

    def __init__(self, store: MemoryStore, consolidator: Consolidator,
                 settings: ConsolidationSettings | None = None) -> None:
        self.store = store
        self.consolidator = consolidator
        self.settings = settings or ConsolidationSettings()

    def _state(self, entity_id: str) -> dict[str, object]:
        sid = stable_id("sst_", "entity", entity_id)
        rows = self.store.scan_rows(STATE_TABLE, f"id = '{sid}'", limit=1)
        base: dict[str, object] = {"id": sid, "kind": "entity", "subject": entity_id, "observed": 0,
                                   "consolidated_at": 0, "runs": 0, "skipped": 0, "last_run_at": 0.0}
        if rows:
            base.update({k: v for k, v in rows[0].items() if v is not None})
        return base

    def _sightings(self, entity_id: str) -> int:
        try:
            return self.store.get_entity(entity_id).sightings
        except NotFoundError:
            return 0

    def counters(self, entity_id: str) -> dict[str, object]:
        """The counter row of ``entity_id`` (zeros when it was never counted); ``observed`` is the
        entity's sightings now, never below the count recorded at its last run."""
        state = self._state(entity_id)
        state["observed"] = max(int(state["observed"]), self._sightings(entity_id))  # type: ignore[call-overload]
        return state

    def note_segment(self, seg: SegmentWrite) -> list[str]:
        """The entity ids a committed segment makes due for consolidation (nothing is written).

        Sightings come from the segment's entities as ``write_segment`` counted them, else from the store.
        """
        counted = {e.id: e.sightings for e in seg.entities}
        due: list[str] = []
        for entity_id in dict.fromkeys(o.entity_id for o in seg.observations):
            sightings = counted[entity_id] if entity_id in counted else self._sightings(entity_id)
            state = self._state(entity_id)
            observed = max(int(state["observed"]), sightings)  # type: ignore[call-overload]
            if observed - int(state["consolidated_at"]) >= self.settings.every_n:  # type: ignore[call-overload]
                due.append(entity_id)
        return due

    def request_for(self, entity_id: str, current: SegmentWrite | None = None,
                    places: dict[str, str] | None = None) -> ConsolidationRequest:
        """Read the entity's prior evidence, the current segment excluded."""
        entity = self.store.get_entity(entity_id)
        excluded: set[str] = set()
        here: tuple[str, int] | None = None
        if current is not None:
            here = (current.source, current.segment_index)
            excluded = {current.trace.id, *(o.id for o in current.observations)}
        limit = self.settings.history_limit + (1 if current is not None else 0)
        observations = [o for o in self.store.entity_observations(entity.id, limit=limit)
                        if (o.source, o.segment_index) != here and o.id not in excluded][:self.settings.history_limit]
        traces = self.store.segment_traces([(o.source, o.segment_index) for o in observations])
        return ConsolidationRequest(entity=entity, observations=observations, traces=traces,
                                    facts=self.store.facts(entity.id), places=dict(places or {}),
                                    excluded_ids=excluded, user_id=self.store.user_id)

    def consolidate(self, entity_id: str, current: SegmentWrite | None = None,
                    places: dict[str, str] | None = None, now: float | None = None) -> ConsolidationReport:
        """Run the consolidator for ``entity_id`` and apply its edits; resets the entity's counter."""
        request = self.request_for(entity_id, current, places)
        state = self._state(request.entity.id)
        state["consolidated_at"] = max(int(state["observed"]), request.entity.sightings)  # type: ignore[call-overload]
        state["observed"] = state["consolidated_at"]
        state["last_run_at"] = time.time() if now is None else now
        report = ConsolidationReport(entity_id=request.entity.id, consolidator=self.consolidator.name)
        if not request.observations:
            state["skipped"] = int(state["skipped"]) + 1  # type: ignore[call-overload]
            self.store.upsert_rows(STATE_TABLE, [state])
            report.skipped, report.reason = True, "no prior observations (the current segment is not evidence)"
            return report
        edits = self.consolidator.propose(request)
        report.outcomes = apply_edits(self.store, request, edits, self.settings, now)
        state["runs"] = int(state["runs"]) + 1  # type: ignore[call-overload]
        self.store.upsert_rows(STATE_TABLE, [state])
        logger.info("consolidated %s with %s: %s", request.entity.id, self.consolidator.name,
                    ", ".join(f"{o.edit.op}→{o.result}" for o in report.outcomes) or "no edits")
        return report
