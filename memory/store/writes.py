"""The store's writes: rows, embeddings, segments (idempotent, resume point last), ingest state, entity ids.

:class:`StoreWrites` is one half of :class:`~memory.store.facade.MemoryStore` (the other is
:class:`~memory.store.reads.StoreReads`); it runs on the store's connection and state, which the
façade opens and holds.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from ..errors import MemoryStoreError
from ..identity.galleries import GALLERY_TABLES, restored, stamped, visible
from ..models import Chapter, Entity, EntityKind, Fact, GalleryFace, IngestState, SegmentWrite, stable_id
from ..search.cards import CARD_COLUMN, CARD_COLUMNS, add_cards, card_json
from ..search.modes import sql_in, sql_literal
from .rows import entity_text, trace_text
from .schema import SEARCHABLE

logger = logging.getLogger(__name__)

#: texts whose vectors the store keeps for reuse (entity texts repeat segment after segment)
EMBED_CACHE = 2048
#: entities whose observation counts the store keeps between segments
SEEN_ENTITIES = 4096
#: write operations between two ``optimize()`` passes over the tables written.
OPTIMIZE_EVERY = 50


class StoreWrites:
    """The write methods of :class:`~memory.store.facade.MemoryStore`."""

    # ------------------------------------------------------------------ low-level writes

    def _rows(self, name: str, records: Sequence[dict[str, Any]]) -> pa.Table:
        schema = self._schemas.get(name)
        if schema is None:  # fixed once the store is open (migrations run in open()); fetching it costs a round trip
            schema = self._schemas[name] = self._table(name).schema
        rows = [{**r, "user_id": self.user_id} for r in records]
        if name in CARD_COLUMNS and CARD_COLUMN in schema.names:  # the search card, from the row as written
            rows = [{**r, CARD_COLUMN: card_json(name, r)} for r in rows]
        return pa.Table.from_pylist(rows, schema=schema)

    def _upsert(self, name: str, records: Sequence[dict[str, Any]]) -> None:
        if not records:
            return
        table = self._table(name)
        (table.merge_insert(["user_id", "id"]).when_matched_update_all().when_not_matched_insert_all()
         .execute(self._rows(name, records)))
        self._written(name)

    def _append(self, name: str, records: Sequence[dict[str, Any]]) -> int | None:
        """Append rows; returns the table version committed (None when there was nothing to write)."""
        if not records:
            return None
        version = int(self._table(name).add(self._rows(name, records)).version)
        self._written(name)
        return version

    def _written(self, name: str) -> None:
        self._dirty.add(name)
        if name == "entities" and self._retriever is not None:
            self._retriever.invalidate()  # renames and merges reach the next search at once
        if self._maintainer is not None:
            self._maintainer.poke(name)  # compacted and indexed off the write path
            return
        if not self.maintain:
            return
        self._writes_since_optimize += 1
        if self._writes_since_optimize >= OPTIMIZE_EVERY:
            self.optimize()

    def _embed(self, texts: list[str]) -> np.ndarray:
        """Vectors of ``texts``: recent texts from the cache, the rest embedded in batches of similar length.

        A stream writes the same entity texts segment after segment, and a batch is padded to its
        longest text, so one long trace text made every short observation cost as much as it.
        """
        out = np.empty((len(texts), self.embedder.dim), dtype=np.float32)
        missing: dict[str, list[int]] = {}
        with self._embed_lock:
            for i, text in enumerate(texts):
                cached = self._embedded.get(text)
                if cached is None:
                    missing.setdefault(text, []).append(i)
                else:
                    self._embedded.move_to_end(text)
                    out[i] = cached
        fresh = sorted(missing, key=len)
        start = 0
        for end in range(1, len(fresh) + 1):
            if end < len(fresh) and len(fresh[end]) <= 2 * max(len(fresh[start]), 32):
                continue
            batch = fresh[start:end]
            vectors = self.embedder.embed(batch)
            if vectors.shape != (len(batch), self.embedder.dim):
                raise MemoryStoreError(f"embedder {self.embedder.name!r} returned shape {vectors.shape}, "
                                       f"expected ({len(batch)}, {self.embedder.dim})")
            with self._embed_lock:
                for text, vector in zip(batch, vectors):
                    out[missing[text]] = vector
                    self._embedded[text] = vector
                while len(self._embedded) > EMBED_CACHE:
                    self._embedded.popitem(last=False)
            start = end
        return out

    def bulk_append(self, name: str, rows: pa.Table) -> None:
        """Append pre-built Arrow rows (with ``vector``) to table ``name``; for benchmarks and imports."""
        if name in CARD_COLUMNS and CARD_COLUMN in self._table(name).schema.names:
            rows = add_cards(name, rows)
        self._table(name).add(rows)
        self._written(name)

    # ------------------------------------------------------------------ plain tables (memory/procedural.py)

    def upsert_rows(self, name: str, rows: Sequence[dict[str, Any]]) -> None:
        """Insert or replace rows keyed by ``id`` in a table without vectors (``rules``, ``notifications``…)."""
        if name in SEARCHABLE:
            raise ValueError(f"table {name!r} is searchable; write it through its typed method")
        self._upsert(name, rows)

    def table_version(self, name: str) -> int:
        """The latest committed version of table ``name`` (changes with every write, from any process)."""
        return int(self._table(name).version)

    def scan_rows(self, name: str, where: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
        """This user's rows of table ``name`` matching the SQL filter ``where`` (``user_id`` excluded)."""
        return [{k: v for k, v in r.items() if k != "user_id"} for r in self._scan(name, where, limit=limit)]

    def delete_rows(self, name: str, where: str) -> int:
        """Delete this user's rows of table ``name`` matching ``where``; returns how many were deleted."""
        table = self._table(name)
        where = self._user_where(where)
        count = table.count_rows(where)
        if count:
            table.delete(where)
            self._written(name)
        return count

    # ------------------------------------------------------------------ segments

    def write_segment(self, seg: SegmentWrite) -> None:
        """Commit one segment idempotently; ``ingest_log`` is written last (the resume point).

        One commit per table the segment has rows for. Rows of an earlier run of the same segment
        that this run no longer produces are deleted; a segment past anything an earlier run can
        have written (the resume point + 1, the one that might have been in flight) skips that check.
        """
        previous = self._states.get(seg.source) or self.ingest_state(seg.source)
        if seg.source not in self._fresh_from:
            self._fresh_from[seg.source] = (previous.last_segment_index + 2) if previous is not None else 0
        rewrite = seg.segment_index < self._fresh_from[seg.source]
        # From here on this index may have rows (a failed write retried in this process is a rewrite).
        self._fresh_from[seg.source] = max(self._fresh_from[seg.source], seg.segment_index + 1)
        texts = [trace_text(seg.trace)] + [o.text for o in seg.observations] + [entity_text(e) for e in seg.entities]
        vectors = self._embed(texts)
        n_obs = len(seg.observations)
        trace_row = {**seg.trace.model_dump(), "text": texts[0], "vector": vectors[0]}
        obs_rows = [{**o.model_dump(), "vector": vectors[1 + i]} for i, o in enumerate(seg.observations)]
        # A fresh segment's rows cannot exist yet: appending costs the same at any table size, where
        # an upsert joins against every stored id (the cost of a segment grew with the stream).
        put = self._upsert if rewrite else self._append
        put("traces", [trace_row])
        counted = False
        if rewrite:
            self._upsert("observations", obs_rows)
            self._delete_stale("observations", seg, [o.id for o in seg.observations])
        elif obs_rows:
            counted = self._count_appended(obs_rows, self._append("observations", obs_rows))
        # Sightings are counted from the observations just written, not carried forward by the
        # caller, so re-running a segment after a crash can never count it twice. The segment's
        # entities leave with the counts written, for the post-commit hooks (semantic memory).
        seg.entities = [e.model_copy(update={"sightings": self._sightings(e.id, counted)}) for e in seg.entities]
        ent_rows = [{**e.model_dump(), "text": texts[1 + n_obs + i], "vector": vectors[1 + n_obs + i]}
                    for i, e in enumerate(seg.entities)]
        self._upsert("entities", ent_rows)
        if not seg.enrichment:  # the second write of a live_latency segment never touches identity
            for name, slots in (("gallery_face", seg.gallery_faces), ("gallery_body", seg.gallery_bodies),
                                ("gallery_voice", seg.gallery_voices), ("gallery_object", seg.gallery_objects)):
                self._write_slots(name, seg, [s.model_dump() for s in slots], rewrite)
        put("identity_decisions", [d.model_dump() for d in seg.decisions])  # ids name the segment
        put("keyframes", [k.model_dump() for k in seg.keyframes])
        if rewrite:
            self._delete_stale("keyframes", seg, [k.id for k in seg.keyframes])

        last = seg.segment_index
        done = False
        if previous is not None and previous.last_segment_index > last:
            last, done = previous.last_segment_index, previous.done
        state = IngestState(source=seg.source, camera_id=seg.camera_id, last_segment_index=last,
                            last_t_end=max(seg.trace.t_end, previous.last_t_end if previous else 0.0),
                            done=done, source_size=seg.source_size, source_mtime=seg.source_mtime,
                            updated_at=time.time())
        self._write_state(state)
        logger.debug("wrote segment %s#%d (%d observations, %d keyframes)", seg.source, seg.segment_index,
                     n_obs, len(seg.keyframes))

    def _write_slots(self, name: str, seg: SegmentWrite, rows: list[dict[str, Any]], rewrite: bool) -> None:
        """Write a segment's gallery slots, naming the segment and keeping what each replaces
        (``memory/identity/galleries.py``); a re-run restores the slots its first attempt wrote and it no longer does."""
        if rows:
            stored = {r["id"]: r for r in self._scan(name, f"id IN {sql_in([r['id'] for r in rows])}")}
            self._upsert(name, stamped(rows, stored, seg.source, seg.segment_index, self._commit_points))
        if rewrite:
            where = f"source = {sql_literal(seg.source)} AND segment_index = {int(seg.segment_index)}"
            if rows:
                where += f" AND id NOT IN {sql_in([r['id'] for r in rows])}"
            self._restore_slots(name, self._scan(name, where))

    def _restore_slots(self, name: str, rows: list[dict[str, Any]]) -> None:
        """Put gallery slots back as they were before their (uncommitted) segment wrote them."""
        self._replace_slots(name, rows, [restored(r) for r in rows])

    def _replace_slots(self, name: str, rows: list[dict[str, Any]], new: list[dict[str, Any] | None]) -> None:
        """Write ``new[i]`` in place of ``rows[i]``; a ``None`` deletes that row."""
        self._upsert(name, [r for r in new if r is not None])
        gone = [r["id"] for r, n in zip(rows, new) if n is None]
        if gone:
            self.delete_rows(name, f"id IN {sql_in(gone)}")

    def _commit_points(self) -> dict[str, int]:
        """``source -> last committed segment index`` from the ingest log (every writer's)."""
        return {r["source"]: int(r["last_segment_index"])
                for r in self._scan("ingest_log", columns=["source", "last_segment_index"])}

    def _slots(self, name: str) -> list[dict[str, Any]]:
        """The gallery rows of ``name`` as identity sees them: segments' slots once committed."""
        rows = self._scan(name)
        if not any(r.get("source") for r in rows):
            return rows
        points = self._commit_points()
        return [v for r in rows if (v := visible(r, points)) is not None]

    def _count_appended(self, rows: Sequence[dict[str, Any]], version: int | None) -> bool:
        """Add appended observation rows to the per-entity counts; False when the counts were dropped.

        The counts stay valid only while this process made every commit to the table since they
        were taken (the version advanced by exactly this append); any other commit (another writer,
        an identity edit, a compaction) drops them and they are counted again.
        """
        if version is None or self._seen_version is None or version != self._seen_version + 1 \
                or len(self._seen) > SEEN_ENTITIES:
            self._seen.clear()
        else:
            for row in rows:
                if row["entity_id"] in self._seen:
                    self._seen[row["entity_id"]] += 1
        self._seen_version = version
        return version is not None

    def _sightings(self, entity_id: str, counted: bool = False) -> int:
        """Segments in which ``entity_id`` has an observation.

        ``counted``: this segment's observations were just appended and added to the kept counts,
        which then stand in for a scan of the table (whose cost grows with the stream).
        """
        if counted and entity_id in self._seen:
            return self._seen[entity_id]
        n = self._table("observations").count_rows(self._user_where(f"entity_id = {sql_literal(entity_id)}"))
        if counted:
            self._seen[entity_id] = n
        return n

    def _delete_stale(self, name: str, seg: SegmentWrite, keep: list[str]) -> None:
        """Delete rows of this segment that a re-run no longer produces."""
        where = (f"user_id = {sql_literal(self.user_id)} AND source = {sql_literal(seg.source)} "
                 f"AND segment_index = {int(seg.segment_index)}")
        if keep:
            where += f" AND id NOT IN {sql_in(keep)}"
        table = self._table(name)
        if table.count_rows(where):
            table.delete(where)
            self._written(name)

    def _write_state(self, state: IngestState) -> None:
        """Write the resume record of ``state.source`` (one commit).

        A record this process has written before is updated in place: an update of one row costs
        about a third less CPU than a merge-insert, which joins the new row against the table.
        Should the row be gone (another process reset the source), it is inserted.
        """
        row_id = stable_id("ing_", self.user_id, state.source)
        known = state.source in self._states
        self._states[state.source] = state
        if known:
            where = f"user_id = {sql_literal(self.user_id)} AND id = {sql_literal(row_id)}"
            if self._table("ingest_log").update(where=where, values=state.model_dump()).rows_updated:
                self._written("ingest_log")
                return
        self._upsert("ingest_log", [{**state.model_dump(), "id": row_id}])

    # ------------------------------------------------------------------ entities, chapters, facts, galleries

    def upsert_entity(self, entity: Entity) -> None:
        """Insert or replace one entity (the caller sends the full updated record)."""
        text = entity_text(entity)
        self._upsert("entities", [{**entity.model_dump(), "text": text, "vector": self._embed([text])[0]}])

    def upsert_chapters(self, chapters: Sequence[Chapter]) -> None:
        """Insert or replace chapters (level ``schemas``)."""
        vectors = self._embed([c.text for c in chapters]) if chapters else []
        self._upsert("schemas", [{**c.model_dump(), "vector": v} for c, v in zip(chapters, vectors)])

    def upsert_facts(self, facts: Sequence[Fact]) -> None:
        """Insert or replace facts (level ``facts``)."""
        vectors = self._embed([f.text for f in facts]) if facts else []
        self._upsert("facts", [{**f.model_dump(), "vector": v} for f, v in zip(facts, vectors)])

    def add_gallery_faces(self, faces: Sequence[GalleryFace]) -> None:
        """Insert or replace face-gallery slots."""
        self._upsert("gallery_face", [f.model_dump() for f in faces])

    def upsert_searchable(self, name: str, rows: Sequence[dict[str, Any]]) -> None:
        """Insert or replace full rows of a searchable table, re-embedding their ``text`` (identity edits)."""
        if name not in SEARCHABLE:
            raise ValueError(f"table {name!r} is not searchable; use upsert_rows")
        rows = [{k: v for k, v in r.items() if k not in ("vector", "user_id")} for r in rows]
        vectors = self._embed([r["text"] for r in rows]) if rows else []
        self._upsert(name, [{**r, "vector": v} for r, v in zip(rows, vectors)])

    # ------------------------------------------------------------------ ingest state

    def mark_source_done(self, source: str, camera_id: str = "") -> None:
        """Record that ``source`` was ingested to its end."""
        state = self.ingest_state(source) or IngestState(source=source, camera_id=camera_id)
        self._write_state(state.model_copy(update={"done": True, "updated_at": time.time()}))

    def reset_source(self, source: str) -> None:
        """Delete the traces, observations, key frames and resume point of ``source`` (a changed file).

        Entities, their gallery slots, chapters and facts are kept: they outlive one file. The
        slots of its committed segments stop naming the source (they count without its resume
        point); those of a segment that never committed are put back as they were.
        """
        self._states.pop(source, None)
        self._fresh_from.pop(source, None)
        points = self._commit_points()
        for name in GALLERY_TABLES:
            rows = self._scan(name, f"source = {sql_literal(source)}")
            shown = [visible(r, points) for r in rows]
            self._replace_slots(name, rows, [
                None if v is None else
                {**v, **({"source": None, "segment_index": None} if v["source"] == source else {}), "prior": None}
                for v in shown])
        where = f"user_id = {sql_literal(self.user_id)} AND source = {sql_literal(source)}"
        for name in ("traces", "observations", "keyframes", "ingest_log"):
            table = self._table(name)
            if table.count_rows(where):
                table.delete(where)
                self._written(name)
        logger.info("reset source %s", source)

    # ------------------------------------------------------------------ entity ids

    def next_entity_id(self, kind: EntityKind, key: str | None = None) -> str:
        """A new id of ``kind`` (``person_0001``, …), unique across every process writing this store.

        Ids are never reused, even after a forget. With ``key``, the same key always gets the same
        id (a segment re-run after a crash re-creates the same entities); see :mod:`memory.identity.ids`.
        """
        self._table("id_alloc")  # raises when the store is not open
        return self._ids.allocate(kind, key)

    def _highest_number(self, kind: str) -> int:
        """The highest ``kind_NNNN`` number any table refers to (seeds a new id counter)."""
        pattern = re.compile(rf"^{kind}_(\d+)$")
        ids = [r["id"] for r in self._scan("entities", f"kind = {sql_literal(kind)}", columns=["id"])]
        for table in ("gallery_face", "gallery_body", "identity_decisions"):
            ids += [r["entity_id"] for r in self._scan(table, columns=["entity_id"])]
        return max((int(m.group(1)) for i in ids if i and (m := pattern.match(i))), default=0)
