"""The pieces a cluster run stands on, without Ray: relayed engines, writes rebuilt from the store,
identities shared between workers, object-store settings in the manifest."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path
from typing import Any

import pytest

from plugin.cluster import stored_write
from plugin.engine import Overrides
from plugin.errors import ManifestError
from plugin.manifest import parse_manifest
from tests.cluster.conftest import BUCKET, storage_options
from tests.conftest import engine_for

DATA = Path(__file__).resolve().parents[1] / "data"
FACES_ONLY = {"level": "full", "objects": {"type": "none"}, "ocr": {"type": "none"}, "asr": {"type": "none"},
              "body": {"type": "none"}}


def test_a_relayed_engine_only_writes_and_a_write_rebuilt_from_the_store_matches_the_relayed_one(
        tmp_path: Path) -> None:
    relayed: list[tuple[Any, ...]] = []
    with engine_for(tmp_path, Overrides(relay=lambda *item: relayed.append(item)), perception=FACES_ONLY) as engine:
        assert engine.semantic is None and not engine.store.maintain
        report = engine.ingest_file(DATA / "grid_bbaf2n.mpg")
        assert not engine.lease.held  # a worker runs under its driver's lease
        writes = [item[1] for item in relayed if item[0] == "commit"]
        assert report.segments_written == len(writes) >= 2
        assert relayed[-1] == ("done", writes[0].source, writes[0].camera_id)
        for write in writes:
            rebuilt = stored_write(engine.store, write.source, write.segment_index)
            assert rebuilt is not None
            assert rebuilt.trace == write.trace
            assert sorted(o.id for o in rebuilt.observations) == sorted(o.id for o in write.observations)
            assert [o.text for o in sorted(rebuilt.observations, key=lambda o: o.id)] == \
                [o.text for o in sorted(write.observations, key=lambda o: o.id)]
            assert [e.id for e in rebuilt.entities] == [e.id for e in write.entities]
            assert [k.jpeg for k in rebuilt.keyframes] == [k.jpeg for k in write.keyframes]
        assert stored_write(engine.store, writes[0].source, len(writes)) is None


def test_a_worker_recognises_a_person_another_worker_enrolled_seconds_later(tmp_path: Path) -> None:
    relay = Overrides(relay=lambda *item: None)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with engine_for(tmp_path / "b", relay, memory={"uri": str(tmp_path / "lancedb"),
                                                   "embedder": {"type": "hash", "dim": 64}},
                    perception=FACES_ONLY) as other:
        assert other.identity.known_entities == []
        with engine_for(tmp_path / "a", relay, memory={"uri": str(tmp_path / "lancedb"),
                                                       "embedder": {"type": "hash", "dim": 64}},
                        perception=FACES_ONLY) as first:
            first.ingest_file(DATA / "grid_bbaf2n.mpg")
            enrolled = first.identity.known_entities
        assert enrolled
        deadline = time.monotonic() + 10
        while other.identity.known_entities != enrolled:
            assert time.monotonic() < deadline, "the other worker never reloaded the galleries"
            other.identity.check()
            time.sleep(0.1)


def test_object_store_settings_come_from_the_environment_never_from_literals(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("S3_SECRET", "s3cr3t")
    storage = {"endpoint": "http://127.0.0.1:9000", "region": "us-east-1", "access_key_id": "minio",
               "secret_access_key": "${S3_SECRET}", "allow_http": True, "options": {"timeout": "30s"}}
    manifest = parse_manifest({"memory": {"uri": "s3://bucket/site", "storage": storage}})
    assert manifest.storage_options() == {
        "aws_endpoint": "http://127.0.0.1:9000", "aws_region": "us-east-1", "aws_access_key_id": "minio",
        "aws_secret_access_key": "s3cr3t", "allow_http": "true", "timeout": "30s"}
    assert "s3cr3t" not in repr(manifest)
    local = parse_manifest({"memory": {"uri": "/tmp/somewhere", "storage": storage}})
    assert local.storage_options() is None
    for literal in ({**storage, "secret_access_key": "s3cr3t"},
                    {**storage, "options": {"aws_secret_access_key": "s3cr3t"}}):
        with pytest.raises(ManifestError, match="secret is written into the manifest"):
            parse_manifest({"memory": {"uri": "s3://bucket/site", "storage": literal}})


def _allocate(endpoint: str, n: int) -> list[str]:
    from memory import HashEmbedder, MemoryStore

    with MemoryStore(f"s3://{BUCKET}/ids", HashEmbedder(16), user_id="site", storage_options=storage_options(endpoint),
                     maintain=False) as store:
        return [store.next_entity_id("person") for _ in range(n)]


def test_processes_allocating_ids_on_the_object_store_never_get_the_same_one(s3_endpoint: str) -> None:
    from memory import HashEmbedder, MemoryStore

    MemoryStore(f"s3://{BUCKET}/ids", HashEmbedder(16), user_id="site",
                storage_options=storage_options(s3_endpoint)).open().close()
    with multiprocessing.get_context("spawn").Pool(3) as pool:
        got = [i for ids in pool.starmap(_allocate, [(s3_endpoint, 6)] * 3) for i in ids]
    assert sorted(got) == [f"person_{n:04d}" for n in range(1, 19)]
