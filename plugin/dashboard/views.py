"""What each dashboard page shows, read from (and written through) the engine.

Every function here is blocking (LanceDB reads, identity edits) and is called from a worker
thread by :mod:`plugin.dashboard.routes`. Identity edits use the same functions as the
``entity_update`` tool, under the identity service's lock, then tell the engine so running
captures resolve against the edited galleries at once.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

from memory.errors import NotFoundError
from memory.identity.identity_ops import entity_decisions, forget_entity, merge_entities, name_entity, split_entity
from memory.models import Entity
from memory.store.notes import NOTES_CAMERA

__all__ = [
    "edit_entity",
    "entities_page",
    "entity_page",
    "moment_page",
    "notifications_feed",
    "rules_page",
    "search_page",
    "sources_page",
    "timeline_page",
]

#: id prefix → memory level (the same prefixes `memory_get` accepts)
LEVELS = {"trc_": "trace", "obs_": "observation", "sch_": "chapter", "fct_": "fact"}


def _cameras(engine: Any) -> list[str]:
    """Cameras with memories or captures, in name order."""
    found = {s.camera_id for s in engine.store.ingest_sources() if s.camera_id}
    found.update(s.camera_id for s in engine.manifest.sources if s.camera_id)
    found.update(info.camera_id for info in engine.worker.status())
    if engine.store.count_traces(NOTES_CAMERA):
        found.add(NOTES_CAMERA)  # what users and hosts told memory (memory_note, remember)
    return sorted(found)


def sources_page(engine: Any, full: bool = True) -> dict[str, Any]:
    """Captures with live counters and the latest offline alerts; with ``full``, also the cameras in memory
    and row counts (the 2-second status refresh skips those)."""
    captures = []
    for info in engine.worker.status():
        stats = info.stats or {}
        captures.append({**asdict(info), "fps": stats.get("fps_in", 0), "dropped": stats.get("dropped", 0),
                         "reconnects": stats.get("reconnects", 0), "lag": stats.get("lag_s", 0),
                         "last_error": stats.get("last_error") or info.error or "",
                         "offline": info.state in ("reconnecting", "failed")})
    procedural = engine.notifications.procedural
    alerts = [n for rule in ("rule_source_offline", "rule_source_online")
              for n in procedural.decisions(rule_id=rule, limit=5, newest=True)]
    alerts.sort(key=lambda n: n.seq, reverse=True)
    data: dict[str, Any] = {"captures": captures, "alerts": alerts[:5], "now": time.time()}
    if full:
        data["ingested"] = [{"camera_id": s.camera_id, "source": s.source, "segments": s.last_segment_index + 1,
                             "done": s.done, "updated_at": s.updated_at} for s in engine.store.ingest_sources()]
        data["counts"] = engine.store.counts()
    return data


def timeline_page(engine: Any, camera: str | None, offset: int, limit: int) -> dict[str, Any]:
    """One camera's segments in time order, with key frames, transcripts and text read."""
    cameras = _cameras(engine)
    camera = camera or (cameras[0] if cameras else None)
    traces = engine.store.timeline(camera=camera, limit=limit + 1, offset=offset) if camera else []
    more = len(traces) > limit
    return {"camera": camera, "cameras": cameras, "traces": traces[:limit], "offset": offset, "limit": limit,
            "next_offset": offset + limit if more else None, "prev_offset": max(0, offset - limit) if offset else None}


def moment_page(engine: Any, item_id: str, neighbours: int = 3) -> dict[str, Any]:
    """A memory with its neighbours and the people and objects in it (``store.get``)."""
    result = engine.store.get(item_id, neighbors=neighbours)
    item = dict(result.item)
    return {"id": item_id, "level": result.level, "item": item, "before": result.before, "after": result.after,
            "entities": result.entities, "children": result.children,
            "keyframe_ids": list(item.get("keyframe_ids") or [])}


def entities_page(engine: Any, kind: str | None, offset: int, limit: int) -> dict[str, Any]:
    """Entities with a face still each (the best gallery key frame, else a sighting's)."""
    store = engine.store
    entities = store.list_entities(kind=kind or None, limit=limit + 1, offset=offset)
    more = len(entities) > limit
    entities = entities[:limit]
    faces = _face_keyframes(engine, [e.id for e in entities])
    return {"entities": entities, "faces": faces, "kind": kind or "", "total": store.count_entities(kind=kind or None),
            "offset": offset, "next_offset": offset + limit if more else None}


def _face_keyframes(engine: Any, entity_ids: list[str], per_entity: int = 1) -> dict[str, list[str]]:
    """Key-frame ids of each entity's best gallery faces (quality order)."""
    wanted = set(entity_ids)
    slots: dict[str, list[tuple[float, str]]] = {}
    for face in engine.store.face_gallery():
        if face.entity_id in wanted and face.keyframe_id:
            slots.setdefault(face.entity_id, []).append((face.quality, face.keyframe_id))
    out: dict[str, list[str]] = {}
    for entity_id, found in slots.items():
        ids = list(dict.fromkeys(k for _, k in sorted(found, reverse=True)))
        out[entity_id] = ids[:per_entity]
    return out


def entity_page(engine: Any, entity_id: str) -> dict[str, Any]:
    """One entity: faces, names, sightings over time, facts with importance and provenance, decisions."""
    store = engine.store
    entity = store.get_entity(entity_id)
    observations = store.entity_observations(entity.id, limit=50)
    facts = sorted(store.facts(entity.id, limit=50), key=lambda f: -f.importance)
    faces = _face_keyframes(engine, [entity.id], per_entity=8).get(entity.id, [])
    if not faces:
        faces = list(dict.fromkeys(k for o in observations for k in o.keyframe_ids))[:4]
    per_camera: dict[str, int] = {}
    for obs in observations:
        per_camera[obs.camera_id] = per_camera.get(obs.camera_id, 0) + 1
    others = [e for e in store.list_entities(kind=entity.kind, limit=500) if e.id != entity.id]
    return {"entity": entity, "observations": observations, "facts": facts, "faces": faces,
            "per_camera": per_camera, "decisions": entity_decisions(store, entity.id, limit=10),
            "others": others, "redirected": entity.id != entity_id}


def edit_entity(engine: Any, action: str, entity_id: str, *, name: str = "", into_id: str = "",
                observation_ids: list[str] | None = None) -> tuple[Entity | None, str]:
    """Rename, merge, split or forget, as ``entity_update`` does; returns the entity after it and a message.

    Raises:
        ValueError: a missing argument or an edit the identity operations refuse (the message says why).
        NotFoundError: an unknown entity id.
    """
    identity = engine.identity
    with identity.lock:
        if action == "name":
            if not name.strip():
                raise ValueError("type a name first")
            entity: Entity | None = name_entity(engine.store, entity_id, name.strip())
            message = f"{entity_id} is now named {name.strip()}"
        elif action == "merge":
            if not into_id:
                raise ValueError("choose the entity to merge into")
            entity = merge_entities(engine.store, entity_id, into_id)
            message = f"{entity_id} merged into {entity.id}"
        elif action == "split":
            if not observation_ids:
                raise ValueError("tick the sightings to split off first")
            entity = split_entity(engine.store, entity_id, observation_ids)
            message = f"{len(observation_ids)} sighting(s) moved to {entity.id}"
        elif action == "forget":
            forget_entity(engine.store, entity_id)
            entity, message = None, f"{entity_id} forgotten"
        else:
            raise ValueError(f"unknown action {action!r}")
        engine.identity_edited()
    return entity, message


def search_page(engine: Any, query: str, level: str, limit: int = 20) -> dict[str, Any]:
    """Hits of the same search as ``memory_search`` (hybrid by default)."""
    hits = engine.store.search(query, level=level, limit=limit) if query.strip() else []
    return {"query": query, "level": level, "hits": hits}


def rules_page(engine: Any) -> dict[str, Any]:
    """Rules with what the compiler understood and what only a vision model can judge."""
    service = engine.notifications
    return {"rules": service.procedural.list_rules(), "vlm": service.vlm, "cameras": _cameras(engine)}


def notifications_feed(engine: Any, limit: int = 50, sent_only: bool = False) -> dict[str, Any]:
    """The latest notification decisions, newest first."""
    rows = engine.notifications.procedural.decisions(limit=limit, newest=True,
                                                     decision="sent" if sent_only else None)
    return {"notifications": list(reversed(rows)), "sent_only": sent_only}


def level_of(item_id: str) -> str:
    """A readable name for the level of a memory id."""
    return next((name for prefix, name in LEVELS.items() if item_id.startswith(prefix)), "memory")


def link_for(item_id: str) -> str:
    """The dashboard page of any memory or entity id."""
    if item_id.startswith(("person_", "object_")):
        return f"/entities/{item_id}"
    return f"/moments/{item_id}"


def safe_moment(engine: Any, item_id: str) -> dict[str, Any] | None:
    """``moment_page``, or ``None`` for an unknown id."""
    try:
        return moment_page(engine, item_id)
    except NotFoundError:
        return None
