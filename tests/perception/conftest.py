"""Fixtures for perception tests: a synthetic clip encoded with PyAV, the real test clip,
shared face models and a real LanceDB store (hash embedder) in tmp_path."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from memory import HashEmbedder, MemoryStore
from perception.detectors.faces import FaceDetector, FaceEmbedder
from tests.media import write_clip

DATA = Path(__file__).resolve().parents[1] / "data"
HAMILTON = DATA / "short_hamilton_clip.mp4"


def encode_clip(path: Path, seconds: float = 2.0, fps: int = 25, size: tuple[int, int] = (320, 240),
                cut_at: float | None = 1.0, audio: bool = True) -> Path:
    """Encode a clip: a red frame with a moving square, switching to blue at ``cut_at``, plus a tone."""
    w, h = size

    def draw(i: int) -> np.ndarray:
        img = np.zeros((h, w, 3), np.uint8)
        img[:] = (40, 40, 200) if cut_at is None or i / fps < cut_at else (200, 60, 30)
        x = (i * 4) % (w - 40)
        img[100:140, x:x + 40] = (255, 255, 255)
        return img

    return write_clip(path, draw, int(seconds * fps), fps, size, tone=0.2 if audio else 0.0,
                      options={"preset": "ultrafast", "tune": "zerolatency", "crf": "23"})


@pytest.fixture(scope="session")
def synthetic_clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-second 320×240 clip at 25 fps with a colour cut at 1.0 s and a 440 Hz tone."""
    return encode_clip(tmp_path_factory.mktemp("clips") / "synthetic.mp4")


@pytest.fixture(scope="session")
def hamilton() -> Path:
    return HAMILTON


@pytest.fixture(scope="session")
def face_detector() -> FaceDetector:
    return FaceDetector()


@pytest.fixture(scope="session")
def face_embedder() -> FaceEmbedder:
    return FaceEmbedder()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MemoryStore]:
    with MemoryStore(str(tmp_path / "mem"), HashEmbedder(64)) as s:
        yield s
