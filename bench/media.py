"""Bench clips built from the repository's real media (``tests/data``), at 1280×720, 25 fps, H.264 + AAC.

* :func:`real_720p` (~78 s): the Hamilton stage clip upscaled (faces, cuts, singing) twice, the GRID
  speaker four times (a face talking), three still photographs with a caption overlay and the JFK
  speech under them (text + speech), and the people-room clip upscaled (people walking in and out).
* :func:`speech_720p` (~76 s): speech nearly all the time, with faces: the four GRID speakers in turn,
  four rounds, the Hamilton clip between rounds (a meeting room, a kitchen with the radio on).
* :func:`static_720p`: one photograph, unchanging apart from light sensor noise, with silent audio —
  a camera watching an empty room.

Nothing here is part of the test run.
"""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"
W, H, FPS, RATE = 1280, 720, 25, 48000


def _fit(image: np.ndarray) -> np.ndarray:
    """Scale to fill 1280×720 (letterboxed on black when the aspect ratio differs)."""
    h, w = image.shape[:2]
    scale = min(W / w, H / h)
    resized = cv2.resize(image, (round(w * scale), round(h * scale)), interpolation=cv2.INTER_CUBIC)
    out = np.zeros((H, W, 3), np.uint8)
    y, x = (H - resized.shape[0]) // 2, (W - resized.shape[1]) // 2
    out[y:y + resized.shape[0], x:x + resized.shape[1]] = resized
    return out


def _video(path: Path) -> list[np.ndarray]:
    """Every frame of a clip, resampled to 25 fps and fitted to 720p."""
    with av.open(str(path)) as c:
        stream = c.streams.video[0]
        frames = [(float(f.pts * stream.time_base), f.to_ndarray(format="bgr24")) for f in c.decode(stream)]
    duration = frames[-1][0] + 1 / float(stream.average_rate or FPS)
    out, j = [], 0
    for i in range(int(duration * FPS)):
        t = i / FPS
        while j + 1 < len(frames) and frames[j + 1][0] <= t:
            j += 1
        out.append(_fit(frames[j][1]))
    return out


def _audio(path: Path, seconds: float) -> np.ndarray:
    """Mono float32 samples at 48 kHz, padded or cut to ``seconds``."""
    resampler = av.AudioResampler(format="flt", layout="mono", rate=RATE)
    chunks = []
    with av.open(str(path)) as c:
        for frame in c.decode(c.streams.audio[0]):
            chunks.extend(r.to_ndarray().ravel() for r in resampler.resample(frame))
    samples = np.concatenate(chunks) if chunks else np.zeros(0, np.float32)
    n = int(seconds * RATE)
    return np.pad(samples, (0, max(0, n - len(samples))))[:n].astype(np.float32)


def _caption(image: np.ndarray, text: str) -> np.ndarray:
    out = image.copy()
    cv2.rectangle(out, (60, 560), (1220, 680), (255, 255, 255), -1)
    cv2.putText(out, text, (90, 640), cv2.FONT_HERSHEY_SIMPLEX, 2.0, (20, 20, 20), 4, cv2.LINE_AA)
    return out


def _parts() -> Iterator[tuple[list[np.ndarray], np.ndarray]]:
    hamilton = DATA / "short_hamilton_clip.mp4"
    frames = _video(hamilton)
    for _ in range(2):
        yield frames, _audio(hamilton, len(frames) / FPS)
    grid = DATA / "grid_bbaf2n.mpg"
    frames = _video(grid)
    for _ in range(4):
        yield frames, _audio(grid, len(frames) / FPS)
    speech = _audio(DATA / "jfk.flac", 11.0)
    for name, text in (("coffee", "CAFE OPEN 7AM"), ("astronaut", "VISITOR BADGE 042"), ("chelsea", "LOST CAT CALL 555")):
        still = _caption(_fit(cv2.imread(str(DATA / "images" / f"{name}.png"))), text)
        yield [still] * int(11.0 * FPS), speech
    room = DATA / "rules" / "people_room.mp4"
    frames = _video(room)
    yield frames, np.zeros(int(len(frames) / FPS * RATE), np.float32)


def _encode(path: Path, parts: Iterator[tuple[list[np.ndarray], np.ndarray]]) -> float:
    with av.open(str(path), "w") as out:
        vs = out.add_stream("libx264", rate=FPS)
        vs.width, vs.height, vs.pix_fmt = W, H, "yuv420p"
        vs.options = {"preset": "veryfast", "crf": "23"}
        aus = out.add_stream("aac", rate=RATE, layout="mono")
        i = a_pts = 0
        for frames, audio in parts:
            for image in frames:
                frame = av.VideoFrame.from_ndarray(image, format="bgr24")
                frame.pts = i
                i += 1
                out.mux(vs.encode(frame))
            for k in range(0, len(audio) - 1023, 1024):
                af = av.AudioFrame.from_ndarray(audio[None, k:k + 1024], format="flt", layout="mono")
                af.sample_rate, af.pts, af.time_base = RATE, a_pts, Fraction(1, RATE)
                a_pts += 1024
                out.mux(aus.encode(af))
        out.mux(vs.encode())
        out.mux(aus.encode())
    return i / FPS


def _speech_parts() -> Iterator[tuple[list[np.ndarray], np.ndarray]]:
    """Four rounds of the four GRID speakers taking turns (a face talking each), the Hamilton clip
    (singing over piano, faces, cuts) between rounds: speech nearly all the time."""
    grid = [DATA / f"grid_{code}.mpg" for code in ("bbaf2n", "brbk7n", "lbax4n", "lrwp9a")]
    clips = [(_video(p), p) for p in grid]
    hamilton = DATA / "short_hamilton_clip.mp4"
    ham = _video(hamilton)
    for k in range(4):
        for frames, p in clips:
            yield frames, _audio(p, len(frames) / FPS)
        if k < 3:
            yield ham, _audio(hamilton, len(ham) / FPS)


def speech_720p(path: Path) -> float:
    """Write the speech-dense bench clip (~76 s, GRID speakers + the Hamilton clip) to ``path``."""
    return _encode(path, _speech_parts())


def real_720p(path: Path) -> float:
    """Write the real-media bench clip to ``path``; returns its length in seconds."""
    return _encode(path, _parts())


def static_720p(path: Path, seconds: float) -> float:
    """Write a static, silent 720p clip (a photograph with sensor noise) of ``seconds``; returns its length."""
    base = _fit(cv2.imread(str(DATA / "images" / "coffee.png"))).astype(np.int16)
    rng = np.random.default_rng(0)
    frames = [np.clip(base + rng.integers(-2, 3, base.shape), 0, 255).astype(np.uint8)
              for _ in range(int(seconds * FPS))]
    return _encode(path, iter([(frames, np.zeros(int(seconds * RATE), np.float32))]))
