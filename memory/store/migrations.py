"""Ordered schema migrations, applied when a store is opened.

Register a migration with ``@migration(version)``; :func:`apply_migrations` runs every migration
newer than the version recorded in the ``meta`` table, in order, recording each one as it
completes. Version 1 creates all tables. A store recorded at a version newer than the code knows
raises :class:`SchemaVersionError` rather than being touched.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import lancedb
import pyarrow as pa

from ..errors import SchemaVersionError
from ..identity.galleries import GALLERY_TABLES
from ..search.cards import CARD_COLUMN, CARD_COLUMNS, card_sql
from .schema import (
    CAMERA_CONTEXT_V4_COLUMNS,
    FACT_V4_COLUMNS,
    GALLERY_FACE_V7_COLUMNS,
    GALLERY_V10_COLUMNS,
    NOTIFICATION_V2_COLUMNS,
    TRACE_V6_COLUMNS,
    table_schemas,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class MigrationContext:
    """What a migration may use: the connection and the embedding dimension."""

    db: lancedb.DBConnection
    dim: int


MigrationFn = Callable[[MigrationContext], None]
_REGISTRY: dict[int, MigrationFn] = {}


def migration(version: int) -> Callable[[MigrationFn], MigrationFn]:
    """Register ``fn`` as the migration that brings the store to ``version``."""

    def register(fn: MigrationFn) -> MigrationFn:
        if version in _REGISTRY:
            raise ValueError(f"migration {version} is registered twice ({_REGISTRY[version].__name__}, {fn.__name__})")
        _REGISTRY[version] = fn
        return fn

    return register


def latest_version() -> int:
    """The highest registered migration version."""
    return max(_REGISTRY)


def apply_migrations(ctx: MigrationContext, current: int, record: Callable[[int], None]) -> int:
    """Run migrations newer than ``current`` in order, calling ``record(version)`` after each."""
    latest = latest_version()
    if current > latest:
        raise SchemaVersionError(
            f"the memory store is at schema version {current} but this ReflectWorld knows up to {latest}; "
            "upgrade reflectworld or point `memory.uri` at another directory")
    for version in sorted(v for v in _REGISTRY if v > current):
        logger.info("applying memory migration %d (%s)", version, _REGISTRY[version].__name__)
        _REGISTRY[version](ctx)
        record(version)
        current = version
    return current


@migration(1)
def create_tables(ctx: MigrationContext) -> None:
    """Create every table of DESIGN §4 (idempotent: existing tables are kept)."""
    for name, schema in table_schemas(ctx.dim).items():
        ctx.db.create_table(name, schema=schema, exist_ok=True)


def _add_null_columns(table: lancedb.table.Table, columns: tuple[tuple[str, pa.DataType], ...]) -> None:
    """Add the ``columns`` the table lacks; existing rows hold null there."""
    missing = [pa.field(col, kind) for col, kind in columns if col not in table.schema.names]
    if missing:
        table.add_columns(pa.schema(missing))


@migration(2)
def procedural_memory(ctx: MigrationContext) -> None:
    """Add entity/severity/message/key-frame/cursor/payload columns to ``notifications``."""
    _add_null_columns(ctx.db.open_table("notifications"), NOTIFICATION_V2_COLUMNS)


@migration(3)
def identity_decisions(ctx: MigrationContext) -> None:
    """Add the ``identity_decisions`` table (why an entity got each sighting)."""
    ctx.db.create_table("identity_decisions", schema=table_schemas(ctx.dim)["identity_decisions"], exist_ok=True)


@migration(4)
def semantic_memory(ctx: MigrationContext) -> None:
    """Fact provenance and camera-context columns, and the ``semantic_state`` counters."""
    for name, columns in (("facts", FACT_V4_COLUMNS), ("camera_context", CAMERA_CONTEXT_V4_COLUMNS)):
        _add_null_columns(ctx.db.open_table(name), columns)
    ctx.db.create_table("semantic_state", schema=table_schemas(ctx.dim)["semantic_state"], exist_ok=True)


@migration(5)
def id_allocation(ctx: MigrationContext) -> None:
    """Add the ``id_alloc`` table: atomic entity-id counters and claims shared by every writer."""
    ctx.db.create_table("id_alloc", schema=table_schemas(ctx.dim)["id_alloc"], exist_ok=True)


@migration(6)
def voices_and_objects(ctx: MigrationContext) -> None:
    """Voice and object galleries (``gallery_voice``, ``gallery_object``) and who spoke in each trace."""
    schemas = table_schemas(ctx.dim)
    for name in ("gallery_voice", "gallery_object"):
        ctx.db.create_table(name, schema=schemas[name], exist_ok=True)
    _add_null_columns(ctx.db.open_table("traces"), TRACE_V6_COLUMNS)


@migration(7)
def face_poses(ctx: MigrationContext) -> None:
    """The pose of every face slot (``gallery_face.turn``); slots stored before it count as frontal."""
    table = ctx.db.open_table("gallery_face")
    missing = {col: "CAST(0.0 AS DOUBLE)" for col, _ in GALLERY_FACE_V7_COLUMNS if col not in table.schema.names}
    if missing:
        table.add_columns(missing)


@migration(8)
def search_cards(ctx: MigrationContext) -> None:
    """The ``card`` column of traces and observations (``memory/search/cards.py``), filled in by LanceDB from
    each row's own columns: new column files only, so rows keep their places and indexes."""
    for name in CARD_COLUMNS:
        table = ctx.db.open_table(name)
        if CARD_COLUMN not in table.schema.names:
            table.add_columns({CARD_COLUMN: card_sql(name, table.schema)})


@migration(9)
def cards_with_quotes(ctx: MigrationContext) -> None:
    """Trace cards also hold the whole sentences a segment's words belong to (``quotes``), so ranking
    finds them as speech: each card is computed again by LanceDB, as in migration 8."""
    table = ctx.db.open_table("traces")
    if CARD_COLUMN in table.schema.names:
        table.drop_columns([CARD_COLUMN])
    table.add_columns({CARD_COLUMN: card_sql("traces", table.schema)})


@migration(10)
def gallery_segments(ctx: MigrationContext) -> None:
    """Every gallery slot names the segment that wrote it and the content it replaced (``memory/identity/galleries.py``);
    slots stored before name none and always count."""
    for name in GALLERY_TABLES:
        _add_null_columns(ctx.db.open_table(name), GALLERY_V10_COLUMNS)


@migration(11)
def already_spoken(ctx: MigrationContext) -> None:
    """Add the ``spoken`` table: the memories proactive reminders have cited (``memory/store/spoken.py``)."""
    ctx.db.create_table("spoken", schema=table_schemas(ctx.dim)["spoken"], exist_ok=True)
