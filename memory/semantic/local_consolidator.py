"""The deterministic consolidator: facts from evidence without any model or API key.

It reads a :class:`~memory.semantic.consolidate.ConsolidationRequest` and proposes the same edit records
as the LLM consolidator. Every derived fact fills a *slot* (``key``), so a run re-confirms what it
derived before (``NONE fact_id``) and replaces what the evidence now contradicts (``UPDATE``):

* ``identity/name`` — the name a user gave the entity (an identity fact, w = 1).
* ``place/<place>`` — seen at a place (the camera's scene type, else the camera id) on ≥ ``min_days`` days.
* ``habit/<time of day>`` — usually at a place in the morning / afternoon / evening / night:
  the place of the last ``recent_days`` days with evidence in that bucket, seen there on
  ≥ ``min_days`` days. When the latest days agree on another place, the habit is UPDATEd.
* ``with/<entity>`` — often in the same segments as another entity (≥ ``min_days`` days).
* ``object/<label>`` — often seen with an object (≥ ``min_days`` days).
* ``name/<Name>`` — a name read by OCR (name tags, captions) or said in speech ("my name is …"),
  only from segments in which this entity is the only person. A name contradicting the
  user-given name is DELETEd.

Each edit cites the newest ``max_cite`` supporting observation and trace ids.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import tzinfo

from ..models import Fact
from .camera_context import day_of, time_bucket
from .consolidate import ConsolidationRequest, FactEdit

__all__ = ["LocalConsolidator", "names_in"]

_SPEECH_NAME = re.compile(r"\b(?:my name is|my name's|call me|i am called|i'm called)\s+([A-Za-z][a-z]+)", re.I)
_OCR_NAME = re.compile(r"\b(?:name\s*(?:is|:|-)|hello,?\s+my\s+name\s+is)\s*([A-Za-z][A-Za-z]+)", re.I)
_IGNORED_OBJECTS = {"person", "???", ""}


def names_in(transcript: str, ocr_text: str) -> list[str]:
    """Names said ("my name is Ana") or read ("NAME: ANA", "Hello my name is Ana"), title-cased."""
    found = [m.group(1) for m in _SPEECH_NAME.finditer(transcript or "")]
    found += [m.group(1) for m in _OCR_NAME.finditer(ocr_text or "")]
    return list(dict.fromkeys(n.title() for n in found))


@dataclass
class _Support:
    """Days and evidence ids (newest first) behind one candidate fact."""

    days: set[str] = field(default_factory=set)
    ids: list[str] = field(default_factory=list)

    def add(self, day: str, *ids: str) -> None:
        self.days.add(day)
        self.ids.extend(i for i in ids if i not in self.ids)


@dataclass
class LocalConsolidator:
    """Time-of-day habits, places, co-occurrence and names, with the shared edit semantics."""

    timezone: tzinfo | None = None
    min_days: int = 2
    recent_days: int = 2
    max_cite: int = 16
    name: str = "local"

    def propose(self, request: ConsolidationRequest) -> list[FactEdit]:
        """The edits the request's evidence supports (see the module docstring)."""
        eid = request.entity.id
        active = {f.key: f for f in request.facts if f.status == "active" and f.key}
        edits: list[FactEdit] = []

        def emit(key: str, kind: str, text: str, ids: list[str]) -> None:
            cite = ids[:self.max_cite]
            fact = active.get(key)
            if fact is None:
                edits.append(FactEdit(op="ADD", key=key, kind=kind, text=text, evidence_ids=cite,
                                      reason="derived from repeated evidence"))
            elif fact.text == text:
                edits.append(FactEdit(op="NONE", fact_id=fact.id, evidence_ids=cite, reason="re-confirmed"))
            else:
                edits.append(FactEdit(op="UPDATE", fact_id=fact.id, key=key, kind=kind, text=text, evidence_ids=cite,
                                      reason=f"newer evidence contradicts: {fact.text}"))

        if request.entity.name:
            emit("identity/name", "identity", f"{eid} is named {request.entity.name}", [eid])

        places: dict[str, _Support] = defaultdict(_Support)
        buckets: dict[str, dict[str, _Support]] = defaultdict(lambda: defaultdict(_Support))
        latest: dict[str, list[tuple[float, str, str]]] = defaultdict(list)  # bucket → (wall, day, place)
        others: dict[str, _Support] = defaultdict(_Support)
        objects: dict[str, _Support] = defaultdict(_Support)
        names: dict[str, _Support] = defaultdict(_Support)
        for obs in request.observations:  # newest first
            trace = request.trace_of(obs)
            ids = [obs.id] + ([trace.id] if trace is not None else [])
            day, bucket = day_of(obs.wall_start, self.timezone), time_bucket(obs.wall_start, self.timezone)
            place = request.place_of(obs.camera_id)
            places[place].add(day, *ids)
            buckets[bucket][place].add(day, *ids)
            latest[bucket].append((obs.wall_start, day, place))
            if trace is None:
                continue
            for other in trace.entity_ids:
                if other != eid:
                    others[other].add(day, *ids)
            for label in trace.objects:
                if label.lower() not in _IGNORED_OBJECTS:
                    objects[label.lower()].add(day, *ids)
            persons = [e for e in trace.entity_ids if e.startswith("person_")]
            if persons == [eid] or (not persons and request.entity.kind == "person"):
                for n in names_in(trace.transcript, trace.ocr_text):
                    names[n].add(day, *ids)

        for place, sup in sorted(places.items()):
            if len(sup.days) >= self.min_days:
                emit(f"place/{place}", "place", f"{eid} is regularly seen at the {place}", sup.ids)
        for bucket, by_place in sorted(buckets.items()):
            place = self._habit_place(latest[bucket])
            if place is not None and len(by_place[place].days) >= self.min_days:
                emit(f"habit/{bucket}", "habit", f"{eid} is usually at the {place} in the {bucket}",
                     by_place[place].ids)
        for other, sup in sorted(others.items()):
            if len(sup.days) >= self.min_days:
                emit(f"with/{other}", "relation", f"{eid} is often seen with {other}", sup.ids)
        # an object entity's description starts with its own class ("dog first seen on …"): a dog is
        # not "often seen with a dog" because the detector saw itself
        own = request.entity.description.split(" first seen", 1)[0].lower() if request.entity.kind == "object" else ""
        for label, sup in sorted(objects.items()):
            if len(sup.days) >= self.min_days and label != own:
                emit(f"object/{label}", "attribute", f"{eid} is often seen with a {label}", sup.ids)
        given = (request.entity.name or "").strip().lower()
        for n, sup in sorted(names.items()):
            if given and n.lower() != given:
                continue  # the user's name wins; contradicting name facts are retired below
            emit(f"name/{n}", "name", f"{eid} may be called {n} (read or heard)", sup.ids)
        if given:
            edits += self._retire_names(active, given, request)
        return edits

    def _habit_place(self, visits: list[tuple[float, str, str]]) -> str | None:
        """The place of the latest ``recent_days`` days of a bucket, when those days agree."""
        per_day: dict[str, str] = {}
        for _wall, day, place in sorted(visits, reverse=True):  # newest first: a day's latest visit wins
            per_day.setdefault(day, place)
        recent = [per_day[d] for d in sorted(per_day, reverse=True)[:self.recent_days]]
        if len(recent) < min(self.recent_days, self.min_days) or len(set(recent)) != 1:
            return None
        return recent[0]

    @staticmethod
    def _retire_names(active: dict[str, Fact], given: str, request: ConsolidationRequest) -> list[FactEdit]:
        cite = [request.entity.id]
        return [FactEdit(op="DELETE", fact_id=f.id, evidence_ids=cite,
                         reason=f"the user named {request.entity.id} {request.entity.name!r}")
                for key, f in sorted(active.items()) if key.startswith("name/") and key[5:].lower() != given]
