"""What proactive reminders cost: CPU of the reminder stage per media second at the full level.

The real-media bench clip (:func:`bench.media.real_720p`: faces, cuts, speech, captions) is ingested
through the engine ``reflectworld ingest`` builds for the default manifest at ``level: full``, into a
store that holds a history like the evaluation's, ``--notes`` captions long (default 1,000: eight
evaluation histories), with the clip's two people enrolled under names the history uses. The stage
counts its own CPU time on the committing thread (``ReminderStage.cpu_s``); the whole ingest's
CPU (user + sys, every thread) is measured around it, and again with ``proactive.enabled: false``
for the cost without the stage, alternating ``--repeat`` times (on a shared machine the whole-process
difference is noisy; the stage's own count is not). Prints one JSON object. Nothing here is part of the test run.

Usage::

    .venv/bin/python bench/proactive_cost.py [--clips DIR] [--notes 1000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import resource
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from media import real_720p  # noqa: E402

from memory.store.notes import Note  # noqa: E402
from plugin.engine import Engine  # noqa: E402
from plugin.manifest import Manifest  # noqa: E402
from tools.entities import update_entity  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
WARM = ROOT / "tests" / "data" / "short_hamilton_clip.mp4"
PEOPLE = {"Kit": ROOT / "tests" / "data" / "faces" / "lin-manuel-miranda.png",
          "Ravi": ROOT / "tests" / "data" / "faces" / "alex-lacamoire.png"}


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def history(n: int) -> list[Note]:
    """``n`` captions in the evaluation's style (``tests/data/proactive/make_cases.py``), naming the
    enrolled people in mentions and one promise each."""
    spec = importlib.util.spec_from_file_location("make_cases", ROOT / "tests" / "data" / "proactive" / "make_cases.py")
    cases = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules["make_cases"] = cases  # dataclasses look their module up
    spec.loader.exec_module(cases)  # type: ignore[union-attr]
    lines: list[dict[str, str]] = []
    seed = 0
    while len(lines) < n:
        case = cases.Case("bench", [], {"Kit": "lin", "Ravi": "alex"},
                          ["Kit promised to bring back your phone charger."] if seed == 0 else [],
                          ["Kit watched the match.", "Ravi played the piano."], None, None, seed=seed)
        lines += cases.history(case, ["Kit", "Ravi"])
        seed += 1
    return [Note.model_validate(line) for line in lines[:n]]


def run(clip: Path, seconds: float, notes: list[Note], enabled: bool) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        manifest = Manifest.model_validate({"memory": {"uri": tmp}, "perception": {"level": "full"},
                                            "proactive": {"enabled": enabled}})
        with Engine.from_manifest(manifest) as eng:
            eng.ingest_file(WARM, camera_id="warm")  # models loaded before measuring
            for name, photo in PEOPLE.items():
                with eng.identity.lock:
                    update_entity(eng.store, "name", None, name, str(photo), None, None)
                eng.identity_edited()
            eng.remember(notes)
            stage_before = eng.reminders.cpu_s if eng.reminders else 0.0
            before = cpu_s()
            report = eng.ingest_file(clip, camera_id="bench")
            used = cpu_s() - before
            stage = (eng.reminders.cpu_s - stage_before) if eng.reminders else 0.0
            sent = eng.notifications.procedural.decisions(0, "sent", rule_id="rule_proactive")
    return {"proactive": enabled, "media_s": round(seconds, 1), "segments": report.segments_written,
            "cpu_s_per_media_s": round(used / seconds, 4), "stage_cpu_s_per_media_s": round(stage / seconds, 5),
            "stage_share": round(stage / used, 4) if used else None, "reminders": [d.message for d in sent]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clips", type=Path, default=Path(tempfile.gettempdir()) / "reflectworld-bench")
    parser.add_argument("--notes", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3, help="runs with and without the stage, alternating")
    args = parser.parse_args()
    args.clips.mkdir(parents=True, exist_ok=True)
    clip = args.clips / "real720.mp4"
    if not clip.exists():
        real_720p(clip)
    from perception.media.video import probe

    seconds = probe(clip).duration_s
    notes = history(args.notes)
    rows = [run(clip, seconds, notes, enabled) for _ in range(args.repeat) for enabled in (True, False)]

    def median(enabled: bool) -> float:
        values = sorted(float(r["cpu_s_per_media_s"]) for r in rows if r["proactive"] is enabled)  # type: ignore[arg-type]
        return values[len(values) // 2]

    print(json.dumps({"notes": len(notes), "runs": rows,  # noqa: T201 (a bench script's output)
                      "median_with": median(True), "median_without": median(False),
                      "added_share_by_difference": round(median(True) / median(False) - 1, 4)}, indent=2))


if __name__ == "__main__":
    main()
