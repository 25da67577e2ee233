"""``reflectworld eval proactive CASES_DIR``: does the assistant speak first, once, at the right moment?

Each case is a sub-folder of CASES_DIR::

    history.jsonl   one JSON object a line, oldest first: {"time": ISO-8601, "kind": "V"|"C", "text": "…"}
    clip.mp4        the present
    enrol/<Name>.jpg  optional: photos enrolled under that name before the clip (.jpeg and .png too)
    labels.json     {"trigger": [start_s, end_s] | null, "evidence": "<word the reminder must contain>" | null}

A case runs in its own fresh store through the shipped path: the photos are enrolled by
``entity_update``'s code, the history is told by ``reflectworld remember``'s, and the clip is
ingested by the engine (so the proactive stage runs as in ``ingest``, ``run`` or a capture).
Reminders are the sent notifications of rule ``rule_proactive``.

Scores, over the positives (``trigger`` given): ``perfect`` — exactly one reminder, inside the
window, containing the evidence word; ``hit`` — at least one such; ``early`` / ``late`` — a reminder
before / after the window; ``over`` — more than one reminder. Over the negatives (``trigger: null``):
``negative_fire_rate`` — the share with any reminder. With ``--json`` the last stdout line is
``{"per_case": [{"case", "reminders": [{"t_s", "text", "evidence"}]}], "perfect", "hit", "early",
"late", "over", "negative_fire_rate"}``.
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from plugin.errors import PluginError

__all__ = ["CaseLabels", "add_parser", "evaluate", "run_case", "score"]

logger = logging.getLogger(__name__)

#: photos a case's ``enrol/`` folder may hold (the file name without suffix is the name enrolled)
PHOTO_SUFFIXES = (".jpg", ".jpeg", ".png")


class CaseLabels(BaseModel):
    """A case's ``labels.json``."""

    model_config = ConfigDict(extra="forbid")

    trigger: tuple[float, float] | None = Field(None, description="[start_s, end_s] of the trigger; null = negative")
    evidence: str | None = Field(None, description="a word a grounded reminder must contain")


def _labels(folder: Path) -> CaseLabels:
    path = folder / "labels.json"
    try:
        labels = CaseLabels.model_validate_json(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PluginError(f"case {folder.name}: labels.json is missing") from None
    except ValidationError as exc:
        raise PluginError(f"case {folder.name}: labels.json: {exc.errors()[0]['msg']}; write "
                          '{"trigger": [start_s, end_s] or null, "evidence": "word" or null}') from None
    if labels.trigger is not None and labels.trigger[0] > labels.trigger[1]:
        raise PluginError(f"case {folder.name}: trigger starts after it ends ({list(labels.trigger)})")
    return labels


def cases_in(root: Path) -> list[Path]:
    """The case folders of ``root`` (those holding a clip.mp4), in name order."""
    if not root.is_dir():
        raise PluginError(f"{root} is not a folder of cases; each case is a sub-folder with history.jsonl, "
                          "clip.mp4, labels.json and optional enrol/<Name>.jpg")
    found = sorted(p for p in root.iterdir() if p.is_dir() and (p / "clip.mp4").is_file())
    if not found:
        raise PluginError(f"no cases in {root}: each case is a sub-folder with clip.mp4, history.jsonl and labels.json")
    return found


def run_case(folder: Path, manifest: Any, embedder: Any = None, progress: Any = None) -> list[dict[str, Any]]:
    """Run one case in a fresh temporary store; returns its reminders (media second, text, evidence ids)."""
    from memory.store.notes import NoteError
    from plugin.acting.reminders.stage import PROACTIVE_RULE_ID
    from plugin.engine import Engine, Overrides
    from plugin.remember import remember_file
    from tools.entities import update_entity

    with tempfile.TemporaryDirectory(prefix="reflectworld-eval-proactive-") as tmp:
        memory = manifest.memory.model_copy(update={"uri": str(Path(tmp) / "lancedb")})
        case_manifest = manifest.model_copy(update={"memory": memory, "sources": [], "rules": []})
        with Engine.from_manifest(case_manifest, Overrides(embedder=embedder, deliver=False)) as engine:
            photos = sorted(p for p in (folder / "enrol").iterdir() if p.suffix.lower() in PHOTO_SUFFIXES) \
                if (folder / "enrol").is_dir() else []
            for photo in photos:
                with engine.identity.lock:
                    update_entity(engine.store, "name", None, photo.stem.replace("_", " "), str(photo), None, None)
                engine.identity_edited()
            history = folder / "history.jsonl"
            if history.is_file():
                try:
                    remember_file(engine.store, history, engine)
                except NoteError as exc:
                    raise PluginError(f"case {folder.name}: {exc}") from None
            engine.ingest_file(folder / "clip.mp4", folder.name, progress=progress)
            sent = engine.notifications.procedural.decisions(0, "sent", rule_id=PROACTIVE_RULE_ID, limit=10_000)
    return [{"t_s": round(float(d.payload.get("t_start") or 0.0), 3), "text": d.message,
             "evidence": list(d.payload.get("evidence") or [])} for d in sorted(sent, key=lambda d: d.seq)]


def score(per_case: list[dict[str, Any]], labels: dict[str, CaseLabels]) -> dict[str, float]:
    """perfect, hit, early, late, over (shares of the positives) and negative_fire_rate."""
    counts = {"perfect": 0, "hit": 0, "early": 0, "late": 0, "over": 0}
    positives = negatives = fired = 0
    for case in per_case:
        lab, reminders = labels[case["case"]], case["reminders"]
        if lab.trigger is None:
            negatives += 1
            fired += bool(reminders)
            continue
        positives += 1
        start, end = lab.trigger
        word = (lab.evidence or "").lower()
        good = [r for r in reminders if start <= r["t_s"] <= end and word in r["text"].lower()]
        counts["perfect"] += len(reminders) == 1 and len(good) == 1
        counts["hit"] += bool(good)
        counts["early"] += any(r["t_s"] < start for r in reminders)
        counts["late"] += any(r["t_s"] > end for r in reminders)
        counts["over"] += len(reminders) > 1
    out = {k: round(v / positives, 4) if positives else 0.0 for k, v in counts.items()}
    out["negative_fire_rate"] = round(fired / negatives, 4) if negatives else 0.0
    return out


def evaluate(root: Path, manifest: Any, progress: Any = None, on_case: Any = None) -> dict[str, Any]:
    """Run every case of ``root``; returns ``{"per_case": [...], <scores>}``."""
    from plugin.engine import build_embedder

    folders = cases_in(root)
    labels = {f.name: _labels(f) for f in folders}
    embedder = build_embedder(manifest)  # one loaded model for every case's store
    per_case = []
    for folder in folders:
        reminders = run_case(folder, manifest, embedder, progress=progress(folder.name) if progress else None)
        per_case.append({"case": folder.name, "reminders": reminders})
        if on_case is not None:
            on_case(folder.name, labels[folder.name], reminders)
    return {"per_case": per_case, **score(per_case, labels)}


def _run(args: argparse.Namespace) -> int:
    from plugin.cli import _manifest, _out, _setup_logging
    from plugin.progress import Progress, ingest_progress

    manifest = _manifest(args)
    _setup_logging("WARNING")
    bar = Progress()

    def shown(name: str, lab: CaseLabels, reminders: list[dict[str, Any]]) -> None:
        if args.json:
            return
        want = f"trigger {lab.trigger[0]:.1f}–{lab.trigger[1]:.1f} s, '{lab.evidence}'" if lab.trigger else "negative"
        _out(f"{name} ({want}): {len(reminders)} reminder(s)")
        for r in reminders:
            _out(f"  {r['t_s']:6.1f} s  {r['text']}  [{', '.join(r['evidence'])}]")

    try:
        result = evaluate(Path(args.cases), manifest, progress=lambda name: ingest_progress(name, bar), on_case=shown)
    finally:
        bar.finish()
    if args.json:
        _out(json.dumps(result))
        return 0
    _out("perfect {perfect:.3f}  hit {hit:.3f}  early {early:.3f}  late {late:.3f}  over {over:.3f}  "
         "negative_fire_rate {negative_fire_rate:.3f}".format(**result))
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``reflectworld eval proactive``."""
    p = sub.add_parser("proactive", help="proactive reminders: perfect/hit/early/late/over and negative fire rate",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("cases", metavar="CASES_DIR", help="folder with one sub-folder per case")
    p.add_argument("--manifest", "-m", help="manifest whose perception, memory and proactive settings to use")
    p.add_argument("--json", action="store_true", help="print one JSON object (per_case + scores) as the last line")
    p.set_defaults(func=_run, store=None)
