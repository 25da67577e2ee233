"""ReflectWorld memory: a LanceDB store of entities, observations, traces, chapters and facts.

Public API: :class:`MemoryStore`, the embedders, the errors and the record models.
"""

from .embedders import Embedder, HashEmbedder, MiniLMEmbedder, OpenAIEmbedder
from .errors import DimensionMismatchError, EmbedderError, MemoryStoreError, NotFoundError, SchemaVersionError
from .models import (
    Chapter,
    Entity,
    Fact,
    GalleryFace,
    GallerySlot,
    GetResult,
    IngestState,
    Keyframe,
    Observation,
    SearchHit,
    SegmentWrite,
    Trace,
    stable_id,
)
from .search.modes import SearchMode
from .store.facade import MemoryStore

__all__ = [
    "Chapter",
    "DimensionMismatchError",
    "Embedder",
    "EmbedderError",
    "Entity",
    "Fact",
    "GalleryFace",
    "GallerySlot",
    "GetResult",
    "HashEmbedder",
    "IngestState",
    "Keyframe",
    "MemoryStore",
    "MemoryStoreError",
    "MiniLMEmbedder",
    "NotFoundError",
    "Observation",
    "OpenAIEmbedder",
    "SchemaVersionError",
    "SearchHit",
    "SearchMode",
    "SegmentWrite",
    "Trace",
    "stable_id",
]
