"""Retrieval quality over the repository's own media: recall@1, recall@5 and MRR of ``memory_search``.

Usage::

    python bench/retrieval.py                 # builds the store in a temp dir, prints the table
    python bench/retrieval.py --dir /tmp/rw-retrieval --json

The store is built with the real local stack (MiniLM embedder, YuNet + SFace faces, SSD objects,
Whisper tiny.en, RapidOCR when installed) from ``tests/data``:

* camera ``stage``: the Hamilton clip (wide shot, pianist, performer close-up, audience), wall time
  yesterday 20:00 in the user's time zone;
* camera ``studio``: three GRID clips, one speaker each, this morning 09:00–09:02;
* camera ``podium``: the astronaut still with the JFK speech, today 14:00 (two days ago for ``--old``);
* camera ``kitchen``: the coffee still with a LibriVox reading, today 08:00;
* camera ``living_room``: the cat still with another LibriVox reading, two days ago at 19:00 (asked
  for by weekday name).

The two reference stills are enrolled *after* ingestion (``entity_update``'s path), so name questions
exercise query-time name resolution. Each question lists its relevant recordings as
``(camera, t_from, t_to)`` windows (media seconds); a hit is relevant when its camera matches and its
time span overlaps a window. Questions are phrased the way people ask (paraphrases of what was said,
names, objects, times, cameras, counts), not copied from the stored text.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import av
import cv2
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.media import write_av  # noqa: E402

logger = logging.getLogger("bench.retrieval")

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"
TZ = "Europe/Berlin"
#: display names of the reference stills (file name = identity)
NAMES = {"lin-manuel-miranda": "Lin-Manuel Miranda", "alex-lacamoire": "Alex Lacamoire"}


@dataclass(frozen=True)
class Question:
    """One labelled question and the recordings that answer it."""

    text: str
    kind: str
    relevant: tuple[tuple[str, float, float], ...]


QUESTIONS: list[Question] = [
    # what was said, paraphrased
    Question("the speech about not asking what the nation can give you", "speech", (("podium", 0, 11),)),
    Question("who told fellow citizens to serve their country", "speech", (("podium", 0, 11),)),
    Question("someone talking about a man who could have been more respectable if his wife had been kinder",
             "speech", (("living_room", 0, 8),)),
    Question("the reading about John Dashwood thinking how much he could do for them", "speech",
             (("kitchen", 0, 8),)),
    Question("the speaker who said to put something in the blue bin", "speech", (("studio", 0, 3.2),)),
    Question("the instruction about red with p nine", "speech", (("studio", 6.0, 9.4),)),
    Question("lay blue at x four", "speech", (("studio", 3.0, 6.3),)),
    Question("what was said about the country", "speech", (("podium", 0, 11),)),
    # names after enrolment
    Question("Lin-Manuel Miranda", "name", (("stage", 3.5, 7.0),)),
    Question("when was Alex Lacamoire on camera", "name", (("stage", 1.0, 3.0),)),
    Question("Miranda singing into the microphone", "name", (("stage", 3.5, 7.0),)),
    Question("close-up of Lacamoire at the piano", "name", (("stage", 1.0, 3.0),)),
    # objects and counts
    Question("a cup of coffee", "object", (("kitchen", 0, 8),)),
    Question("the cat", "object", (("living_room", 0, 8),)),
    Question("wide shot with several people", "count", (("stage", 0, 1.4), ("stage", 7.5, 9.3))),
    Question("the audience", "count", (("stage", 7.5, 9.3),)),
    # times
    Question("what happened yesterday evening", "time", (("stage", 0, 9.3),)),
    Question("on {two_days_ago}", "time", (("living_room", 0, 8),)),
    Question("today at 2 pm", "time", (("podium", 0, 11),)),
    Question("the first thing this morning", "time", (("kitchen", 0, 8),)),
    # cameras
    Question("what did the podium camera record", "camera", (("podium", 0, 11),)),
    Question("someone reading aloud in the kitchen", "camera", (("kitchen", 0, 8),)),
    Question("anything on the living room camera", "camera", (("living_room", 0, 8),)),
    Question("who spoke in the studio last", "camera", (("studio", 6.0, 9.4),)),
]


def _audio(path: Path) -> np.ndarray:
    """Mono float32 samples at 48 kHz."""
    with av.open(str(path)) as src:
        resampler = av.AudioResampler(format="flt", layout="mono", rate=48000)
        chunks = [r.to_ndarray().reshape(-1) for f in src.decode(audio=0) for r in resampler.resample(f)]
    return np.concatenate(chunks).astype(np.float32)


def still_with_speech(image: Path, audio: list[Path], out: Path, fps: int = 10) -> Path:
    """A clip of ``image`` (slowly panning, so it is not a frozen frame) over the speech files in a row."""
    samples = np.concatenate([np.concatenate([_audio(a), np.zeros(24000, np.float32)]) for a in audio])
    still = cv2.imread(str(image))
    h, w = still.shape[:2]
    scale = 480 / w
    still = cv2.resize(still, (480, int(h * scale) // 2 * 2))
    frames = int(len(samples) / 48000 * fps) + 1
    panning = (still[8:-8, dx:dx + 448] for dx in (int(16 * i / max(frames - 1, 1)) for i in range(frames)))
    return write_av(out, panning, samples, fps=fps, rate=48000)


def concat_clips(clips: list[Path], out: Path) -> Path:
    """Join clips (same size) into one file, each clip's audio padded or cut to its video's length."""
    frames: list[np.ndarray] = []
    audio: list[np.ndarray] = []
    for clip in clips:
        with av.open(str(clip)) as src:
            frames += [frame.to_ndarray(format="bgr24") for frame in src.decode(video=0)]
        target = int(len(frames) / 25 * 48000) - sum(len(a) for a in audio)
        samples = _audio(clip)[:max(0, target)]
        audio.append(np.concatenate([samples, np.zeros(max(0, target - len(samples)), np.float32)]))
    return write_av(out, frames, np.concatenate(audio), fps=25, rate=48000)


def _at(day_offset: int, hour: int, now: datetime) -> float:
    day = now.date() + timedelta(days=day_offset)
    return datetime(day.year, day.month, day.day, hour, tzinfo=now.tzinfo).timestamp()


def build(root: Path, now: datetime) -> Path:
    """Make the clips, ingest them with the full local stack, enrol the two reference faces."""
    from memory.identity.identity_ops import enrol_face
    from perception.identity.reference import reference_views
    from plugin.engine import Engine
    from plugin.manifest import Manifest

    media = root / "media"
    media.mkdir(parents=True, exist_ok=True)
    sense = sorted(DATA.glob("sense_and_sensibility_*.wav"))
    clips = {
        "stage": (shutil.copy(DATA / "short_hamilton_clip.mp4", media / "stage.mp4"), _at(-1, 20, now)),
        "studio": (concat_clips([DATA / "grid_bbaf2n.mpg", DATA / "grid_lbax4n.mpg", DATA / "grid_lrwp9a.mpg"],
                                media / "studio.mp4"), _at(0, 9, now)),
        "podium": (still_with_speech(DATA / "images" / "astronaut.png", [DATA / "jfk.flac"], media / "podium.mp4"),
                   _at(0, 14, now)),
        "kitchen": (still_with_speech(DATA / "images" / "coffee.png", sense[:1], media / "kitchen.mp4"),
                    _at(0, 8, now)),
        "living_room": (still_with_speech(DATA / "images" / "chelsea.png", sense[1:2], media / "living_room.mp4"),
                        _at(-2, 19, now)),
    }
    manifest = Manifest.model_validate({
        "user_id": "retrieval", "timezone": TZ, "log_level": "WARNING",
        "memory": {"uri": str(root / "lancedb"), "embedder": {"type": "minilm"}},
        "perception": {"level": "full", "asr": {"type": "whisper"}, "ocr": {"type": "rapidocr"}},
        "semantic": {"enabled": False}})
    (root / "manifest.json").write_text(manifest.model_dump_json(), encoding="utf-8")
    engine = Engine.from_manifest(manifest).open()
    try:
        for camera, (path, wall) in clips.items():
            os.utime(path, (wall, wall))
            t0 = time.perf_counter()
            report = engine.ingest_file(Path(path), camera)
            logger.info("%s: %d segments in %.1f s", camera, report.segments_written, time.perf_counter() - t0)
        for still in sorted((DATA / "faces").glob("*.png")):
            name = NAMES.get(still.stem, still.stem.replace("-", " ").title())
            views = reference_views(str(still))
            entity, how = enrol_face(engine.store, name, views[0][0], views[0][1], reference=str(still),
                                     views=views[1:])
            logger.info("enrolled %s as %s (%s)", name, entity.id, how)
    finally:
        engine.close(drain_s=60)
    return root / "manifest.json"


def relevant(hit: dict, q: Question) -> bool:
    """Whether ``hit`` (a memory_search hit) lies in one of ``q``'s windows."""
    for camera, lo, hi in q.relevant:
        if hit.get("camera_id") == camera and (hit.get("t_end") or 0) > lo and (hit.get("t_start") or 0) < hi:
            return True
    return False


def evaluate(manifest_path: Path, now: datetime) -> list[dict]:
    """Ask every question through ``memory_search`` over MCP; return one row per question."""
    import anyio
    from mcp import Client

    from plugin.manifest import Manifest
    from plugin.server import create_server

    manifest = Manifest.model_validate_json(manifest_path.read_text(encoding="utf-8"))

    async def run() -> list[dict]:
        rows = []
        async with Client(create_server(manifest)) as client:
            two_days_ago = (now - timedelta(days=2)).strftime("%A")
            for q in QUESTIONS:
                text = q.text.format(two_days_ago=two_days_ago)
                result = await client.call_tool("memory_search", {"query": text, "limit": 10})
                data = result.structured_content or {}
                hits = data.get("hits", [])
                ranks = [n for n, h in enumerate(hits, 1) if relevant(h, q)]
                rows.append({"question": text, "kind": q.kind, "rank": ranks[0] if ranks else None,
                             "top": [(h["camera_id"], round(h["t_start"], 1), h["score"]) for h in hits[:3]],
                             "understood": (data.get("understood") or {}).get("summary")})
        return rows

    return anyio.run(run)


def table(rows: list[dict]) -> str:
    """Markdown table of recall@1, recall@5 and MRR per question kind and overall."""
    kinds = sorted({r["kind"] for r in rows})
    lines = ["| questions | n | recall@1 | recall@5 | MRR |", "|---|---:|---:|---:|---:|"]
    for kind in [*kinds, "all"]:
        sel = [r for r in rows if kind in ("all", r["kind"])]
        r1 = sum(1 for r in sel if r["rank"] == 1) / len(sel)
        r5 = sum(1 for r in sel if r["rank"] and r["rank"] <= 5) / len(sel)
        mrr = sum(1 / r["rank"] for r in sel if r["rank"]) / len(sel)
        lines.append(f"| {kind} | {len(sel)} | {r1:.2f} | {r5:.2f} | {mrr:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, help="build (or reuse) the store here instead of a temp dir")
    parser.add_argument("--json", action="store_true", help="print every question's rank as JSON too")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    now = datetime.now(ZoneInfo(TZ))
    with tempfile.TemporaryDirectory(prefix="rw-retrieval-") as tmp:
        root = args.dir or Path(tmp)
        manifest = root / "manifest.json"
        if not manifest.exists():
            manifest = build(root, now)
        rows = evaluate(manifest, now)
    for r in rows:
        logger.info("%s %-70s rank %s top %s | %s", r["kind"], r["question"][:70], r["rank"], r["top"][:2],
                    r["understood"])
    if args.json:
        sys.stdout.write(json.dumps(rows, indent=1) + "\n")
    sys.stdout.write(table(rows) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
