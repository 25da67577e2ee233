"""Speech turns of a file heard whole (padding that never overlaps the next turn) and WER scoring."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from perception.detectors.asr import TurnTranscripts, WhisperTranscriber, load_audio, word_error_rate

DATA = Path(__file__).resolve().parents[1] / "data"
SR = 16000


def test_numbers_and_titles_are_scored_as_spoken() -> None:
    assert word_error_rate("lay blue at x four now", "Lay blue at X4 now.") == (0, 6)
    assert word_error_rate("and mister john dashwood went ten miles", "And Mr. John Dashwood went 10 miles.") == (0, 7)
    assert word_error_rate("bin red by k seven now", "Been read by K-7 now.") == (2, 6)


def test_turns_are_padded_without_hearing_a_stretch_twice() -> None:
    a, b = load_audio(DATA / "grid_bbaf2n.mpg"), load_audio(DATA / "grid_lbax4n.mpg")
    audio = np.concatenate([a, b])  # two sentences, the second 3 s after the first began
    reads: list[tuple[float, float]] = []

    def read(lo: float, hi: float) -> np.ndarray:
        reads.append((lo, hi))
        return audio[int(lo * SR):int(hi * SR)]

    intervals = [(0.75, 2.2), (3.75, 5.2)]  # GRID speech starts ~0.75 s into each clip
    turns = TurnTranscripts(WhisperTranscriber(), intervals, read)
    heard = turns.span(0.0, 6.0)
    assert len(reads) == 2
    (lo1, hi1), (lo2, hi2) = reads
    assert (lo1, hi1, lo2, hi2) == (0.25, 2.7, 3.25, 5.7)  # 0.5 s each side
    reads.clear()  # padding wider than half the pause stops in its middle
    TurnTranscripts(WhisperTranscriber(), intervals, read, pad_s=0.8).span(0.0, 6.0)
    assert reads[0] == (0.0, 2.975) and reads[1] == (2.975, 6.0)
    words = [w.text.lower().strip(".,") for w in heard.words]
    assert words.count("now") == 2  # each sentence's last word once, none lost or doubled
    assert all(0.0 <= w.start <= w.end <= 6.0 for w in heard.words)
