"""References to an entity held by *other* rows: scrubbed on forget, moved selectively on split.

A forgotten entity's own rows are deleted by :func:`memory.identity.identity_ops.forget_entity`; this module
removes what other rows still say about it: other entities' identity decisions (runner-up, evidence,
reasons), facts and notifications that mention it, rules that name it (a rule whose conditions named
it is also disabled: without it, it would match anyone), notifications pointing at its deleted key
frames, camera context text, semantic counters and id claims. :func:`move_split_facts` decides which facts follow a split.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

from ..search.modes import sql_in, sql_literal

__all__ = ["move_split_facts", "scrub_references", "scrub_text"]

REPLACEMENT = "someone"


def scrub_text(text: str, terms: Iterable[str]) -> str:
    """``text`` with ``Name (person_0003)``, the ids and the names replaced by ``someone``."""
    for term in sorted({t for t in terms if t}, key=len, reverse=True):
        text = re.sub(rf"{re.escape(term)}\s*\(\s*[a-z]+_\d+\s*\)", REPLACEMENT, text)
        text = re.sub(rf"\b{re.escape(term)}\b", REPLACEMENT, text)
    return text


def _scrub_value(value: Any, terms: Sequence[str]) -> Any:
    if isinstance(value, str):
        return scrub_text(value, terms)
    if isinstance(value, list):
        return [_scrub_value(v, terms) for v in value]
    if isinstance(value, dict):
        return {k: _scrub_value(v, terms) for k, v in value.items()}
    return value


def _scrub_json(text: str | None, terms: Sequence[str]) -> str | None:
    if not text:
        return text
    try:
        return json.dumps(_scrub_value(json.loads(text), terms))
    except ValueError:
        return scrub_text(text, terms)


def _mentions(columns: Sequence[str], terms: Sequence[str]) -> str:
    return " OR ".join(f"{c} LIKE {sql_literal('%' + t + '%')}" for c in columns for t in terms)


def _drop(value: Any, gone: set[str], terms: Sequence[str]) -> Any:
    """``value`` with list items in ``gone`` removed, strings equal to one emptied, and names scrubbed."""
    if isinstance(value, str):
        return "" if value in gone else scrub_text(value, terms)
    if isinstance(value, list):
        return [_drop(v, gone, terms) for v in value if not (isinstance(v, str) and v in gone)]
    if isinstance(value, dict):
        return {k: _drop(v, gone, terms) for k, v in value.items()}
    return value


def _drop_json(text: str | None, gone: set[str], terms: Sequence[str]) -> str | None:
    if not text:
        return text
    try:
        return json.dumps(_drop(json.loads(text), gone, terms))
    except ValueError:
        return scrub_text(text, terms)


def scrub_references(store: Any, ids: set[str], terms: Sequence[str],
                     keyframes: Iterable[str] = ()) -> dict[str, int]:
    """Remove ``ids`` and ``terms`` (their names) from rows that belong to other entities, and
    references to the deleted ``keyframes``.

    Returns how many rows of each table were scrubbed or deleted.
    """
    terms = [t for t in terms if t]
    report: dict[str, int] = {}
    in_ids = sql_in(sorted(ids))

    decisions = store.scan_rows("identity_decisions", f"runner_up IN {in_ids} OR "
                                + _mentions(("evidence_json", "reason"), terms))
    for r in decisions:
        if r.get("runner_up") in ids:
            r["runner_up"], r["runner_up_score"] = None, None
        r["evidence_json"] = _scrub_json(r.get("evidence_json"), terms)
        r["reason"] = scrub_text(r.get("reason") or "", terms)
    if decisions:
        store.upsert_rows("identity_decisions", decisions)
    report["decisions_scrubbed"] = len(decisions)

    facts = store.scan_rows("facts", _mentions(("text", "reason"), terms))
    for r in facts:
        r["text"] = scrub_text(r["text"], terms)
        r["reason"] = scrub_text(r.get("reason") or "", terms)
    if facts:
        store.upsert_searchable("facts", facts)
    report["facts_scrubbed"] = len(facts)

    report["notifications"] = store.delete_rows("notifications", f"entity_id IN {in_ids}")
    notes = store.scan_rows("notifications", _mentions(("message", "reason", "payload_json"), terms))
    for r in notes:
        r["message"] = scrub_text(r.get("message") or "", terms)
        r["reason"] = scrub_text(r.get("reason") or "", terms)
        r["payload_json"] = _scrub_json(r.get("payload_json"), terms)
    if notes:
        store.upsert_rows("notifications", notes)

    gone_frames = set(keyframes)
    if gone_frames:
        pointing = store.scan_rows("notifications", f"keyframe_id IN {sql_in(sorted(gone_frames))}")
        for r in pointing:
            r["keyframe_id"] = ""
            r["payload_json"] = _drop_json(r.get("payload_json"), gone_frames, terms)
        if pointing:
            store.upsert_rows("notifications", pointing)
        report["notification_keyframes"] = len(pointing)

    rules = store.scan_rows("rules", _mentions(("text", "conditions_json"), terms))
    for r in rules:
        if any(t in (r.get("conditions_json") or "") for t in terms):
            r["enabled"] = False  # "when person_0003 arrives" without person_0003 would match anyone
        r["text"] = scrub_text(r.get("text") or "", terms)
        r["conditions_json"] = _drop_json(r.get("conditions_json"), set(terms), terms)
    if rules:
        store.upsert_rows("rules", rules)
    report["rules_scrubbed"] = len(rules)

    contexts = [r for r in store.scan_rows("camera_context")
                if any(t in json.dumps(r, default=str) for t in terms)]
    for r in contexts:
        for key in ("scene_type", "anomaly_baseline", "notes", "routines"):
            if key in r and r[key] is not None:
                r[key] = _scrub_value(r[key], terms)
        r["baseline_json"] = _scrub_json(r.get("baseline_json"), terms)
    if contexts:
        store.upsert_rows("camera_context", contexts)
    report["camera_context_scrubbed"] = len(contexts)

    report["semantic_state"] = store.delete_rows("semantic_state", f"subject IN {in_ids}")
    report["id_claims"] = store.delete_rows("id_alloc", f"entity_id IN {in_ids}")
    return report


def move_split_facts(store: Any, old_id: str, new_id: str, moved_observations: set[str],
                     segments: set[tuple[str, int]]) -> int:
    """Give ``new_id`` the facts of ``old_id`` whose evidence lies only in the moved sightings.

    Identity facts (names) and facts with evidence elsewhere, or none, stay with ``old_id``.
    Returns how many facts moved.
    """
    traces = {r["id"] for r in store.scan_rows("traces", f"array_has_any(entity_ids, [{sql_literal(new_id)}])")
              if (r["source"], r["segment_index"]) in segments}
    moved_evidence = moved_observations | traces
    facts = [r for r in store.scan_rows("facts", f"array_has_any(entity_ids, [{sql_literal(old_id)}])")
             if r["kind"] != "identity" and r["evidence_ids"] and set(r["evidence_ids"]) <= moved_evidence]
    for r in facts:
        r["entity_ids"] = list(dict.fromkeys(new_id if e == old_id else e for e in r["entity_ids"]))
    if facts:
        store.upsert_searchable("facts", facts)
    return len(facts)
