"""The manifest: examples load, and each kind of mistake gets its documented message."""

from __future__ import annotations

from pathlib import Path

import pytest

from plugin.errors import ManifestError
from plugin.manifest import default_manifest, load_manifest, parse_manifest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["example.yaml", "dev.yaml"])
def test_shipped_manifests_load(name: str) -> None:
    manifest = load_manifest(ROOT / "manifests" / name)
    assert manifest.version == 1
    assert manifest.vlm is None


def test_dev_manifest_runs_offline_with_the_hash_embedder() -> None:
    manifest = load_manifest(ROOT / "manifests" / "dev.yaml")
    assert manifest.memory.embedder.type == "hash"


def test_toml_manifest_loads(tmp_path: Path) -> None:
    path = tmp_path / "m.toml"
    path.write_text('user_id = "alice"\n[memory]\nuri = "/tmp/x"\n[memory.embedder]\ntype = "hash"\ndim = 32\n')
    manifest = load_manifest(path)
    assert (manifest.user_id, manifest.memory.embedder.type, manifest.store_uri()) == ("alice", "hash", "/tmp/x")


def test_default_manifest_uses_the_user_data_dir_and_local_models(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    monkeypatch.setenv("REFLECTWORLD_DATA_DIR", str(tmp_path))
    manifest = default_manifest()
    assert manifest.store_uri() == str(tmp_path / "lancedb")
    assert manifest.memory.embedder.type == "minilm"
    assert manifest.vlm is None


def test_unknown_key_names_its_path_and_suggests_the_right_one() -> None:
    with pytest.raises(ManifestError) as info:
        parse_manifest({"memory": {"urii": "/tmp/x"}})
    assert len(info.value.problems) == 1
    assert "memory.urii: unknown key — did you mean 'uri'?" in str(info.value)


def test_unknown_key_inside_a_typed_backend_lists_the_allowed_keys() -> None:
    with pytest.raises(ManifestError) as info:
        parse_manifest({"memory": {"embedder": {"type": "hash", "dimm": 32}}})
    assert "memory.embedder.dimm: unknown key — did you mean 'dim'? (allowed here: type, dim)" in str(info.value)


def test_bad_type_shows_the_value_and_the_bound() -> None:
    with pytest.raises(ManifestError) as info:
        parse_manifest({"perception": {"sample_fps": "fast"}})
    message = str(info.value)
    assert "perception.sample_fps:" in message and "'fast'" in message


def test_out_of_range_value_is_reported_with_its_path() -> None:
    with pytest.raises(ManifestError) as info:
        parse_manifest({"server": {"http": {"port": 70000}}})
    assert "server.http.port: Input should be less than or equal to 65535 (got 70000)" in str(info.value)


def test_missing_env_var_says_which_and_how_to_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RW_TEST_KEY", raising=False)
    with pytest.raises(ManifestError) as info:
        parse_manifest({"vlm": {"base_url": "http://127.0.0.1:1/v1", "model": "m", "api_key": "${RW_TEST_KEY}"}})
    assert "vlm.api_key: environment variable RW_TEST_KEY is not set — export RW_TEST_KEY=…" in str(info.value)


def test_env_var_is_substituted_and_kept_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RW_TEST_KEY", "sk-very-secret")
    manifest = parse_manifest({"vlm": {"base_url": "http://h/v1", "model": "m", "api_key": "${RW_TEST_KEY}"}})
    assert manifest.vlm is not None
    assert manifest.vlm.api_key.get_secret_value() == "sk-very-secret"
    assert "sk-very-secret" not in repr(manifest) and "sk-very-secret" not in manifest.model_dump_json()


def test_env_default_applies_when_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RW_TEST_URI", raising=False)
    assert parse_manifest({"memory": {"uri": "${RW_TEST_URI:/data/rw}"}}).store_uri() == "/data/rw"


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(ManifestError) as info:
        parse_manifest({"bogus": 1, "perception": {"sample_fps": 0}, "memory": {"embedder": {"type": "nope"}}})
    paths = {p.path for p in info.value.problems}
    assert paths == {"bogus", "perception.sample_fps", "memory.embedder"}


def test_min_segment_longer_than_max_is_rejected() -> None:
    with pytest.raises(ManifestError, match="min_segment_s ≤ max_segment_s"):
        parse_manifest({"perception": {"min_segment_s": 20, "max_segment_s": 5}})


def test_missing_file_and_bad_syntax_are_clear(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="file not found"):
        load_manifest(tmp_path / "none.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("memory: [unclosed\n")
    with pytest.raises(ManifestError, match="cannot parse"):
        load_manifest(bad)


def test_the_readme_manifest_example_is_valid(monkeypatch: pytest.MonkeyPatch) -> None:
    import yaml

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text[text.index("```yaml\nuser_id") + len("```yaml\n"):]
    block = block[: block.index("```")]
    monkeypatch.setenv("WEBHOOK_SECRET", "s")
    manifest = parse_manifest(yaml.safe_load(block), "README.md")
    assert manifest.sources and manifest.rules and manifest.perception.objects.type == "coco"
    assert manifest.perception.object_entities.classes[:2] == ["cat", "dog"] and manifest.perception.speakers_on
