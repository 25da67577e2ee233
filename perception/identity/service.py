"""One identity service per user: the commit lock, the shared galleries and the entity cache.

Every driver of an engine (each file ingest, each live capture) resolves faces against the
*same* face and body galleries, under the *same* lock, so a person first seen on camera A is
recognised on camera B while both run. Identity edits (name, enrol, merge, split, forget) call
:meth:`IdentityService.refresh`, which reloads the galleries in place and drops the entity cache,
so the edit reaches running captures at their next segment. Another process editing the same
local store bumps an epoch file beside it (:meth:`IdentityService.bump_epoch`); the service
checks that file's stamp before each segment and refreshes when it changed. Where no such file can
work (an object store, many hosts), the engine passes its own ``stamp`` (the identity tables'
versions), so identities written or edited by other processes reach this one the same way.

Pending (weak) evidence stays per source: it is only meaningful within one stream.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from memory.errors import NotFoundError
from memory.models import Entity, EntityKind
from perception.identity.reid import Gallery, Slot, unit
from perception.identity.resolver import Resolver
from perception.settings import SFACE_MATCH_THRESHOLD

__all__ = ["EPOCH_FILE", "IdentityService", "bump_epoch"]

logger = logging.getLogger(__name__)

#: file beside a local store whose change tells other processes that identities were edited
EPOCH_FILE = ".identity-epoch"


def _epoch_path(uri: str | None) -> Path | None:
    if not uri or "://" in uri:
        return None
    return Path(uri) / EPOCH_FILE


def bump_epoch(uri: str | None) -> None:
    """Tell every process using the local store at ``uri`` that identities were edited."""
    path = _epoch_path(uri)
    if path is None or not path.parent.is_dir():
        return
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(str(os.times().elapsed), encoding="utf-8")
    os.replace(tmp, path)


class IdentityService:
    """The per-user identity state shared by every driver of an engine (see the module docstring)."""

    def __init__(self, store: Any, match_threshold: float = SFACE_MATCH_THRESHOLD, max_slots: int = 8,
                 stamp: Callable[[], object] | None = None) -> None:
        self.store = store
        self.match_threshold = match_threshold
        self.max_slots = max_slots
        #: held around analysis + write of a segment: identity decisions are serialised per user
        self.lock = threading.RLock()
        self.faces = Gallery(max_slots=max_slots, diverse_below=0.9)
        self.bodies = Gallery(max_slots=max_slots, diverse_below=0.97, min_quality=0.3)
        #: voice galleries (CAM++) of people, and appearance galleries of object entities
        self.voices = Gallery(max_slots=max_slots, diverse_below=0.95)
        self.objects = Gallery(max_slots=max_slots, diverse_below=0.95)
        #: object entity → (class label, camera) it is re-identified on
        self.object_meta: dict[str, tuple[str, str]] = {}
        self.reserved: set[str] = set()
        self._entities: dict[str, Entity] = {}
        self._epoch_path = _epoch_path(getattr(store, "uri", None))
        self._stamp_fn = stamp
        self._epoch: object = None
        self.refreshes = 0
        self.refresh()

    # ------------------------------------------------------------------ state

    def refresh(self) -> None:
        """Reload the galleries from the store (in place) and forget cached entities."""
        with self.lock:
            faces = Gallery.from_rows(self.store.face_gallery(), max_slots=self.max_slots, diverse_below=0.9)
            self.faces.entities.clear()
            self.faces.entities.update(faces.entities)
            self.bodies.entities.clear()
            body_rows = getattr(self.store, "body_gallery", None)
            for row in (body_rows() if body_rows is not None else []):
                self.bodies.seed(row.entity_id, Slot(row.id, unit(np.asarray(row.embedding)), row.quality,
                                                     row.keyframe_id, row.created_at))
            self.object_meta.clear()
            for gallery, loader in ((self.voices, "voice_gallery"), (self.objects, "object_gallery")):
                gallery.entities.clear()
                rows = getattr(self.store, loader, None)
                for row in (rows() if rows is not None else []):
                    gallery.seed(row.entity_id, Slot(row.id, unit(np.asarray(row.embedding)), row.quality,
                                                     row.keyframe_id, row.created_at))
                    if loader == "object_gallery":
                        self.object_meta[row.entity_id] = (row.label, row.camera_id)
            self._entities.clear()
            self._epoch = self._stamp()
            self.refreshes += 1

    def edited(self) -> None:
        """An identity edit was committed by this process: refresh now and tell other processes."""
        self.refresh()
        bump_epoch(getattr(self.store, "uri", None))
        self._epoch = self._stamp()

    def check(self) -> None:
        """Refresh when another process edited identities since the last look (cheap: one stat)."""
        stamp = self._stamp()
        if stamp != self._epoch:
            logger.info("identities were edited by another process; reloading the galleries")
            self.refresh()

    def _stamp(self) -> object:
        if self._stamp_fn is not None:
            return self._stamp_fn()
        if self._epoch_path is None:
            return None
        try:
            return self._epoch_path.stat().st_mtime_ns
        except OSError:
            return None

    # ------------------------------------------------------------------ resolvers and entities

    def resolver(self) -> Resolver:
        """A resolver for one source: shared galleries and id reservations, its own pending evidence."""
        resolver = Resolver([], self, match_threshold=self.match_threshold,
                            new_threshold=min(0.28, self.match_threshold), max_slots=self.max_slots)
        resolver.faces, resolver.bodies, resolver._reserved = self.faces, self.bodies, self.reserved
        return resolver

    def voice_resolver(self, match_threshold: float = 0.65) -> Any:
        """A voice resolver for one source over the shared voice gallery (its own source-local voices)."""
        from perception.identity.voices import VoiceResolver

        return VoiceResolver(self.voices, match_threshold=match_threshold)

    def object_resolver(self, classes: list[str], match_threshold: float = 0.8, min_box_px: int = 48) -> Any:
        """An object resolver over the shared object galleries and id reservations."""
        from perception.identity.objects import ObjectResolver

        return ObjectResolver(self.objects, self.object_meta, self, self.reserved, classes,
                              match_threshold=match_threshold, min_box_px=min_box_px)

    def next_entity_id(self, kind: EntityKind, key: str | None = None) -> str:
        """A new id of ``kind`` from the store's cross-process counter (the same again for claim ``key``)."""
        return self.store.next_entity_id(kind, key)

    def entity(self, entity_id: str) -> Entity | None:
        """The current record of an entity (cache, then store); ``None`` when unknown or forgotten."""
        if entity_id in self._entities:
            return self._entities[entity_id]
        try:
            entity = self.store.get_entity(entity_id)
        except NotFoundError:
            return None
        self._entities[entity.id] = entity
        return entity

    def remember(self, entity: Entity) -> None:
        """Cache the record a segment is about to write."""
        self._entities[entity.id] = entity

    @property
    def known_entities(self) -> list[str]:
        """Entity ids that have at least one face-gallery slot."""
        return sorted(self.faces.entities)
