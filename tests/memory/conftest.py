"""Fixtures for memory tests: a real LanceDB store in tmp_path with the hash embedder."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from memory_fixtures import populate

from memory import HashEmbedder, MemoryStore


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "mem"


@pytest.fixture
def store(store_path: Path) -> Iterator[MemoryStore]:
    with MemoryStore(str(store_path), HashEmbedder(64)) as s:
        yield s


@pytest.fixture
def filled(store: MemoryStore) -> MemoryStore:
    populate(store)
    return store
