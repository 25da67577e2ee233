"""Builds this folder's diarization media and RTTM references from the repository's own recordings.

Run from the repository root: ``.venv/bin/python tests/data/diarization/make_references.py``.

* ``stereo_mix.wav``: ``stereo_diarization.wav`` (one speaker per channel, overlapping) mixed to
  mono. Reference: each channel's Silero VAD speech intervals are that speaker's turns.
* ``grid_dialogue.mp4``: GRID speaker A (bbaf2n), B (brbk7n), then A again,
  3 s each, video and audio. Reference: each clip's VAD intervals, shifted by its offset.
"""

from __future__ import annotations

import wave
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

from perception.media.audio import SileroVAD, decode_audio

HERE = Path(__file__).resolve().parent
DATA = HERE.parent
SR = 16000


def speech(vad: SileroVAD, pcm: np.ndarray) -> list[tuple[float, float]]:
    vad.reset()
    return vad.speech_intervals(vad.probabilities(pcm))


def rttm(name: str, turns: list[tuple[float, float, str]]) -> str:
    return "".join(f"SPEAKER {name} 1 {s:.3f} {e - s:.3f} <NA> <NA> {who} <NA> <NA>\n" for s, e, who in turns)


def stereo(vad: SileroVAD) -> None:
    with wave.open(str(HERE / "stereo_diarization.wav")) as wf:
        pcm = np.frombuffer(wf.readframes(wf.getnframes()), np.int16).reshape(-1, wf.getnchannels())
    chans = pcm.astype(np.float32) / 32768
    turns = [(s, e, f"ch{c}") for c in range(2) for s, e in speech(vad, chans[:, c])]
    mix = np.clip(chans.mean(1) * 32768, -32768, 32767).astype(np.int16)
    with wave.open(str(HERE / "stereo_mix.wav"), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(SR)
        out.writeframes(mix.tobytes())
    (HERE / "stereo_mix.rttm").write_text(rttm("stereo_mix", sorted(turns)), encoding="utf-8")


def grid(vad: SileroVAD) -> None:
    clips = [("A", DATA / "grid_bbaf2n.mpg"), ("B", DATA / "grid_brbk7n.mpg"), ("A", DATA / "grid_bbaf2n.mpg")]
    turns: list[tuple[float, float, str]] = []
    path = HERE / "grid_dialogue.mp4"
    fps = 25
    with av.open(str(path), "w") as out:
        vs = out.add_stream("libx264", rate=fps)
        vs.width, vs.height, vs.pix_fmt = 360, 288, "yuv420p"
        vs.options = {"crf": "28", "preset": "veryfast"}
        aus = out.add_stream("aac", rate=SR, layout="mono")
        v_pts = a_pts = 0
        for who, clip in clips:
            t0 = a_pts / SR
            audio = decode_audio(clip)
            turns += [(t0 + s, t0 + e, who) for s, e in speech(vad, audio)]
            with av.open(str(clip)) as src:
                for frame in src.decode(video=0):
                    img = frame.to_ndarray(format="bgr24")
                    vf = av.VideoFrame.from_ndarray(img, format="bgr24")
                    vf.pts = v_pts
                    v_pts += 1
                    for p in vs.encode(vf):
                        out.mux(p)
            for i in range(0, len(audio), 1024):
                chunk = audio[i:i + 1024]
                af = av.AudioFrame.from_ndarray(chunk[None, :].astype(np.float32), format="fltp", layout="mono")
                af.sample_rate, af.pts, af.time_base = SR, a_pts, Fraction(1, SR)
                a_pts += len(chunk)
                for p in aus.encode(af):
                    out.mux(p)
        for stream in (vs, aus):
            for p in stream.encode():
                out.mux(p)
    (HERE / "grid_dialogue.rttm").write_text(rttm("grid_dialogue", turns), encoding="utf-8")


if __name__ == "__main__":
    v = SileroVAD()
    stereo(v)
    grid(v)
