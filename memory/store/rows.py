"""Rows and records: the searchable text of traces and entities, records from rows, rows as tools see them."""

from __future__ import annotations

import re
from typing import Any

from ..models import Entity, Trace
from ..search.cards import CARD_COLUMN

_HIDDEN = ("vector", "user_id", CARD_COLUMN)
_SPEAKER = re.compile(r"\b(?:person|object|voice)_\d+: ")


def trace_text(trace: Trace) -> str:
    """The searchable text of a trace: summary, quotes, transcript, OCR and objects.

    Each piece of speech appears once (the summary already quotes the segment's words, speaker-labelled):
    repeats cost embedding time and, past the meaning model's 256 tokens, push the end of a long
    sentence out of what it reads.
    """
    parts = [trace.summary]
    said = _SPEAKER.sub("", trace.summary)
    for text in [*trace.quotes, trace.transcript]:
        plain = _SPEAKER.sub("", text or "").strip()
        if plain and plain not in said:
            parts.append(f'"{text}"' if text in trace.quotes else text)
            said += "\n" + plain
    if trace.ocr_text:
        parts.append(trace.ocr_text)
    if trace.objects:
        parts.append("objects: " + ", ".join(trace.objects))
    return "\n".join(p for p in parts if p)


def entity_text(entity: Entity) -> str:
    """The searchable text of an entity: id, names and description."""
    names = [n for n in [entity.name, *entity.aliases] if n]
    return " ".join([entity.id, entity.kind, *names, entity.description]).strip()


def model_from_row(model: type, row: dict[str, Any]) -> Any:
    """The pydantic record ``model`` built from a table row (columns the model lacks are ignored)."""
    return model.model_validate({k: row[k] for k in model.model_fields if k in row})


def public_row(row: dict[str, Any]) -> dict[str, Any]:
    """A row as tools see it: without its vector, user, search card, JPEG bytes or private columns."""
    return {k: v for k, v in row.items() if k not in _HIDDEN and k != "jpeg" and not k.startswith("_")}
