"""The LLM consolidator: an OpenAI-compatible model proposes fact edits from an entity's evidence.

It satisfies ``memory.semantic.consolidate.Consolidator`` and returns the same :class:`FactEdit` records as
the deterministic :class:`memory.semantic.local_consolidator.LocalConsolidator`; ``memory.semantic.consolidate``
validates and applies them identically (unknown fact ids dropped, identity facts protected, the
current segment never counts as evidence). The request goes through :class:`perception.describe.vlm.VLMClient`
with structured output (stage ``consolidate``: its own token budget and timeout). When the model
fails for good (timeout, refusal, exhausted retries) the ``fallback`` consolidator answers instead,
so consolidation never stalls on a provider outage.

The prompt is bounded: at most ``max_observations`` prior observations (newest first) and
``max_facts`` facts, each clipped to ``max_chars``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timezone

from pydantic import BaseModel, Field

from memory.semantic.consolidate import ConsolidationRequest, Consolidator, FactEdit
from perception.describe.vlm import VLMClient, VLMError

__all__ = ["FactEdits", "LLMConsolidator", "build_messages"]

logger = logging.getLogger(__name__)

SYSTEM = """\
You maintain long-term semantic memory about one entity (a person or object) seen by cameras.
You get the entity, its current facts (with ids) and its prior observations (with ids).
Propose edits as JSON:
- ADD: a new fact supported by the evidence (text = one sentence; kind = identity | attribute |
  habit | relation | place | name; key = the slot it fills, e.g. habit/morning, or "").
- UPDATE: fact_id of an existing fact the evidence contradicts or refines, with the new text.
- DELETE: fact_id of an existing fact the evidence shows to be wrong.
- NONE: fact_id of an existing fact the evidence re-confirms (or null when nothing changes).
Rules: UPDATE, DELETE and NONE must use a fact_id from the list; identity facts cannot be updated or
deleted; cite evidence_ids only from the observation and trace ids given; prefer few, durable facts
(habits, places, relations, names) over one-off events."""


class FactEdits(BaseModel):
    """The model's reply: edits in the order they should be applied."""

    edits: list[FactEdit] = Field(description="edits to apply, in order")


def _clip(text: str, limit: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _when(wall: float) -> str:
    return datetime.fromtimestamp(wall, timezone.utc).strftime("%a %Y-%m-%d %H:%M UTC")


def build_messages(request: ConsolidationRequest, max_observations: int = 40, max_facts: int = 30,
                   max_chars: int = 240) -> list[dict[str, str]]:
    """The chat messages for ``request`` (pure; bounded by the limits)."""
    e = request.entity
    lines = [f"## Entity\n{e.id} ({e.kind}){' named ' + e.name if e.name else ''}; "
             f"seen in {e.sightings} segment(s). {_clip(e.description, max_chars)}", "## Facts"]
    facts = request.facts[:max_facts]
    lines += [f"- {f.id} [{f.kind}{', key ' + f.key if f.key else ''}; w={f.importance:.2f}] {_clip(f.text, max_chars)}"
              for f in facts] or ["(none yet)"]
    lines.append("## Prior observations (newest first)")
    for obs in request.observations[:max_observations]:
        trace = request.trace_of(obs)
        extra = ""
        if trace is not None:
            parts = [f"trace {trace.id}: {_clip(trace.summary, max_chars)}"]
            if trace.objects:
                parts.append("objects " + ", ".join(trace.objects[:8]))
            if trace.ocr_text:
                parts.append(f"text read {_clip(trace.ocr_text, 80)!r}")
            if trace.transcript:
                parts.append(f"speech {_clip(trace.transcript, 120)!r}")
            extra = " | " + "; ".join(parts)
        lines.append(f"- {obs.id} {_when(obs.wall_start)} at {request.place_of(obs.camera_id)}: "
                     f"{_clip(obs.text, max_chars)}{extra}")
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "\n".join(lines)}]


@dataclass
class LLMConsolidator:
    """Fact edits from an OpenAI-compatible model, with a deterministic fallback."""

    client: VLMClient
    fallback: Consolidator | None = None
    max_observations: int = 40
    max_facts: int = 30
    name: str = "llm"

    def propose(self, request: ConsolidationRequest) -> list[FactEdit]:
        """Ask the model; on a lasting failure use the fallback (or propose nothing)."""
        messages = build_messages(request, self.max_observations, self.max_facts)
        try:
            reply, usage = self.client.complete_json(messages, FactEdits, stage="consolidate")
        except VLMError as exc:
            logger.warning("LLM consolidation of %s failed (%s); %s", request.entity.id, exc,
                           f"using the {self.fallback.name} consolidator" if self.fallback else "no edits this run")
            return self.fallback.propose(request) if self.fallback is not None else []
        logger.debug("LLM consolidation of %s: %d edit(s), %d tokens", request.entity.id, len(reply.edits),
                     usage.total_tokens)
        return reply.edits
