"""Speech evaluation sets built from real recordings: diarization conversations and read-speech clips.

Usage::

    .venv/bin/python bench/speech_sets.py OUT [--extra DIR ...]

writes

* ``OUT/diarization/{tune,heldout}/``: conversations mixed from real single-speaker recordings, each a
  16 kHz WAV (``wide_*``) or an 8 kHz telephone-band one (``tel_*``: band-pass 300–3400 Hz, resampled
  to 8 kHz, a little line noise), with ``NAME.rttm`` beside it. Turns are 0.3–1 s pieces of a
  speaker's speech (a quarter of them 1–2.5 s), 0.05–0.4 s apart, about one in twelve overlapping the
  previous turn by 0.2–0.5 s; 2, 3 or 4 speakers; and monologues (``*_1spk_*``: one voice in the same
  short pieces, 0.05-0.4 s apart). The reference of a turn is its piece's span: pieces
  are cut from within the source's speech (Silero VAD, pauses under 0.3 s joined).
* ``OUT/asr/{tune,heldout}/``: single read-speech clips and *streams* (several clips of different
  speakers one after the other, 0.6–2 s apart) with ``transcripts.json``, for ``reflectworld eval asr``.

The two halves share no voice: ``tune`` speakers are GRID bbaf2n and brbk7n, the LibriVox reader
and the left voice of ``stereo_diarization.wav``; ``heldout`` speakers are GRID lbax4n and lrwp9a, the
JFK recording, the right voice of the stereo file, and whatever ``--extra`` folders add (files whose
transcripts are known, see ``EXTRA_TEXT``; pocketsphinx-testdata's ``cards/*.wav``, ``goforward.raw``,
``numbers.raw`` and ``something.raw`` and the shared GRID lbbc2a clip were used for the figures in
the README). Everything is deterministic (fixed seeds). Provenance of every source is in
``tests/data/README.md`` and ``OUT/PROVENANCE.md``.
"""

from __future__ import annotations

import argparse
import json
import wave
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from perception.media.audio import SileroVAD, decode_audio

SR = 16000
DATA = Path(__file__).resolve().parents[1] / "tests" / "data"

#: texts of recordings an ``--extra`` folder may hold (name stem → transcript)
EXTRA_TEXT = {
    "grid_lbbc2a": "lay blue by c two again",
    "001": "ten of clubs", "002": "four queen of clubs", "003": "seven of clubs", "004": "five five",
    "005": "eight of spades four of clubs seven of hearts",
    "goforward": "go forward ten meters",
    "sense_and_sensibility_01_austen_64kb-0880": "he was not an ill disposed young man",
    "sense_and_sensibility_01_austen_64kb-0890": "unless to be rather cold hearted and rather selfish is to be ill disposed",
    "sense_and_sensibility_01_austen_64kb-0930": "he might even have been made amiable himself",
}


@dataclass
class Clip:
    """One recording of one speaker: 16 kHz samples, its speech intervals and (when known) its text."""

    name: str
    audio: np.ndarray
    text: str | None
    speech: list[tuple[float, float]] = field(default_factory=list)


def _stereo(channel: int) -> np.ndarray:
    with wave.open(str(DATA / "diarization" / "stereo_diarization.wav")) as wf:
        pcm = np.frombuffer(wf.readframes(wf.getnframes()), np.int16).reshape(-1, wf.getnchannels())
    return pcm[:, channel].astype(np.float32) / 32768


def _raw(path: Path) -> np.ndarray:
    return np.frombuffer(path.read_bytes(), np.int16).astype(np.float32) / 32768


#: recordings of an ``--extra`` folder that are one speaker
ONE_VOICE = frozenset({"goforward", "numbers", "something"})

STEREO_TEXT = ("He began a confused complaint against the wizard, who had vanished behind the curtain on the left.",
               "The horizon seems extremely distant.")


def voices(extra: list[Path]) -> dict[str, dict[str, list[Clip]]]:
    """``{"tune" | "heldout": {speaker: [clips]}}`` from the repository's media and ``extra`` folders."""
    def f(p: Path, text: str | None) -> Clip:
        return Clip(p.stem, decode_audio(p), text)

    lv = "sense_and_sensibility_01_austen_64kb-"
    tune = {
        "grid_bbaf2n": [f(DATA / "grid_bbaf2n.mpg", "bin blue at f two now")],
        "grid_brbk7n": [f(DATA / "grid_brbk7n.mpg", "bin red by k seven now")],
        "librivox": [f(DATA / f"{lv}0870.wav", "and mister john dashwood had then leisure to consider how much "
                                                 "there might be prudently in his power to do for them"),
                     f(DATA / f"{lv}0920.wav", "had he married a more a amiable woman he might have been made "
                                                 "still more respectable than he was")],
        "stereo_left": [Clip("stereo_left", _stereo(0), STEREO_TEXT[0])],
    }
    held = {
        "grid_lbax4n": [f(DATA / "grid_lbax4n.mpg", "lay blue at x four now")],
        "grid_lrwp9a": [f(DATA / "grid_lrwp9a.mpg", "lay red with p nine again")],
        "jfk": [f(DATA / "jfk.flac", "And so my fellow Americans, ask not what your country can do for you, "
                                       "ask what you can do for your country.")],
        "stereo_right": [Clip("stereo_right", _stereo(1), STEREO_TEXT[1])],
    }
    for folder in extra:
        for p in sorted(folder.iterdir()):
            stem = p.stem
            if p.suffix == ".raw":
                clip = Clip(stem, _raw(p), EXTRA_TEXT.get(stem))
            elif p.suffix in (".wav", ".mpg", ".flac") and stem in EXTRA_TEXT:
                clip = f(p, EXTRA_TEXT[stem])
            else:
                continue
            if stem.startswith(lv):
                tune["librivox"].append(clip)  # the LibriVox reader is a tune voice
                continue
            # goforward, numbers and something are one voice (CAM++ cosine 0.70-0.76 between them,
            # under 0.53 to every other voice here)
            speaker = "cards" if stem.isdigit() else "pocketsphinx" if stem in ONE_VOICE else stem
            held.setdefault(speaker, []).append(clip)
    vad = SileroVAD()
    for side in (tune, held):
        for clips in side.values():
            for c in clips:
                vad.reset()
                c.speech = [(a, b) for a, b in vad.speech_intervals(vad.probabilities(c.audio)) if b - a >= 0.3]
    return {"tune": tune, "heldout": held}


def _band(audio: np.ndarray, lo: float, hi: float, sr: int = SR) -> np.ndarray:
    spec = np.fft.rfft(audio)
    freqs = np.fft.rfftfreq(len(audio), 1 / sr)
    spec[(freqs < lo) | (freqs > hi)] = 0
    return np.fft.irfft(spec, len(audio)).astype(np.float32)


def _write(path: Path, audio: np.ndarray, sr: int = SR) -> None:
    pcm = np.clip(audio * 32767, -32768, 32767).astype(np.int16)
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(sr)
        out.writeframes(pcm.tobytes())


def _piece(rng: np.random.Generator, clips: list[Clip], length: float) -> tuple[np.ndarray, float]:
    """A piece of about ``length`` seconds from inside one speech interval of one of ``clips``."""
    spans = [(c, a, b) for c in clips for a, b in c.speech]
    c, a, b = spans[rng.integers(len(spans))]
    length = min(length, b - a)
    start = float(rng.uniform(a, max(a, b - length)))
    return c.audio[int(start * SR):int((start + length) * SR)], length


def conversation(rng: np.random.Generator, speakers: dict[str, list[Clip]], duration: float
                 ) -> tuple[np.ndarray, list[tuple[float, float, str]]]:
    """A mix of ``speakers`` taking short turns for about ``duration`` seconds, and its reference turns."""
    names = list(speakers)
    gains = {n: float(rng.uniform(0.5, 1.0)) for n in names}
    out = np.zeros(int((duration + 5) * SR), np.float32)
    turns: list[tuple[float, float, str]] = []
    t, who = 0.3, names[0]
    while t < duration:
        length = float(rng.uniform(1.0, 2.5) if rng.random() < 0.25 else rng.uniform(0.3, 1.0))
        piece, length = _piece(rng, speakers[who], length)
        peak = float(np.abs(piece).max()) or 1.0
        lo = int(t * SR)
        out[lo:lo + len(piece)] += piece / peak * 0.5 * gains[who]
        turns.append((round(t, 3), round(t + length, 3), who))
        if len(names) == 1:  # a monologue: pauses between pieces, no overlap
            t = t + length + float(rng.uniform(0.05, 0.4))
            continue
        nxt = [n for n in names if n != who]
        who = nxt[rng.integers(len(nxt))]
        t = t + length + (-float(rng.uniform(0.2, 0.5)) if rng.random() < 1 / 12 else float(rng.uniform(0.05, 0.4)))
    end = max(e for _, e, _ in turns) + 0.3
    return out[:int(end * SR)], turns


def build_diarization(out: Path, sets: dict[str, dict[str, list[Clip]]]) -> None:
    for half, seed in (("tune", 11), ("heldout", 29)):
        folder = out / "diarization" / half
        folder.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(seed)
        pool = sets[half]
        plan = [2] * 8 + [3] * 2 + [4] * 2
        for k, n in enumerate(plan):
            chosen = [str(x) for x in rng.choice(list(pool), size=min(n, len(pool)), replace=False)]
            tel = k % 2 == 0
            audio, turns = conversation(rng, {c: pool[c] for c in chosen}, 30.0 if n == 2 else 40.0)
            name = f"{'tel' if tel else 'wide'}_{n}spk_{k:02d}"
            if tel:
                audio = _band(audio, 300, 3400)[::2]
                audio = audio + rng.normal(0, 0.002, len(audio)).astype(np.float32)
                _write(folder / f"{name}.wav", audio, 8000)
            else:
                _write(folder / f"{name}.wav", audio)
            (folder / f"{name}.rttm").write_text(
                "".join(f"SPEAKER {name} 1 {s:.3f} {e - s:.3f} <NA> <NA> {w} <NA> <NA>\n" for s, e, w in turns),
                encoding="utf-8")


def build_monologues(out: Path, sets: dict[str, dict[str, list[Clip]]]) -> None:
    """One voice talking in short pieces for about 25 s (``*_1spk_*``), beside the conversations of each
    half: every voice of the half once on a telephone line and once wide-band (the tune half's voices
    twice on the line). A diarizer that splits voices apart more readily must still hear one voice here."""
    for half, seed in (("tune", 41), ("heldout", 43)):
        folder = out / "diarization" / half
        folder.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(seed)
        pool = sets[half]
        plan = [(v, tel) for tel in ((True, False, True) if half == "tune" else (True, False)) for v in pool]
        for k, (voice, tel) in enumerate(plan):
            audio, turns = conversation(rng, {voice: pool[voice]}, 25.0)
            name = f"{'tel' if tel else 'wide'}_1spk_{k:02d}"
            if tel:
                audio = _band(audio, 300, 3400)[::2]
                _write(folder / f"{name}.wav", audio + rng.normal(0, 0.002, len(audio)).astype(np.float32), 8000)
            else:
                _write(folder / f"{name}.wav", audio)
            (folder / f"{name}.rttm").write_text(
                "".join(f"SPEAKER {name} 1 {s:.3f} {e - s:.3f} <NA> <NA> {w} <NA> <NA>\n" for s, e, w in turns),
                encoding="utf-8")


def build_more_telephone(out: Path, sets: dict[str, dict[str, list[Clip]]], count: int, seed: int) -> None:
    """``count`` more two-speaker telephone conversations of the tune voices (``diarization/tune_telephone``):
    the tune half has only four, too few to choose a join threshold for band-limited voices."""
    folder = out / "diarization" / "tune_telephone"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    pool = sets["tune"]
    for k in range(count):
        chosen = [str(x) for x in rng.choice(list(pool), size=2, replace=False)]
        audio, turns = conversation(rng, {c: pool[c] for c in chosen}, 30.0)
        name = f"tel_2spk_{k:02d}"
        audio = _band(audio, 300, 3400)[::2]
        _write(folder / f"{name}.wav", audio + rng.normal(0, 0.002, len(audio)).astype(np.float32), 8000)
        (folder / f"{name}.rttm").write_text(
            "".join(f"SPEAKER {name} 1 {s:.3f} {e - s:.3f} <NA> <NA> {w} <NA> <NA>\n" for s, e, w in turns),
            encoding="utf-8")


def build_asr(out: Path, sets: dict[str, dict[str, list[Clip]]]) -> None:
    for half, seed in (("tune", 5), ("heldout", 17)):
        folder = out / "asr" / half
        folder.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(seed)
        clips = [c for cs in sets[half].values() for c in cs if c.text]
        texts: dict[str, str] = {}
        for c in clips:
            _write(folder / f"{c.name}.wav", c.audio)
            texts[f"{c.name}.wav"] = c.text or ""
        for s in range(3):  # streams: every clip once, shuffled, 0.6-2 s of silence between them
            order = rng.permutation(len(clips))
            parts: list[np.ndarray] = []
            for i in order:
                parts += [clips[i].audio, np.zeros(int(rng.uniform(0.6, 2.0) * SR), np.float32)]
            _write(folder / f"stream_{s}.wav", np.concatenate(parts))
            texts[f"stream_{s}.wav"] = " ".join(clips[i].text or "" for i in order)
        (folder / "transcripts.json").write_text(json.dumps(texts, indent=1), encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--extra", type=Path, nargs="*", default=[],
                        help="folders with more held-out recordings (see EXTRA_TEXT)")
    parser.add_argument("--more-telephone", type=int, default=0, metavar="N",
                        help="also N two-speaker telephone conversations of the tune voices (diarization/tune_telephone)")
    parser.add_argument("--seed", type=int, default=1234, help="seed of --more-telephone")
    args = parser.parse_args()
    sets = voices(args.extra)
    build_diarization(args.out, sets)
    build_monologues(args.out, sets)
    if args.more_telephone:
        build_more_telephone(args.out, sets, args.more_telephone, args.seed)
    build_asr(args.out, sets)
    lines = ["# Sources", ""]
    for half, pool in sets.items():
        for speaker, clips in pool.items():
            lines.append(f"- {half} / {speaker}: " + ", ".join(f"{c.name} ({len(c.audio) / SR:.1f} s)" for c in clips))
    (args.out / "PROVENANCE.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
