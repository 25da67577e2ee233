"""The store: the :class:`MemoryStore` façade, table schemas and migrations, writes and reads."""

from .facade import MemoryStore

__all__ = ["MemoryStore"]
