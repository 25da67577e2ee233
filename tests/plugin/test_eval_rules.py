"""`reflectworld eval rules CLIP LABELS` on a generated clip with labelled event windows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from plugin.cli import main
from plugin.evals.rules import EventWindow, score
from tests.conftest import write_manifest
from tests.plugin.rules_clip import make_event_clip

EVENTS = [(2.0, 4.5), (7.0, 9.5)]


def test_eval_rules_prints_precision_recall_and_deliveries_as_json(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    clip = make_event_clip(tmp_path / "door.mp4", EVENTS, seconds=10.0, mtime=1_700_000_000)
    labels = tmp_path / "labels.yaml"
    labels.write_text(yaml.safe_dump({
        "camera": "door",
        "rules": [{"text": "someone is at the door", "conditions": {"entities": ["*"]}, "cooldown_s": 2.0}],
        "policy": {"event_gap_s": 1.0},
        "events": [{"start": a, "end": b} for a, b in EVENTS],
    }))
    manifest = write_manifest(tmp_path, perception={"sample_fps": 4, "min_segment_s": 0.5, "max_segment_s": 2.5,
                                                    "keyframes_per_segment": 1})
    assert main(["eval", "rules", str(clip), str(labels), "--json", "--manifest", str(manifest)]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(result) == {"precision", "recall", "deliveries"}
    assert result == {"precision": 1.0, "recall": 1.0, "deliveries": 2}


def test_scoring_credits_each_window_once_and_counts_extra_deliveries_as_false_positives() -> None:
    events = [EventWindow(start=2, end=4), EventWindow(start=10, end=12, rule=1)]
    result = score([(2.5, "rule_a"), (3.5, "rule_a"), (10.0, "rule_a"), (20.0, "rule_b")], events,
                   ["rule_a", "rule_b"], tolerance_s=0.5)
    assert result["deliveries"] == 4 and result["credited"] == {0: 0}
    assert result["precision"] == 0.25 and result["recall"] == 0.5
    assert score([], events, [], 0.5)["precision"] == 0.0


def test_eval_rules_names_a_missing_labels_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "rules", str(tmp_path / "x.mp4"), str(tmp_path / "none.yaml")]) == 1
    assert "labels file" in capsys.readouterr().err
