"""``reflectworld eval diarization FOLDER``: diarization error rate and speaker-count accuracy.

FOLDER holds audio or video files, each with a reference ``NAME.rttm`` beside it (standard RTTM:
``SPEAKER <file> 1 <start> <duration> <NA> <NA> <speaker> <NA> <NA>``). Every file with a
reference is decoded to 16 kHz mono and diarized whole by the local pipeline (pyannote
segmentation-3.0 + CAM++ + clustering, :class:`perception.detectors.speakers.Diarizer`).

DER is computed on 10 ms frames over the whole file, without a forgiveness collar and with
overlapped speech scored: ``(missed + false alarm + confusion) / reference speech``, where
confusion uses the reference↔hypothesis speaker mapping with the most overlap. Speaker count
accuracy is the share of files whose number of hypothesis speakers equals the reference's.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
from pathlib import Path

import numpy as np

from plugin.errors import PluginError

__all__ = ["add_parser", "der", "evaluate", "read_rttm"]

logger = logging.getLogger(__name__)

FRAME_S = 0.01


def read_rttm(path: Path) -> list[tuple[float, float, str]]:
    """``(start, end, speaker)`` turns of an RTTM file.

    Raises:
        PluginError: a SPEAKER line is malformed.
    """
    turns: list[tuple[float, float, str]] = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        parts = line.split()
        if not parts or parts[0] != "SPEAKER":
            continue
        try:
            start, dur = float(parts[3]), float(parts[4])
            turns.append((start, start + dur, parts[7]))
        except (IndexError, ValueError):
            raise PluginError(f"{path}:{n}: not an RTTM SPEAKER line ({line!r}); fix or remove it") from None
    return turns


def _grid(turns: list[tuple[float, float, str]], n: int) -> tuple[np.ndarray, list[str]]:
    names = sorted({who for *_, who in turns})
    act = np.zeros((n, len(names)), bool)
    for start, end, who in turns:
        act[int(round(start / FRAME_S)):int(round(end / FRAME_S)), names.index(who)] = True
    return act, names


def der(reference: list[tuple[float, float, str]], hypothesis: list[tuple[float, float, str]]) -> dict[str, float]:
    """Frame-level DER and its parts (seconds) of ``hypothesis`` against ``reference`` (no collar)."""
    end = max([e for _, e, _ in reference + hypothesis], default=0.0)
    n = int(np.ceil(end / FRAME_S)) + 1
    ref, _ = _grid(reference, n)
    hyp, _ = _grid(hypothesis, n)
    n_ref, n_hyp = ref.sum(1), hyp.sum(1)
    overlap = ref.T.astype(np.int64) @ hyp.astype(np.int64)  # frames both speak, per (ref, hyp) pair
    best = 0
    r, h = overlap.shape
    if r and h:
        small, large = (r, h) if r <= h else (h, r)
        for perm in itertools.permutations(range(large), small):
            total = sum(overlap[i, p] if r <= h else overlap[p, i] for i, p in enumerate(perm))
            best = max(best, int(total))
    missed = float(np.maximum(n_ref - n_hyp, 0).sum())
    false_alarm = float(np.maximum(n_hyp - n_ref, 0).sum())
    confusion = float(np.minimum(n_ref, n_hyp).sum() - best)
    speech = float(n_ref.sum())
    return {"der": (missed + false_alarm + confusion) / max(speech, 1.0), "missed_s": missed * FRAME_S,
            "false_alarm_s": false_alarm * FRAME_S, "confusion_s": confusion * FRAME_S, "speech_s": speech * FRAME_S}


def evaluate(folder: Path) -> dict[str, object]:
    """Diarize every file of ``folder`` that has a ``.rttm`` reference; return DER, count accuracy and rows.

    Raises:
        PluginError: no file with a reference, or the speaker models are unavailable.
    """
    from perception.detectors.asr import load_audio
    from perception.detectors.speakers import Diarizer

    pairs = sorted((p, p.with_suffix(".rttm")) for p in folder.iterdir()
                   if p.suffix.lower() != ".rttm" and p.is_file() and p.with_suffix(".rttm").is_file())
    if not pairs:
        raise PluginError(f"no audio/video file with a NAME.rttm reference beside it in {folder}")
    diarizer = Diarizer()
    if not diarizer.available:
        raise PluginError("speaker models unavailable; restore perception/models/ from the repository")
    rows: list[dict[str, object]] = []
    errors = speech = 0.0
    right = 0
    for media, ref_path in pairs:
        reference = read_rttm(ref_path)
        result = diarizer.diarize(load_audio(media))
        hypothesis = [(t.start, t.end, f"spk{t.speaker}") for t in result.turns]
        scores = der(reference, hypothesis)
        n_ref, n_hyp = len({w for *_, w in reference}), len(result.speakers)
        right += n_ref == n_hyp
        errors += scores["der"] * scores["speech_s"]
        speech += scores["speech_s"]
        rows.append({"file": media.name, "der": round(scores["der"], 4), "speakers": n_hyp,
                     "reference_speakers": n_ref, **{k: round(v, 3) for k, v in scores.items() if k != "der"}})
    return {"der": round(errors / max(speech, 1e-9), 4), "speaker_count_accuracy": round(right / len(rows), 4),
            "n": len(rows), "files": rows}


def _run(args: argparse.Namespace) -> int:
    from plugin.cli import _out

    result = evaluate(Path(args.folder))
    if args.json:
        _out(json.dumps({k: result[k] for k in ("der", "speaker_count_accuracy", "n")}))
        return 0
    _out("protocol: each file → 16 kHz mono → pyannote seg-3.0 + CAM++ + clustering; DER on 10 ms frames, "
         "no collar, overlap scored")
    for row in result["files"]:  # type: ignore[attr-defined]
        _out(f"  DER {row['der']:6.3f}  speakers {row['speakers']} (reference {row['reference_speakers']})  "
             f"missed {row['missed_s']:.2f}s false alarm {row['false_alarm_s']:.2f}s "
             f"confusion {row['confusion_s']:.2f}s  {row['file']}")
    _out(f"DER {result['der']:.4f}, speaker count accuracy {result['speaker_count_accuracy']:.2f} "
         f"over {result['n']} file(s)")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``reflectworld eval diarization``."""
    p = sub.add_parser("diarization", help="diarization error rate and speaker count against NAME.rttm references")
    p.add_argument("folder", help="folder with audio/video files and an NAME.rttm reference beside each")
    p.add_argument("--json", action="store_true", help='print one JSON object {"der", "speaker_count_accuracy", "n"}')
    p.set_defaults(func=_run)
