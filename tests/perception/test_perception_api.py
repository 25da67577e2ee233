"""The package's public surface is deliberate."""

from __future__ import annotations

import perception


def test_all_names_exist_and_are_exported_deliberately() -> None:
    assert sorted(perception.__all__) == perception.__all__
    for name in perception.__all__:
        assert getattr(perception, name) is not None
    for required in ("ingest_file", "PerceptionConfig", "IngestReport", "MediaError", "probe", "iter_frames"):
        assert required in perception.__all__
