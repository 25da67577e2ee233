"""Which words does tiny.en hear with a margin? Word stability under small audio perturbations.

A test that asserts an exact word passes or fails with the CPU it runs on: CTranslate2's int8
kernels differ between instruction sets (AVX2, AVX-512, VNNI), and the ONNX models ahead of Whisper
(voice activity, diarization) move segment edges by a few milliseconds. This bench decodes each clip
several times, each shifted by up to a quarter second and dithered with noise at -60 dBFS, and prints
for every word how often it came out and its lowest probability. Words heard in every run with a
probability of at least 0.9 are safe to assert; the rest belong in `reflectworld eval asr` with a
margin, not in a unit test.

    python bench/asr_margins.py [--runs 12] [FILE ...]      # default: the repository's speech clips

Run it under ONEDNN_MAX_CPU_ISA=AVX2 as well to see the kernels of an AVX2-only machine.
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from perception.detectors.asr import SAMPLE_RATE, WhisperTranscriber, load_audio  # noqa: E402

DATA = ROOT / "tests" / "data"
DEFAULT = [DATA / "grid_bbaf2n.mpg", DATA / "grid_brbk7n.mpg", DATA / "grid_lbax4n.mpg",
           DATA / "grid_lrwp9a.mpg", DATA / "jfk.flac"]


def word_margins(transcriber: WhisperTranscriber, audio: np.ndarray, runs: int) -> dict[str, tuple[int, float]]:
    """word -> (runs it was heard in, its lowest probability) over ``runs`` perturbed decodes."""
    heard: collections.Counter[str] = collections.Counter()
    lowest: dict[str, float] = {}
    for seed in range(runs):
        rng = np.random.default_rng(seed)
        shift = int(rng.integers(0, SAMPLE_RATE // 4)) if seed else 0
        x = audio[shift:] + rng.normal(0.0, 1e-3, len(audio) - shift).astype(np.float32) * (seed > 0)
        words = transcriber.transcribe(x).words
        for word in {w.text.strip(" .,!?").lower() for w in words}:
            heard[word] += 1
        for w in words:
            key = w.text.strip(" .,!?").lower()
            lowest[key] = min(lowest.get(key, 1.0), float(w.probability))
    return {w: (heard[w], lowest[w]) for w in heard}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--runs", type=int, default=12)
    args = parser.parse_args(argv)
    transcriber = WhisperTranscriber()
    for path in args.files or DEFAULT:
        margins = word_margins(transcriber, load_audio(path), args.runs)
        safe = sorted(w for w, (n, p) in margins.items() if n == args.runs and p >= 0.9)
        shaky = sorted(f"{w} ({n}/{args.runs}, p>={p:.2f})" for w, (n, p) in margins.items()
                       if not (n == args.runs and p >= 0.9))
        sys.stdout.write(f"{path.name}\n  safe:  {', '.join(safe) or '-'}\n  shaky: {', '.join(shaky) or '-'}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
