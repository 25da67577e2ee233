"""Errors raised by the memory store.

Every message names the offending value and says what to do next, because these messages reach
an assistant (through the tools) or a developer (through the CLI) who has to act on them.
"""

from __future__ import annotations


class MemoryStoreError(Exception):
    """Root of every error the memory package raises (never ``MemoryError``, a builtin)."""


class NotFoundError(MemoryStoreError, KeyError):
    """An id that the store does not hold (for this user)."""

    def __init__(self, item_id: str, hint: str = "call memory_search or entity_list to find ids") -> None:
        self.item_id = item_id
        self.hint = hint
        super().__init__(f"unknown id {item_id!r}; {hint}")

    def __str__(self) -> str:  # KeyError would otherwise repr() the message
        return str(self.args[0])


class DimensionMismatchError(MemoryStoreError):
    """The store was built with vectors of another dimension than the configured embedder."""

    def __init__(self, stored: int, embedder_dim: int, embedder_name: str, stored_name: str | None = None) -> None:
        self.stored = stored
        self.embedder_dim = embedder_dim
        self.embedder_name = embedder_name
        built_with = f" by {stored_name!r}" if stored_name else ""
        super().__init__(
            f"the memory store holds {stored}-d vectors{built_with} but embedder {embedder_name!r} "
            f"produces {embedder_dim}-d vectors; open the store with the embedder it was built with, "
            "or point `memory.uri` at a new directory"
        )


class EmbedderError(MemoryStoreError):
    """An embedder could not load its model or could not embed."""


class SchemaVersionError(MemoryStoreError):
    """The store on disk was written by a newer (unknown) schema version."""
