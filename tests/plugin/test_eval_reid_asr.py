"""``reflectworld eval reid`` and ``reflectworld eval asr`` on folders built from the test media."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import cv2
import pytest

from perception.media.video import iter_frames
from plugin.cli import main

DATA = Path(__file__).resolve().parents[1] / "data"


def _frames_at(times: list[float]) -> dict[float, object]:
    wanted, out = set(times), {}
    for frame in iter_frames(DATA / "short_hamilton_clip.mp4", 4.0):
        if round(frame.t, 2) in wanted:
            out[round(frame.t, 2)] = frame.image_bgr
    return out


@pytest.fixture(scope="module")
def reid_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """lin: reference still + two close-ups (before/after the cut); alex: reference + wide-angle frame."""
    root = tmp_path_factory.mktemp("reid")
    frames = _frames_at([5.02, 7.26, 6.02])
    for name in ("lin", "alex", "_ignored"):
        (root / name).mkdir()
    shutil.copy(DATA / "faces" / "lin-manuel-miranda.png", root / "lin" / "a_ref.png")
    cv2.imwrite(str(root / "lin" / "b_close.png"), frames[5.02])
    cv2.imwrite(str(root / "lin" / "c_after_cut.png"), frames[7.26])
    cv2.imwrite(str(root / "lin" / "d_close.png"), frames[6.02])
    shutil.copy(DATA / "faces" / "alex-lacamoire.png", root / "alex" / "a_ref.png")
    shutil.copy(DATA / "faces" / "alex-lacamoire.png", root / "alex" / "b_ref_copy.png")
    shutil.copy(DATA / "images" / "coffee.png", root / "_ignored" / "x.png")
    return root


def test_eval_reid_prints_accuracy_and_false_merge_rate(reid_folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "reid", str(reid_folder), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result) == {"accuracy", "false_merge_rate", "n"}
    assert result["n"] == 3  # lin: 2 probes, alex: 1 probe; _ignored is skipped
    assert result["accuracy"] >= 2 / 3 and result["false_merge_rate"] == 0.0
    assert main(["eval", "reid", str(reid_folder)]) == 0
    assert "protocol:" in capsys.readouterr().out


def test_eval_asr_prints_the_word_error_rate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copy(DATA / "jfk.flac", tmp_path / "jfk.flac")
    (tmp_path / "transcripts.json").write_text(json.dumps({"jfk.flac": "And so my fellow Americans, ask not what "
                                                           "your country can do for you, ask what you can do for "
                                                           "your country."}), encoding="utf-8")
    assert main(["eval", "asr", str(tmp_path), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["n"] == 1 and result["wer"] <= 0.15
    assert main(["eval", "asr", str(tmp_path), "--json", "--turns"]) == 0  # as ingestion hears it
    result = json.loads(capsys.readouterr().out)
    assert result["n"] == 1 and result["wer"] <= 0.15


def test_eval_asr_explains_a_missing_transcripts_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "asr", str(tmp_path)]) == 1
    assert "transcripts.json" in capsys.readouterr().err
