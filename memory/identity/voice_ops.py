"""Voice enrolment: a user-supplied speech sample becomes a slot of a person's voice gallery.

Enrolment is the only way a voice alone can create a person: the resolver ties voices to people
only through co-occurring faces (:mod:`perception.identity.voices`). Without ``entity_id`` the
voice goes to the person whose voice gallery it matches, else to the person already named
``name``, else to a new person entity with that name.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from ..models import Entity, GalleryVoice, stable_id
from ..search.modes import sql_literal
from ..store.facade import MemoryStore
from .identity_ops import record_decision

__all__ = ["enrol_voice"]

#: voice slots kept per person
MAX_VOICE_SLOTS = 8


def enrol_voice(store: MemoryStore, name: str, embedding: Sequence[float], reference: str,
                entity_id: str | None = None, threshold: float = 0.65) -> tuple[Entity, str]:
    """Add a reference voice under ``name``; returns the entity and how it was chosen.

    Raises:
        NotFoundError: ``entity_id`` is unknown.
        ValueError: ``name`` is empty.
    """
    name = name.strip()
    if not name:
        raise ValueError("name must not be empty; pass the speaker's name")
    vec = np.asarray(embedding, dtype=np.float32)
    vec = vec / max(float(np.linalg.norm(vec)), 1e-12)
    how = "given"
    if entity_id is None:
        scores: dict[str, float] = {}
        for slot in store.voice_gallery():
            sim = float(np.dot(vec, np.asarray(slot.embedding, dtype=np.float32)))
            scores[slot.entity_id] = max(sim, scores.get(slot.entity_id, -1.0))
        best_id, best = max(scores.items(), key=lambda kv: kv[1], default=(None, -1.0))
        named = [e for e in store.list_entities(kind="person", limit=10_000)
                 if name.lower() in {n.lower() for n in [e.name or "", *e.aliases]}]
        if best_id is not None and best >= threshold:
            entity_id, how = store.get_entity(best_id).id, f"matched the voice gallery at cosine {best:.3f}"
        elif named:
            entity_id, how = named[0].id, f"the person already named {name}"
        else:
            entity_id, how = store.next_entity_id("person"), "no voice or name matched: new person"
            now = time.time()
            store.upsert_entity(Entity(id=entity_id, kind="person", name=name,
                                       description=f"enrolled by voice as {name}", first_seen=now, last_seen=now))
    entity = store.get_entity(entity_id)
    if entity.kind != "person":
        raise ValueError(f"{entity.id} is an object; a voice can only be enrolled for a person")
    if entity.name is None:
        entity = entity.model_copy(update={"name": name})
        store.upsert_entity(entity)
    now = time.time()
    slot = GalleryVoice(id=stable_id("gv_", "enrol", reference, entity.id), entity_id=entity.id,
                        embedding=[float(x) for x in vec], quality=1.0, created_at=now)
    store.upsert_rows("gallery_voice", [slot.model_dump()])
    rows = store.scan_rows("gallery_voice", f"entity_id = {sql_literal(entity.id)}")
    rows.sort(key=lambda r: (-r["quality"], -r["created_at"], r["id"]))
    for extra in rows[MAX_VOICE_SLOTS:]:
        store.delete_rows("gallery_voice", f"id = {sql_literal(extra['id'])}")
    record_decision(store, entity.id, "enrol_voice", f"voice sample {reference} enrolled as {name} ({how})")
    return entity, how
