"""A sentence cut across segments stays findable: each segment quotes the whole sentences it was part of."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import anyio
import cv2
import numpy as np
import pytest
from mcp import Client

from perception.detectors.asr import load_audio
from plugin.engine import open_store
from plugin.manifest import load_manifest
from plugin.server import create_server
from tests.conftest import DATA, write_manifest
from tests.media import write_av

pytestmark = pytest.mark.slow


def _podium(out: Path) -> Path:
    """The astronaut still, slowly panning, over the JFK recording (11 s)."""
    speech = load_audio(DATA / "jfk.flac")  # 16 kHz mono
    still = cv2.resize(cv2.imread(str(DATA / "images" / "astronaut.png")), (320, 320))
    frames = int(len(speech) / 16000 * 10) + 1
    return write_av(out, (still[8:-8, dx:dx + 288] for dx in (int(16 * i / frames) for i in range(frames))),
                    speech.astype(np.float32), fps=10, rate=16000)


def test_each_piece_of_a_cut_sentence_quotes_the_whole_sentence_and_is_found_by_it(tmp_path: Path) -> None:
    clip = _podium(tmp_path / "podium.mp4")
    perception = {"asr": {"type": "whisper"}, "ocr": {"type": "none"}, "speakers": {"type": "none"},
                  "max_segment_s": 2.0}
    manifest = write_manifest(tmp_path, perception=perception, semantic={"enabled": False})
    done = subprocess.run([sys.executable, "-m", "plugin.cli", "ingest", str(clip), "--manifest", str(manifest),
                           "--camera", "podium"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr

    store = open_store(load_manifest(manifest))
    try:
        rows = [t.model_dump() for t in store.timeline(camera="podium", limit=100)]
    finally:
        store.close()

    async def run() -> list[dict]:
        async with Client(create_server(load_manifest(manifest)), raise_exceptions=True) as client:
            found = await client.call_tool("memory_search", {"query": "fellow Americans", "level": "traces"})
            return found.structured_content["hits"]

    hits = anyio.run(run)
    spoken = sorted((r for r in rows if r["transcript"]), key=lambda r: r["t_start"])
    assert len(spoken) >= 3  # the speech is cut into several segments
    pieces = [r for r in spoken if any(len(q.split()) > len(r["transcript"].split()) for q in r["quotes"])]
    assert pieces, [(r["transcript"], r["quotes"]) for r in spoken]
    for r in spoken:  # every quote is a whole sentence that holds words of the segment
        words = {w.strip(".,!?").lower() for w in r["transcript"].split()}
        assert all(words & {w.strip(".,!?").lower() for w in q.split()} for q in r["quotes"])
    sentence = next(q for r in pieces for q in r["quotes"] if "Americans" in q)
    holders = {r["id"] for r in spoken if sentence in r["quotes"]}
    assert len(holders) >= 2  # the sentence spans segments; each piece carries it
    assert hits and hits[0]["id"] in holders


def test_a_title_with_a_full_stop_does_not_end_the_sentence() -> None:
    from perception.detectors.asr import quotes

    assert quotes("And Mr. John Dashwood had then leisure. Ask not! What?") == [
        "And Mr. John Dashwood had then leisure.", "Ask not!", "What?"]
