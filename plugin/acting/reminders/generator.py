"""The generator: one short reminder, grounded in the memory the gate chose, citing its ids.

Locally a template: who or what is in view, when the memory was noted, and the memory's own words
(so the thing to act on is always in the text). With a chat model configured (the manifest's
``vlm:``, else ``qa:``, through the project's OpenAI-compatible client with structured output), the
model writes it from the evidence alone; its answer is used only when it is a non-empty reminder
that cites at least one of the evidence ids, cites nothing else, and names the thing to act on.
Anything else — an invented id, no reminder, an error — falls back to the template.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from pydantic import BaseModel, Field

from .gate import Item

__all__ = ["Draft", "Generator", "template"]

logger = logging.getLogger(__name__)

#: longest reminder text kept
MAX_CHARS = 300
_WHEN = {"V": "seen", "C": "noted"}

SYSTEM = (
    "You are a home assistant that speaks first, briefly. From the memories given (and nothing else), write ONE "
    "short reminder (at most 25 words) for the user about what is in view now, naming the thing to act on. "
    "Cite the ids of the memories you used in `cites`. If nothing in them needs acting on, answer with an empty "
    "`reminder` and no cites.")


class Draft(BaseModel):
    """The chat model's answer."""

    reminder: str = Field(description="one short reminder, or empty when nothing needs saying")
    cites: list[str] = Field(description="ids of the memories the reminder is based on")


def _date(wall: float) -> str:
    return datetime.fromtimestamp(wall, tz=timezone.utc).strftime("%-d %b %Y")


def subject(item: Item, names: dict[str, str]) -> str:
    """Who or what is in view, in words."""
    if item.key.startswith("word:"):
        return f'"{item.key[5:]}" (heard or read)'
    if item.key in names:
        return names[item.key]
    return f"the {item.key}"


def template(item: Item, names: dict[str, str]) -> str:
    """The local reminder: what is in view, when the memory was noted, and its words."""
    cand = item.candidate
    words = cand.text if len(cand.text) <= 200 else item.clause
    who = subject(item, names)
    here = f"{who} is here" if item.key in names else f"{who[0].upper()}{who[1:]} is in view"
    when = _WHEN.get(cand.kind, "noted") if cand.level == "note" else "known since"
    words = words.strip()
    end = "" if words[-1:] in ".!?\"”" else "."
    return _clip(f"{here}. {when.capitalize()} {_date(cand.wall)}: {words}{end}")


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_CHARS else text[:MAX_CHARS - 1].rstrip() + "…"


class Generator:
    """Template, or a chat model with the template as fallback."""

    def __init__(self, client: Any = None) -> None:
        #: a :class:`~perception.describe.vlm.VLMClient` (structured output), or None for the template
        self.client = client

    def write(self, item: Item, names: dict[str, str]) -> tuple[str, list[str], str]:
        """``(text, cited ids, "model" | "template")`` for ``item``."""
        evidence = item.evidence_ids
        if self.client is not None:
            try:
                draft = self._ask(item, names)
            except Exception as exc:  # a remote model failing must not lose the reminder
                logger.warning("reminder model failed (%s); using the template", exc)
                draft = None
            if draft is not None:
                checked = _checked(draft, evidence, item)
                if checked is not None:
                    return checked, [c for c in dict.fromkeys(draft.cites)], "model"
        return template(item, names), evidence, "template"

    def _ask(self, item: Item, names: dict[str, str]) -> Draft:
        lines = [f"In view now: {subject(item, names)}.", "Memories:"]
        for c in item.evidence or (item.candidate,):
            lines.append(f"- [{c.id}] ({_WHEN.get(c.kind, 'noted')} {_date(c.wall)}) {c.text}")
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "\n".join(lines)}]
        draft, _usage = self.client.complete_json(messages, Draft, stage="reminder", max_output_tokens=200)
        return draft


def _checked(draft: Draft, evidence: Sequence[str], item: Item) -> str | None:
    """The model's reminder when it is grounded: non-empty, cites only evidence ids (at least one),
    and names the thing to act on; else None."""
    text = " ".join(draft.reminder.split())
    cites = [c.strip() for c in draft.cites]
    if not text:
        logger.info("reminder model gave no reminder; using the template")
        return None
    if not cites or any(c not in evidence for c in cites):
        logger.warning("reminder model cited %s, not among the evidence %s; using the template", cites, list(evidence))
        return None
    lower = text.lower()
    if item.topic and not any(w in lower for w in item.topic):
        logger.info("reminder model did not name %s; using the template", sorted(item.topic))
        return None
    return _clip(text)
