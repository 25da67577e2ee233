"""Arrow schemas of every memory table, and which of them are searchable.

One function, :func:`table_schemas`, returns the schemas for a given embedding dimension; the
migrations create tables from it. Every row carries ``user_id``; the searchable tables
(:data:`SEARCHABLE`) carry a ``text`` column (full-text index) and a ``vector`` column
(``FixedSizeList<float32>[dim]``, cosine distance).
"""

from __future__ import annotations

import pyarrow as pa

SCHEMA_VERSION = 11

META_TABLE = "meta"

#: levels that are searchable, in the order ``level="all"`` searches them.
SEARCHABLE: tuple[str, ...] = ("traces", "observations", "entities", "schemas", "facts")

_str = pa.string()
_f64 = pa.float64()
_i64 = pa.int64()
_strs = pa.list_(pa.string())


def vector_type(dim: int) -> pa.DataType:
    """Return the Arrow type of the ``vector`` column for ``dim``."""
    return pa.list_(pa.float32(), dim)


#: notification columns added by migration 2 (procedural memory: entity, severity, payload, cursor).
NOTIFICATION_V2_COLUMNS: tuple[tuple[str, pa.DataType], ...] = (
    ("entity_id", _str), ("severity", _str), ("message", _str), ("event_time", _f64),
    ("keyframe_id", _str), ("seq", _i64), ("payload_json", _str))


#: semantic-memory columns added by migration 4: fact edit provenance, camera-context locks.
FACT_V4_COLUMNS: tuple[tuple[str, pa.DataType], ...] = (
    ("key", _str), ("supersedes", _str), ("retired_by", _strs), ("reason", _str), ("confirmations", _i64),
    ("updated_at", _f64))
CAMERA_CONTEXT_V4_COLUMNS: tuple[tuple[str, pa.DataType], ...] = (
    ("notes", _str), ("locked", _strs), ("trace_count", _i64), ("baseline_json", _str))


#: trace column added by migration 6: who spoke (entity ids or source-local voice labels).
TRACE_V6_COLUMNS: tuple[tuple[str, pa.DataType], ...] = (("speakers", _strs),)
#: columns migration 7 adds to ``gallery_face`` (the pose each slot was seen in)
GALLERY_FACE_V7_COLUMNS: tuple[tuple[str, pa.DataType], ...] = (("turn", _f64),)
#: the search card of traces and observations (migration 8; see ``memory/search/cards.py``)
CARD_V8_COLUMNS: tuple[tuple[str, pa.DataType], ...] = (("card", _str),)
#: columns migration 10 adds to every gallery: the segment that wrote a slot and the content it
#: replaced, so a slot counts only once its segment is committed (``memory/identity/galleries.py``)
GALLERY_V10_COLUMNS: tuple[tuple[str, pa.DataType], ...] = (("source", _str), ("segment_index", _i64), ("prior", _str))


def _fields(*fields: tuple[str, pa.DataType] | tuple[str, pa.DataType, bool]) -> list[pa.Field]:
    out = [pa.field("user_id", _str, nullable=False), pa.field("id", _str, nullable=False)]
    for f in fields:
        out.append(pa.field(f[0], f[1], nullable=f[2] if len(f) > 2 else True))
    return out


def meta_schema() -> pa.Schema:
    """Key/value rows: ``schema_version``, ``embedding_dim``, ``embedding_name``."""
    return pa.schema([pa.field("key", _str, nullable=False), pa.field("value", _str), ("updated_at", _f64)])


def table_schemas(dim: int) -> dict[str, pa.Schema]:
    """Return ``{table name: schema}`` for all data tables of DESIGN §4."""
    vec = ("vector", vector_type(dim))
    return {
        "entities": pa.schema(_fields(
            ("kind", _str), ("name", _str), ("aliases", _strs), ("description", _str),
            ("first_seen", _f64), ("last_seen", _f64), ("sightings", _i64), ("cameras", _strs),
            ("merged_into", _str), ("text", _str), vec)),
        "observations": pa.schema(_fields(
            ("entity_id", _str), ("camera_id", _str), ("source", _str), ("segment_index", _i64),
            ("t_start", _f64), ("t_end", _f64), ("wall_start", _f64), ("text", _str),
            ("keyframe_ids", _strs), ("confidence", _f64), vec, *CARD_V8_COLUMNS)),
        "traces": pa.schema(_fields(
            ("camera_id", _str), ("source", _str), ("segment_index", _i64), ("t_start", _f64),
            ("t_end", _f64), ("wall_start", _f64), ("summary", _str), ("entity_ids", _strs),
            ("objects", _strs), ("ocr_text", _str), ("transcript", _str), ("quotes", _strs),
            ("keyframe_ids", _strs), ("level", _str), ("text", _str), vec, *TRACE_V6_COLUMNS, *CARD_V8_COLUMNS)),
        "schemas": pa.schema(_fields(
            ("camera_id", _str), ("source", _str), ("t_start", _f64), ("t_end", _f64),
            ("wall_start", _f64), ("wall_end", _f64), ("title", _str), ("text", _str),
            ("trace_ids", _strs), ("entity_ids", _strs), ("updated_at", _f64), vec)),
        "facts": pa.schema(_fields(
            ("entity_ids", _strs), ("text", _str), ("kind", _str), ("importance", _f64),
            ("evidence_ids", _strs), ("status", _str), ("superseded_by", _str), ("created_at", _f64),
            *FACT_V4_COLUMNS, vec)),
        "camera_context": pa.schema(_fields(
            ("camera_id", _str), ("scene_type", _str), ("routines", _strs), ("anomaly_baseline", _str),
            ("revision", _i64), ("updated_at", _f64), *CAMERA_CONTEXT_V4_COLUMNS)),
        "semantic_state": pa.schema(_fields(
            ("kind", _str), ("subject", _str), ("observed", _i64), ("consolidated_at", _i64), ("runs", _i64),
            ("skipped", _i64), ("last_run_at", _f64))),
        "rules": pa.schema(_fields(
            ("text", _str), ("conditions_json", _str), ("camera_ids", _strs), ("severity", _str),
            ("cooldown_s", _f64), ("enabled", pa.bool_()), ("created_at", _f64))),
        "notifications": pa.schema(_fields(
            ("rule_id", _str), ("trace_id", _str), ("camera_id", _str), ("decision", _str),
            ("reason", _str), ("channels_json", _str), ("created_at", _f64), *NOTIFICATION_V2_COLUMNS)),
        "gallery_face": pa.schema(_fields(
            ("entity_id", _str), ("embedding", pa.list_(pa.float32())), ("quality", _f64),
            ("keyframe_id", _str), ("created_at", _f64), *GALLERY_FACE_V7_COLUMNS, *GALLERY_V10_COLUMNS)),
        "gallery_body": pa.schema(_fields(
            ("entity_id", _str), ("embedding", pa.list_(pa.float32())), ("quality", _f64),
            ("keyframe_id", _str), ("created_at", _f64), *GALLERY_V10_COLUMNS)),
        "gallery_voice": pa.schema(_fields(
            ("entity_id", _str), ("embedding", pa.list_(pa.float32())), ("quality", _f64),
            ("keyframe_id", _str), ("created_at", _f64), *GALLERY_V10_COLUMNS)),
        "gallery_object": pa.schema(_fields(
            ("entity_id", _str), ("embedding", pa.list_(pa.float32())), ("quality", _f64),
            ("keyframe_id", _str), ("created_at", _f64), ("label", _str), ("camera_id", _str), *GALLERY_V10_COLUMNS)),
        "identity_decisions": pa.schema(_fields(
            ("entity_id", _str), ("action", _str), ("source", _str), ("camera_id", _str),
            ("segment_index", _i64), ("score", _f64), ("runner_up", _str), ("runner_up_score", _f64),
            ("reason", _str), ("evidence_json", _str), ("created_at", _f64))),
        "keyframes": pa.schema(_fields(
            ("camera_id", _str), ("source", _str), ("segment_index", _i64), ("t", _f64),
            ("wall_time", _f64), ("quality", _f64), ("width", _i64), ("height", _i64),
            ("entity_ids", _strs), ("jpeg", pa.binary()))),
        "id_alloc": pa.schema(_fields(
            ("kind", _str), ("value", _i64), ("entity_id", _str), ("created_at", _f64))),
        "spoken": pa.schema(_fields(
            ("evidence_id", _str), ("notification_id", _str), ("camera_id", _str), ("text", _str),
            ("spoken_at", _f64), ("created_at", _f64))),
        "ingest_log": pa.schema(_fields(
            ("source", _str), ("camera_id", _str), ("last_segment_index", _i64), ("last_t_end", _f64),
            ("done", pa.bool_()), ("source_size", _i64), ("source_mtime", _f64), ("updated_at", _f64))),
    }
