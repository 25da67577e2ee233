"""The anchoring parser: a pure function between the VLM's claims and the identity resolver.

The VLM sees numbered detection anchors (``A1``, ``A2``, … — faces, persons, objects found by
our detectors on the key frames) and may attach an identity target (an entity id) to an anchor.
:func:`parse_anchored` accepts a claim only when it is grounded and consistent:

* the anchor exists (else the whole claim is dropped: its description is ungrounded too);
* one claim per anchor (later duplicates are dropped);
* the entity id is known — a re-ID candidate of that anchor or an entity already active in the
  event — and its kind fits the anchor (``person_*`` on a face/person, ``object_*`` on an object);
* it does not contradict the resolver's own commitment for that anchor;
* one entity is not claimed on two anchors of the same key frame (both identities are dropped).

A dropped identity keeps the grounded description (an unidentified observation); every drop is
returned and logged with its reason. Accepted targets are *candidates* for the resolver, which
alone commits an entity id. Nothing here reads state or does I/O.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, Field

__all__ = ["Anchor", "AnchorClaim", "AnchoredObservation", "AnchoringResult", "Dropped", "IdentityTarget",
           "parse_anchored"]

logger = logging.getLogger(__name__)

_PERSON_KINDS = frozenset({"face", "person", "body"})


@dataclass(frozen=True)
class Anchor:
    """A detection the VLM may refer to."""

    anchor_id: str
    kind: str  # face | person | body | object
    keyframe: int  # index of the key frame (as sent to the VLM) it was found on
    box: tuple[int, int, int, int]
    label: str = ""
    candidates: tuple[str, ...] = ()  # entity ids re-ID scored for it, best first
    entity_id: str | None = None  # the resolver's committed entity, if any

    def prompt_line(self) -> str:
        x, y, w, h = self.box
        parts = [(f"{self.anchor_id}: {self.label or self.kind} on key frame {self.keyframe + 1} at x={x} y={y} "
                  f"w={w} h={h}")]
        if self.entity_id:
            parts.append(f"identified as {self.entity_id}")
        elif self.candidates:
            parts.append("candidates " + ", ".join(self.candidates))
        return "; ".join(parts)


class AnchorClaim(BaseModel):
    """What the VLM says about one anchor (part of its structured output)."""

    anchor_id: str = Field(description="an anchor id from the list, e.g. A1")
    entity_id: str | None = Field(description="the entity this anchor shows, only if sure; else null")
    description: str = Field(description="what this person or object is doing, one sentence")


@dataclass(frozen=True)
class IdentityTarget:
    """An accepted identity claim: evidence for the resolver, not a decision."""

    anchor_id: str
    entity_id: str
    keyframe: int


@dataclass(frozen=True)
class AnchoredObservation:
    """A grounded description of one anchor (``entity_id``: committed or accepted, else ``None``)."""

    anchor_id: str
    description: str
    entity_id: str | None


@dataclass(frozen=True)
class Dropped:
    """A claim (or its identity part) that was rejected, and why."""

    anchor_id: str
    entity_id: str | None
    reason: str


@dataclass
class AnchoringResult:
    observations: list[AnchoredObservation] = field(default_factory=list)
    targets: list[IdentityTarget] = field(default_factory=list)
    dropped: list[Dropped] = field(default_factory=list)


def _kind_fits(entity_id: str, anchor: Anchor) -> bool:
    if entity_id.startswith("person_"):
        return anchor.kind in _PERSON_KINDS
    if entity_id.startswith("object_"):
        return anchor.kind not in _PERSON_KINDS
    return False


def parse_anchored(claims: Sequence[AnchorClaim], anchors: Sequence[Anchor],
                   known_entities: Iterable[str] = ()) -> AnchoringResult:
    """Keep only grounded, consistent claims; see the module docstring for the rules."""
    by_id = {a.anchor_id: a for a in anchors}
    known = set(known_entities)
    result = AnchoringResult()
    seen_anchors: set[str] = set()
    pending: list[tuple[Anchor, AnchorClaim, str | None]] = []  # identity not yet cross-checked

    def drop(anchor_id: str, entity_id: str | None, reason: str) -> None:
        result.dropped.append(Dropped(anchor_id, entity_id, reason))
        logger.info("VLM claim on %s (%s) dropped: %s", anchor_id, entity_id or "no identity", reason)

    for claim in claims:
        anchor_id = claim.anchor_id.strip()
        anchor = by_id.get(anchor_id)
        if anchor is None:
            drop(anchor_id, claim.entity_id, "no such detection anchor")
            continue
        if anchor_id in seen_anchors:
            drop(anchor_id, claim.entity_id, "duplicate claim for the same anchor")
            continue
        seen_anchors.add(anchor_id)
        entity = (claim.entity_id or "").strip() or None
        if entity is not None:
            reason = None
            if entity not in known and entity not in anchor.candidates and entity != anchor.entity_id:
                reason = f"entity {entity} is neither a re-ID candidate of the anchor nor active in the event"
            elif not _kind_fits(entity, anchor):
                reason = f"entity {entity} does not fit a {anchor.kind} anchor"
            elif anchor.entity_id is not None and entity != anchor.entity_id:
                reason = f"contradicts the resolver, which identified the anchor as {anchor.entity_id}"
            if reason:
                drop(anchor_id, entity, reason)
                entity = None
        pending.append((anchor, claim, entity))

    # One entity cannot be two anchors of the same key frame: drop every such identity.
    per_frame: dict[tuple[int, str], int] = {}
    for anchor, _, entity in pending:
        if entity is not None:
            per_frame[(anchor.keyframe, entity)] = per_frame.get((anchor.keyframe, entity), 0) + 1
    for anchor, claim, entity in pending:
        if entity is not None and per_frame[(anchor.keyframe, entity)] > 1:
            drop(anchor.anchor_id, entity, f"{entity} claimed on several anchors of key frame {anchor.keyframe + 1}")
            entity = None
        if entity is not None and anchor.entity_id is None:
            result.targets.append(IdentityTarget(anchor.anchor_id, entity, anchor.keyframe))
        text = " ".join(claim.description.split())
        result.observations.append(AnchoredObservation(anchor.anchor_id, text, entity or anchor.entity_id))
    return result
