"""User edits of identity: name, enrol, merge, split and forget entities; identity decisions.

Every edit works on the store's tables through its public row API and leaves a decision record
(``identity_decisions``), so ``entity_get`` can show why an entity has each sighting:

* **name** sets the display name (the old one becomes an alias) and writes an ``identity`` fact
  (importance 1.0).
* **enrol** adds a reference face embedding under a name: to the entity it matches (or the one
  given), else to a new person entity.
* **merge** moves galleries, observations, decisions and references (traces, key frames, facts,
  chapters) from one entity to another; the old id stays as a redirect (``merged_into``).
* **split** moves chosen observations (and the gallery slots, decisions and references of their
  segments, and the facts whose evidence lies only in them) to a new entity; names and identity
  facts stay with the original.
* **forget** erases the entity and every id merged into it: gallery slots, observations,
  decisions, facts, key frames where it was the only subject; traces, chapters and remaining
  key frames lose its id, and its id and names are scrubbed from their text, which is re-embedded,
  so a search afterwards finds nothing of it. Other entities' decisions, chapter titles, facts,
  notifications, camera context and semantic counters lose it too, and every older table version
  is pruned (:mod:`memory.identity.erasure`), so no file of the store still holds its rows. Its id is never
  handed out again (:mod:`memory.identity.ids`).
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import NotFoundError
from ..models import Entity, Fact, GalleryFace, IdentityDecision, Trace, stable_id
from ..search.modes import sql_in, sql_literal
from ..store.facade import MemoryStore
from ..store.rows import trace_text
from ..store.schema import SEARCHABLE
from .erasure import erase_history
from .forget_refs import move_split_facts as _move_split_facts
from .forget_refs import scrub_references

__all__ = ["ForgetReport", "enrol_face", "entity_decisions", "forget_entity", "merge_entities", "name_entity",
           "record_decision", "split_entity"]

logger = logging.getLogger(__name__)

MAX_SLOTS = 8
ForgetReport = dict[str, int]


def record_decision(store: MemoryStore, entity_id: str, action: str, reason: str,
                    evidence: Sequence[dict[str, Any]] = (), score: float = 1.0) -> IdentityDecision:
    """Store one decision about ``entity_id`` (user edits; the resolver's come with segments)."""
    now = time.time()
    decision = IdentityDecision(id=stable_id("dec_", store.user_id, entity_id, action, now), entity_id=entity_id,
                                action=action, score=score, reason=reason, evidence_json=json.dumps(list(evidence)),
                                created_at=now)
    store.upsert_rows("identity_decisions", [decision.model_dump()])
    return decision


def entity_decisions(store: MemoryStore, entity_id: str, limit: int = 10) -> list[IdentityDecision]:
    """The entity's decisions, newest first (segment decisions by segment, then edits by time)."""
    rows = store.scan_rows("identity_decisions", f"entity_id = {sql_literal(entity_id)}")
    rows.sort(key=lambda r: (r["created_at"], r["segment_index"], r["id"]), reverse=True)
    return [IdentityDecision.model_validate(r) for r in rows[:limit]]


def _where_has(ids: Sequence[str]) -> str:
    return f"array_has_any(entity_ids, [{', '.join(sql_literal(i) for i in ids)}])"


def _swap(values: Sequence[str], old: set[str], new: str | None) -> list[str]:
    out = [new if v in old and new is not None else v for v in values if v not in old or new is not None]
    return list(dict.fromkeys(out))


def _retarget_refs(store: MemoryStore, old: set[str], new: str | None, segments: set[tuple[str, int]] | None = None,
                   scrub: Sequence[str] = ()) -> None:
    """Replace (``new``) or remove (``None``) ``old`` ids in traces, key frames, facts and chapters."""
    for table in ("traces", "keyframes", "schemas"):
        rows = store.scan_rows(table, _where_has(sorted(old)))
        if segments is not None and table != "schemas":
            rows = [r for r in rows if (r["source"], r["segment_index"]) in segments]
        if not rows:
            continue
        for r in rows:
            r["entity_ids"] = _swap(r["entity_ids"], old, new)
        if table == "traces":
            for r in rows:
                r["speakers"] = _swap(r.get("speakers") or [], old, new)
                r["summary"] = _scrub(r["summary"], scrub) if scrub else r["summary"]
                if scrub:  # who said what: the forgotten speaker's label goes too
                    r["transcript"] = _scrub(r.get("transcript") or "", scrub)
                    r["quotes"] = [_scrub(q, scrub) for q in r.get("quotes") or []]
                r["text"] = trace_text(Trace.model_validate({k: r[k] for k in Trace.model_fields if k in r}))
            store.upsert_searchable("traces", rows)
        elif table == "schemas":
            for r in rows:
                r["text"] = _scrub(r["text"], scrub) if scrub else r["text"]
                r["title"] = _scrub(r["title"], scrub) if scrub else r["title"]
            store.upsert_searchable("schemas", rows)
        else:
            store.upsert_rows("keyframes", rows)
    if new is not None and segments is None:  # a merge moves every fact; a split only its own (split_entity)
        facts = store.scan_rows("facts", _where_has(sorted(old)))
        for r in facts:
            r["entity_ids"] = _swap(r["entity_ids"], old, new)
        if facts:
            store.upsert_searchable("facts", facts)


def _scrub(text: str, terms: Sequence[str]) -> str:
    """Replace ``Name (person_0003)``, ids and names with ``someone``."""
    for term in sorted({t for t in terms if t}, key=len, reverse=True):
        text = re.sub(rf"{re.escape(term)}\s*\(\s*[a-z]+_\d+\s*\)", "someone", text)
        text = re.sub(rf"\b{re.escape(term)}\b", "someone", text)
    return text


def _recount(store: MemoryStore, entity: Entity) -> Entity:
    rows = store.scan_rows("observations", f"entity_id = {sql_literal(entity.id)}")
    if not rows:
        return entity.model_copy(update={"sightings": 0})
    walls = [r["wall_start"] for r in rows]
    cameras = list(dict.fromkeys([*entity.cameras, *(r["camera_id"] for r in rows)]))
    return entity.model_copy(update={"sightings": len(rows), "first_seen": min(walls), "last_seen": max(walls),
                                     "cameras": cameras})


def _bound_gallery(store: MemoryStore, table: str, entity_id: str) -> None:
    rows = store.scan_rows(table, f"entity_id = {sql_literal(entity_id)}")
    rows.sort(key=lambda r: (-r["quality"], r["id"]))
    if len(rows) > MAX_SLOTS:
        store.delete_rows(table, f"id IN {sql_in([r['id'] for r in rows[MAX_SLOTS:]])}")


def name_entity(store: MemoryStore, entity_id: str, name: str) -> Entity:
    """Give an entity a display name (the previous one becomes an alias) and an identity fact."""
    name = name.strip()
    if not name:
        raise ValueError("name must not be empty; pass the person's or object's name")
    entity = store.get_entity(entity_id)
    aliases = [a for a in dict.fromkeys([*entity.aliases, *([entity.name] if entity.name else [])]) if a != name]
    entity = entity.model_copy(update={"name": name, "aliases": aliases})
    store.upsert_entity(entity)
    store.upsert_facts([Fact(id=stable_id("fct_", store.user_id, entity.id, "name"), entity_ids=[entity.id],
                             text=f"{entity.id} is {name}", kind="identity", importance=1.0, created_at=time.time())])
    record_decision(store, entity.id, "name", f"named {name!r} by the user")
    return entity


def enrol_face(store: MemoryStore, name: str, embedding: Sequence[float], quality: float, reference: str,
               entity_id: str | None = None, threshold: float = 0.363, ambiguous_threshold: float = 0.28,
               margin: float = 0.08, views: Sequence[tuple[Sequence[float], float]] = ()) -> tuple[Entity, str]:
    """Add a reference face under ``name``; returns the entity and how it was chosen.

    Without ``entity_id`` the face goes to the best-matching entity at or above ``threshold``
    (or at or above ``ambiguous_threshold`` when it beats every other entity by ``margin``: the
    user asserts the identity, a profile view in video often scores lower than a frontal still),
    else to a new person entity. ``views`` are extra ``(embedding, quality)`` renderings of the
    same still (e.g. tilted); they take part in matching and become gallery slots too.
    """
    vec = np.asarray(embedding, dtype=np.float32)
    vec = vec / max(float(np.linalg.norm(vec)), 1e-12)
    extra = [(np.asarray(v, dtype=np.float32) / max(float(np.linalg.norm(v)), 1e-12), float(q)) for v, q in views]
    how = "given"
    if entity_id is None:
        scores: dict[str, float] = {}
        for slot in store.face_gallery():
            stored = np.asarray(slot.embedding, dtype=np.float32)
            sim = max(float(np.dot(v, stored)) for v in [vec, *(e for e, _ in extra)])
            scores[slot.entity_id] = max(sim, scores.get(slot.entity_id, -1.0))
        ranked = sorted(scores.items(), key=lambda kv: -kv[1])
        best_id, best = ranked[0] if ranked else (None, -1.0)
        second = ranked[1][1] if len(ranked) > 1 else -1.0
        # A user-asserted reference may also name the clearly best entity in the ambiguous band.
        clear = best >= ambiguous_threshold and best - second >= margin
        if best_id is not None and (best >= threshold or clear):
            entity_id, how = store.get_entity(best_id).id, f"matched the gallery at cosine {best:.3f}"
        else:
            entity_id, how = store.next_entity_id("person"), "no entity matched: new person"
            now = time.time()
            store.upsert_entity(Entity(id=entity_id, kind="person", name=name, description=f"enrolled as {name}",
                                       first_seen=now, last_seen=now))
    entity = store.get_entity(entity_id)
    now = time.time()
    slots = [GalleryFace(id=stable_id("gal_", "enrol", reference, entity.id, *([n] if n else [])), entity_id=entity.id,
                         embedding=[float(x) for x in v], quality=q, created_at=now)
             for n, (v, q) in enumerate([(vec, float(quality)), *extra])]
    store.add_gallery_faces(slots)
    _bound_gallery(store, "gallery_face", entity.id)
    record_decision(store, entity.id, "enrol", f"reference image {reference} enrolled under {name!r}; {how}",
                    [{"kind": "reference_image", "path": reference, "quality": round(float(quality), 3)}])
    return name_entity(store, entity.id, name), how


def merge_entities(store: MemoryStore, source_id: str, target_id: str) -> Entity:
    """Merge ``source_id`` into ``target_id``; the source id then redirects to the target."""
    source, target = store.get_entity(source_id), store.get_entity(target_id)
    if source.id == target.id:
        raise ValueError(f"{source_id} and {target_id} are already the same entity ({target.id})")
    if source.kind != target.kind:
        raise ValueError(f"cannot merge a {source.kind} into a {target.kind}; pick two entities of one kind")
    for table in ("gallery_face", "gallery_body", "gallery_voice", "gallery_object", "identity_decisions"):
        rows = store.scan_rows(table, f"entity_id = {sql_literal(source.id)}")
        if rows:
            store.upsert_rows(table, [{**r, "entity_id": target.id} for r in rows])
    _bound_gallery(store, "gallery_face", target.id)
    _bound_gallery(store, "gallery_body", target.id)
    _bound_gallery(store, "gallery_voice", target.id)
    taken = {(r["source"], r["segment_index"]) for r in store.scan_rows(
        "observations", f"entity_id = {sql_literal(target.id)}")}
    moved = store.scan_rows("observations", f"entity_id = {sql_literal(source.id)}")
    duplicate = [r["id"] for r in moved if (r["source"], r["segment_index"]) in taken]
    if duplicate:
        store.delete_rows("observations", f"id IN {sql_in(duplicate)}")
    keep = [{**r, "entity_id": target.id} for r in moved if r["id"] not in duplicate]
    if keep:
        store.upsert_searchable("observations", keep)
    _retarget_refs(store, {source.id}, target.id)
    aliases = [a for a in dict.fromkeys([*target.aliases, *([source.name] if source.name else []), *source.aliases])
               if a and a != (target.name or source.name)]
    merged = _recount(store, target.model_copy(update={
        "name": target.name or source.name, "aliases": aliases,
        "cameras": list(dict.fromkeys([*target.cameras, *source.cameras]))}))
    store.upsert_entity(merged)
    store.upsert_entity(source.model_copy(update={"merged_into": merged.id}))
    record_decision(store, merged.id, "merge", f"{source.id} merged into {merged.id} by the user",
                    [{"kind": "merge", "from": source.id, "observations_moved": len(keep)}])
    return merged


def split_entity(store: MemoryStore, entity_id: str, observation_ids: Sequence[str]) -> Entity:
    """Move the given observations of an entity (and their segments' references) to a new entity."""
    entity = store.get_entity(entity_id)
    rows = store.scan_rows("observations", f"entity_id = {sql_literal(entity.id)}")
    chosen = [r for r in rows if r["id"] in set(observation_ids)]
    unknown = sorted(set(observation_ids) - {r["id"] for r in chosen})
    if unknown:
        raise ValueError(f"observations {', '.join(unknown)} do not belong to {entity.id}; "
                         f"call entity_get {entity.id} to list its observation ids")
    if not chosen or len(chosen) == len(rows):
        raise ValueError("split needs some, but not all, of the entity's observation ids; "
                         "to rename everything use action='name'")
    new_id = store.next_entity_id(entity.kind)
    segments = {(r["source"], r["segment_index"]) for r in chosen}
    keyframes = {k for r in chosen for k in r["keyframe_ids"]}
    store.upsert_searchable("observations", [{**r, "entity_id": new_id} for r in chosen])
    for table in ("gallery_face", "gallery_body"):
        slots = [r for r in store.scan_rows(table, f"entity_id = {sql_literal(entity.id)}")
                 if r["keyframe_id"] in keyframes]
        if slots:
            store.upsert_rows(table, [{**r, "entity_id": new_id} for r in slots])
    decisions = [r for r in store.scan_rows("identity_decisions", f"entity_id = {sql_literal(entity.id)}")
                 if (r["source"], r["segment_index"]) in segments]
    if decisions:
        store.upsert_rows("identity_decisions", [{**r, "entity_id": new_id} for r in decisions])
    _retarget_refs(store, {entity.id}, new_id, segments=segments)
    _move_split_facts(store, entity.id, new_id, {r["id"] for r in chosen}, segments)
    new = _recount(store, Entity(id=new_id, kind=entity.kind, description=f"split from {entity.id}", cameras=[]))
    store.upsert_entity(new)
    store.upsert_entity(_recount(store, entity))
    record_decision(store, new_id, "split", f"{len(chosen)} observation(s) split from {entity.id} by the user",
                    [{"kind": "split", "from": entity.id, "observations": sorted(r["id"] for r in chosen)}])
    record_decision(store, entity.id, "split", f"{len(chosen)} observation(s) moved to {new_id} by the user")
    return new


def forget_entity(store: MemoryStore, entity_id: str) -> ForgetReport:
    """Erase an entity and every id merged into it; returns how many rows each table lost."""
    row = store.scan_rows("entities", f"id = {sql_literal(entity_id)}", limit=1)
    if not row:
        raise NotFoundError(entity_id, "call entity_list to find entity ids")
    root = store.get_entity(entity_id)
    ids, frontier = {root.id}, [root.id]
    while frontier:  # every id that redirects into it
        found = store.scan_rows("entities", f"merged_into IN {sql_in(frontier)}")
        frontier = [r["id"] for r in found if r["id"] not in ids]
        ids.update(frontier)
    entities = store.scan_rows("entities", f"id IN {sql_in(sorted(ids))}")
    terms = sorted({*ids, *(r["name"] for r in entities if r["name"]), *(a for r in entities for a in r["aliases"])})
    report: ForgetReport = {}
    in_ids = f"entity_id IN {sql_in(sorted(ids))}"
    for table in ("gallery_face", "gallery_body", "gallery_voice", "gallery_object", "observations",
                  "identity_decisions"):
        report[table] = store.delete_rows(table, in_ids)
    report["facts"] = store.delete_rows("facts", _where_has(sorted(ids)))
    frames = store.scan_rows("keyframes", _where_has(sorted(ids)))
    only = [r["id"] for r in frames if set(r["entity_ids"]) <= ids]
    report["keyframes"] = store.delete_rows("keyframes", f"id IN {sql_in(only)}") if only else 0
    if only:
        for table in ("traces", "observations"):
            refs = [r for r in store.scan_rows(table, f"array_has_any(keyframe_ids, {_sql_list(only)})")]
            for r in refs:
                r["keyframe_ids"] = [k for k in r["keyframe_ids"] if k not in set(only)]
                if table == "traces":
                    r["text"] = trace_text(Trace.model_validate({k: r[k] for k in Trace.model_fields if k in r}))
            if refs:
                store.upsert_searchable(table, refs)
    report["notes"] = forget_notes(store, ids, terms)
    report["traces"] = len(store.scan_rows("traces", _where_has(sorted(ids))))
    _retarget_refs(store, ids, None, scrub=terms)
    like = " OR ".join(f"text LIKE {sql_literal('%' + t + '%')}" for t in terms)
    mentions = store.scan_rows("observations", like)
    for r in mentions:
        r["text"] = _scrub(r["text"], terms)
    if mentions:
        store.upsert_searchable("observations", mentions)
    report["entities"] = store.delete_rows("entities", f"id IN {sql_in(sorted(ids))}")
    report.update(scrub_references(store, ids, terms, keyframes=only))
    erase_history(store, store.table_names(), SEARCHABLE)
    logger.info("forgot %s (%s): %s", root.id, ", ".join(sorted(ids)), report)
    return report


def forget_notes(store: MemoryStore, ids: set[str], terms: Sequence[str]) -> int:
    """Delete the notes (``memory/store/notes.py``) that link to ``ids`` or name one of ``terms``, and
    the already-spoken rows that cite them; returns how many notes went."""
    from ..search.focus_terms import mentions_name
    from ..store.notes import NOTES_CAMERA
    from ..store.spoken import SpokenMemory

    names = [t for t in terms if t not in ids]
    notes = [r["id"] for r in store.scan_rows("traces", f"camera_id = {sql_literal(NOTES_CAMERA)}")
             if set(r["entity_ids"] or ()) & ids or mentions_name(r["summary"] or "", names)]
    if not notes:
        return 0
    SpokenMemory(store).forget(notes)
    return store.delete_rows("traces", f"id IN {sql_in(notes)}")


def _sql_list(values: Sequence[str]) -> str:
    return "[" + ", ".join(sql_literal(v) for v in values) + "]"
