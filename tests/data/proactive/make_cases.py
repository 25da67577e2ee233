"""Build the proactive-reminder evaluation cases (``reflectworld eval proactive CASES_DIR``).

Run from the repository root: ``python tests/data/proactive/make_cases.py`` (needs PyAV and OpenCV).
It writes ``tuning/`` (the cases the gate was tuned on) and ``heldout/`` (cases never looked at while
tuning), one sub-folder per case:

* ``clip.mp4`` — 320x240, 5 fps, 8–10 s: a grey room that people (portraits from ``tests/data/faces``
  and ``images/astronaut.png``) walk into and out of, or where a cup (``images/coffee.png``) is put down;
* ``enrol/<Name>.jpg`` — the portrait of each person who may be recognised, under a made-up name;
* ``history.jsonl`` — about 120 captions over the year before the clip, oldest first: the evidence (in
  positives), mere mentions of the same person or object (in every case), actionable items about
  people and things not in view, small talk;
* ``labels.json`` — ``{"trigger": [start_s, end_s] | null, "evidence": word | null}``.

Every positive is paired with a negative that keeps the same person or object mentioned without
anything to act on (or with the loop closed later).
"""

from __future__ import annotations

import json
import os
import random
import shutil
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import av
import cv2
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
FACES = {"lin": ROOT / "data" / "faces" / "lin-manuel-miranda.png",
         "alex": ROOT / "data" / "faces" / "alex-lacamoire.png",
         "astro": ROOT / "data" / "images" / "astronaut.png"}
CUP = ROOT / "data" / "images" / "coffee.png"
OUT = Path(__file__).resolve().parent
W, H, FPS = 320, 240, 5
#: the wall clock of every clip's first frame (its mtime): 2026-06-01 12:00 UTC
T0 = datetime(2026, 6, 1, 12, 0, tzinfo=timezone.utc)

OTHERS = ["Sam", "Priya", "Jonas", "Mei", "Tomás", "Aisha", "Leo", "Nora", "Omar", "Hana", "Felix", "Ines"]
AWAY_THINGS = ["bicycle", "laptop", "umbrella", "passport", "car keys", "lawnmower", "drill", "ladder", "tent",
               "guitar", "printer", "suitcase", "camera", "library book", "bike lock", "kettle", "blender"]
ACTIONS = ["promised to bring back the {t}", "needs to return the {t} by Friday", "said he would fix the {t}",
           "wants to borrow the {t} next week", "has to pick up the {t} from the repair shop",
           "agreed to lend us the {t}", "asked us to buy a new {t}", "will drop off the {t} on Sunday"]
ACTION_NOTES = ["Remember to charge the {t} before the trip.", "Buy batteries for the {t}.",
                "The {t} is broken and needs fixing.", "Don't leave the {t} in the rain.",
                "Take the {t} to the repair shop on Monday.", "We ran out of bags for the {t}."]
SMALL_TALK = ["{p} watched the match on Saturday.", "{p} talked about the weather in Lisbon.",
              "{p} was cooking pasta in the kitchen.", "{p} came by for coffee.", "{p} laughed at the old photos.",
              "Had lunch with {p} at the new place downtown.", "{p} is reading a novel about sailors.",
              "{p} walked past the window.", "{p} sat on the balcony in the sun.", "{p} liked the new curtains.",
              "The neighbours were loud last night.", "It rained all afternoon.", "The garden looked lovely today.",
              "A delivery van stopped outside.", "The heating came on early this morning.",
              "{p} mentioned a podcast about history.", "{p} showed us pictures from the holiday."]
SEEN = ["{p} carried a box up the stairs.", "{p} waved from the car.", "{p} was on the phone in the hallway.",
        "A cat crossed the garden.", "The dog slept on the sofa.", "{p} hung a jacket on the hook.",
        "Two people chatted at the door.", "{p} watered the plants on the balcony.", "{p} opened the window."]


@dataclass
class Case:
    name: str
    clip: list[tuple[float, float, str]]  # (start, end, what): a face key or "cup"
    enrol: dict[str, str]  # name → face key
    evidence: list[str]  # captions that make it a positive (absent in the negative)
    mentions: list[str]  # mere mentions of the thing in view (in both)
    trigger: tuple[float, float] | None
    word: str | None
    closing: list[str] = field(default_factory=list)  # captions after the evidence that close it (negatives)
    seconds: float = 9.0
    seed: int = 0


def history(case: Case, in_view: list[str]) -> list[dict[str, str]]:
    """About 120 captions over the year before T0, the case's own lines placed among them."""
    rnd = random.Random(case.seed)
    others = [p for p in OTHERS if p not in in_view]
    lines: list[tuple[str, str]] = []
    for _ in range(30):
        lines.append(("C", rnd.choice(others) + " " + rnd.choice(ACTIONS).format(t=rnd.choice(AWAY_THINGS)) + "."))
    for _ in range(12):
        lines.append(("C", rnd.choice(ACTION_NOTES).format(t=rnd.choice(AWAY_THINGS))))
    for _ in range(45):
        lines.append(("C", rnd.choice(SMALL_TALK).format(p=rnd.choice(others))))
    for _ in range(25):
        lines.append(("V", rnd.choice(SEEN).format(p=rnd.choice(others))))
    own = [("C" if " said" in m or "promis" in m else "V", m) for m in case.mentions]
    body = lines + own
    rnd.shuffle(body)
    # the evidence sits somewhere in the last months, the closing lines after it
    at = rnd.randint(len(body) // 2, len(body) - 3)
    body[at:at] = [("C", e) for e in case.evidence]
    end = at + len(case.evidence) + rnd.randint(2, 6)
    body[end:end] = [("V" if "saw" in c.lower() else "C", c) for c in case.closing]
    stamps = sorted((rnd.uniform(5, 360) for _ in body), reverse=True)
    out = []
    for (kind, text), days in zip(body, stamps):
        t = T0 - timedelta(days=days, minutes=rnd.randint(0, 600))
        out.append({"time": t.strftime("%Y-%m-%dT%H:%M:%SZ"), "kind": kind, "text": text})
    return out


def _sprite(key: str, size: int) -> np.ndarray:
    path = CUP if key == "cup" else FACES[key]
    img = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if key == "astro":  # a half-length portrait: keep the head and shoulders
        img = img[10:250, 108:338]
    if key == "cup":
        return cv2.resize(img, (size * 3 // 2, size), interpolation=cv2.INTER_AREA)
    return cv2.resize(img, (size, size), interpolation=cv2.INTER_AREA)


def write_clip(path: Path, appearances: list[tuple[float, float, str]], seconds: float) -> None:
    """People slide in from the left over 0.6 s and out to the right; a cup appears on the table."""
    room = np.full((H, W, 3), 95, np.uint8)
    cv2.rectangle(room, (0, 190), (W, H), (60, 70, 80), -1)
    cv2.rectangle(room, (240, 30), (300, 190), (120, 100, 70), -1)  # a door
    sprites = {k: _sprite(k, 200 if k == "cup" else 150) for _, _, k in appearances}
    spots = {k: 20 + 150 * (i % 2) for i, k in enumerate(dict.fromkeys(k for _, _, k in appearances))}
    walk = 0.6
    with av.open(str(path), mode="w") as out:
        vs = out.add_stream("libx264", rate=FPS)
        vs.width, vs.height, vs.pix_fmt = W, H, "yuv420p"
        vs.options = {"preset": "veryslow", "crf": "26"}
        for i in range(int(seconds * FPS)):
            t = i / FPS
            img = room.copy()
            for start, end, key in appearances:
                if not start <= t < end:
                    continue
                sprite, spot = sprites[key], spots[key]
                h, w = sprite.shape[:2]
                y = 25 if key != "cup" else 20
                if key == "cup":  # large enough that every COCO detector here names it with a margin
                    x = 10
                elif t < start + walk:
                    x = int(-w + (spot + w) * (t - start) / walk)
                elif t > end - walk:
                    x = int(spot + (W - spot) * (t - (end - walk)) / walk)
                else:
                    x = spot
                x0, x1 = max(0, x), min(W, x + w)
                if x1 > x0:
                    img[y:y + h, x0:x1] = sprite[:, x0 - x:x1 - x]
            frame = av.VideoFrame.from_ndarray(img, format="bgr24")
            frame.pts = i
            for p in vs.encode(frame):
                out.mux(p)
        for p in vs.encode():
            out.mux(p)
    os.utime(path, (T0.timestamp(), T0.timestamp()))


def build(case: Case, root: Path) -> None:
    folder = root / case.name
    if folder.exists():
        shutil.rmtree(folder)
    (folder / "enrol").mkdir(parents=True)
    for name, key in case.enrol.items():
        img = cv2.imread(str(FACES[key]), cv2.IMREAD_COLOR)
        scale = 320 / max(img.shape[:2])
        img = cv2.resize(img, (int(img.shape[1] * scale), int(img.shape[0] * scale)), interpolation=cv2.INTER_AREA)
        cv2.imwrite(str(folder / "enrol" / f"{name}.jpg"), img, [cv2.IMWRITE_JPEG_QUALITY, 88])
    write_clip(folder / "clip.mp4", case.clip, case.seconds)
    in_view = list(case.enrol)
    with (folder / "history.jsonl").open("w", encoding="utf-8") as f:
        for line in history(case, in_view):
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
    labels = {"trigger": list(case.trigger) if case.trigger else None, "evidence": case.word}
    (folder / "labels.json").write_text(json.dumps(labels) + "\n", encoding="utf-8")


def pair(name: str, clip: list[tuple[float, float, str]], enrol: dict[str, str], evidence: list[str],
         neutral: list[str], mentions: list[str], trigger: tuple[float, float], word: str, seed: int,
         closing: list[str] | None = None, seconds: float = 9.0) -> list[Case]:
    """A positive and its negative: the negative has ``neutral`` instead of the evidence (or the
    evidence and its ``closing`` lines)."""
    pos = Case(f"{name}_pos", clip, enrol, evidence, mentions, trigger, word, seconds=seconds, seed=seed)
    if closing:
        neg = Case(f"{name}_neg", clip, enrol, evidence, mentions, None, None, closing=closing, seconds=seconds,
                   seed=seed)
    else:
        neg = Case(f"{name}_neg", clip, enrol, neutral, mentions, None, None, seconds=seconds, seed=seed)
    return [pos, neg]


def tuning() -> list[Case]:
    return [
        *pair("kit_charger", [(0.5, 2.6, "alex"), (4.0, 7.5, "lin")], {"Kit": "lin", "Ravi": "alex"},
              ["Kit promised to bring back your phone charger next time he visits."],
              ["Kit said the phone charger he bought works well."],
              ["Kit watched the match with us.", "Kit talked about his trip to Porto.", "Ravi played the piano.",
               "Ravi came over for dinner.", "Kit was in the garden with a coffee."],
              (4.0, 7.5), "charger", seed=1),
        *pair("cup_office", [(3.0, 6.5, "cup")], {},
              ["Remember to take the blue cup back to the office kitchen."],
              ["The blue cup from the office has a chipped handle."],
              ["The cup was on the windowsill all day.", "Someone left a cup by the sink."],
              (3.0, 6.5), "office", seed=2),
        *pair("ravi_twice", [(1.0, 3.5, "alex"), (5.5, 8.0, "alex")], {"Ravi": "alex"},
              ["Ravi owes you twenty euros for the concert tickets."],
              ["Ravi told us about the concert tickets he got for his sister."],
              ["Ravi played the piano at the party.", "Ravi was wearing a grey suit.", "Saw Ravi at the bakery."],
              (1.0, 3.5), "tickets", seed=3),
        *pair("mara_drill", [(2.5, 6.0, "astro")], {"Mara": "astro"},
              ["Mara has to return the cordless drill she borrowed."],
              [], ["Mara visited the space museum.", "Mara told a story about her flight training."],
              (2.5, 6.0), "drill", seed=4, closing=["Mara returned the cordless drill yesterday."]),
    ]


def heldout() -> list[Case]:
    return [
        *pair("jun_cake", [(3.5, 7.0, "lin")], {"Jun": "lin"},
              ["Jun: \"I'll bring the cake tins back on Saturday.\""],
              ["Jun: \"The cake tins were a wedding present.\""],
              ["Jun sang at the birthday party.", "Jun was in a good mood.", "Jun asked about the weather."],
              (3.5, 7.0), "tins", seed=11),
        *pair("cup_vet", [(2.0, 5.0, "cup"), (6.5, 9.0, "cup")], {},
              ["Don't forget to wash the cup with the medicine for the cat before using it again."],
              ["The cup with the blue rim came from the market."],
              ["A cup of tea went cold on the desk.", "The mug was on the shelf."],
              (2.0, 5.0), "wash", seed=12, seconds=9.5),
        *pair("olu_keys", [(0.5, 2.5, "lin"), (4.0, 8.0, "astro")], {"Olu": "astro", "Dev": "lin"},
              ["Olu needs to give back the spare house keys before the move."],
              [], ["Olu went running by the river.", "Dev baked bread.", "Olu and Dev watched a film."],
              (4.0, 8.0), "keys", seed=13, closing=["Olu gave back the spare house keys on Tuesday."]),
        *pair("dev_plant", [(3.0, 7.0, "alex")], {"Dev": "alex"},
              ["Dev is allergic to peanuts, so avoid the peanut sauce when he visits."],
              ["Dev said the peanut sauce at the market was popular."],
              ["Dev likes jazz.", "Dev was late for the dinner.", "Saw Dev at the station."],
              (3.0, 7.0), "peanut", seed=14),
    ]


def main() -> None:
    for part, cases in (("tuning", tuning()), ("heldout", heldout())):
        root = OUT / part
        root.mkdir(exist_ok=True)
        for case in cases:
            build(case, root)
        print(f"{part}: {len(cases)} cases in {root}")


if __name__ == "__main__":
    main()
