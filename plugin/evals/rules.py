"""``reflectworld eval rules CLIP LABELS``: precision and recall of notification deliveries.

The clip is ingested into a fresh temporary store (hash embedder: embeddings play no part in
rules) by the same engine ``reflectworld ingest`` uses: every committed segment goes through the
rule matcher (rules given only as text are compiled first) and the notification resolver. LABELS (YAML or
JSON) names the rules, an optional policy and the labelled event windows in media seconds::

    camera: door                      # camera id to ingest under (default: the clip's stem)
    rules:                            # same keys as the manifest's `rules:` entries
      - {text: tell me when someone comes into view, severity: warning, cooldown_s: 5}
      - {text: door, conditions: {entities: ["*"]}}   # or structured conditions
    policy: {event_gap_s: 1.0}        # optional: the camera's notification policy (manifest keys)
    tolerance_s: 1.0                  # optional: slack around each window (segment boundaries)
    events:
      - {start: 3.0, end: 8.0}        # optional `rule: 0` ties a window to one rule (index)

A delivery (a ``sent`` decision) is a true positive when its segment starts inside a window
(± tolerance) not yet credited; a second delivery in the same window is a false positive.
Precision = true positives / deliveries; recall = credited windows / windows.
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from plugin.errors import PluginError

__all__ = ["EventWindow", "Labels", "add_parser", "evaluate", "score"]

logger = logging.getLogger(__name__)


class EventWindow(BaseModel):
    """One labelled event, in media seconds."""

    model_config = ConfigDict(extra="forbid")

    start: float = Field(ge=0)
    end: float = Field(ge=0)
    rule: int | None = Field(None, ge=0, description="index into `rules`; none = any rule")


class Labels(BaseModel):
    """The LABELS file."""

    model_config = ConfigDict(extra="forbid")

    camera: str | None = None
    rules: list[dict[str, Any]] = Field(default_factory=list)
    policy: dict[str, Any] = Field(default_factory=dict)
    tolerance_s: float = Field(1.0, ge=0)
    events: list[EventWindow]


def score(deliveries: list[tuple[float, str]], events: list[EventWindow], rule_ids: list[str],
          tolerance_s: float) -> dict[str, Any]:
    """Match ``(media t, rule id)`` deliveries to windows; return precision, recall and the pairing."""
    credited: dict[int, int] = {}
    true_pos = 0
    for n, (t, rule_id) in enumerate(sorted(deliveries)):
        for i, ev in enumerate(events):
            wanted = rule_ids[ev.rule] if ev.rule is not None and ev.rule < len(rule_ids) else None
            if i in credited or (wanted is not None and wanted != rule_id):
                continue
            if ev.start - tolerance_s <= t <= ev.end + tolerance_s:
                credited[i] = n
                true_pos += 1
                break
    precision = true_pos / len(deliveries) if deliveries else 0.0
    recall = len(credited) / len(events) if events else 0.0
    return {"precision": round(precision, 4), "recall": round(recall, 4), "deliveries": len(deliveries),
            "credited": credited}


def evaluate(clip: Path, labels: Labels, manifest: Any, progress: Any = None) -> dict[str, Any]:
    """Ingest ``clip`` into a temporary store with the labelled rules; score the deliveries.

    The engine is built from the manifest exactly as ``reflectworld ingest`` builds it (same
    perception, same VLM if configured, same rule compiler), on a temporary store with the hash
    embedder and no HTTP delivery.
    """
    from memory.procedural import RuleConditions
    from plugin.engine import Engine, Overrides
    from plugin.manifest import HashEmbedderConfig, NotifyPolicyConfig, RuleConfig
    from plugin.acting.notify import policy_from_config

    camera = labels.camera or clip.stem
    rules = [RuleConfig.model_validate(r) for r in labels.rules] or list(manifest.rules)
    if not rules:
        raise PluginError(f"no rules to evaluate: add `rules:` to {clip.name}'s labels file or the manifest")
    with tempfile.TemporaryDirectory(prefix="reflectworld-eval-rules-") as tmp:
        memory = manifest.memory.model_copy(update={"uri": str(Path(tmp) / "lancedb"), "embedder": HashEmbedderConfig()})
        manifest = manifest.model_copy(update={"memory": memory, "rules": [], "sources": []})
        with Engine.from_manifest(manifest, Overrides(deliver=False)) as engine:
            service = engine.notifications
            if labels.policy:
                service.procedural.set_policy(policy_from_config(camera, NotifyPolicyConfig.model_validate(labels.policy)))
            ids = []
            for r in rules:
                conditions = RuleConditions.model_validate(r.conditions) if r.conditions else None
                try:
                    rule = service.add_rule(r.text, r.cameras, conditions, r.severity, r.cooldown_s, r.enabled)
                except ValueError as exc:
                    raise PluginError(f"rule {r.text!r}: {exc}") from None
                ids.append(rule.id)
            report = engine.ingest_file(clip, camera, progress=progress)
            decisions = service.procedural.decisions(0, limit=100_000)
    sent = [(float(d.payload.get("t_start") or 0.0), d.rule_id) for d in decisions if d.decision == "sent"]
    result = score(sent, labels.events, ids, labels.tolerance_s)
    reasons: dict[str, int] = {}
    for d in decisions:
        reasons[d.reason] = reasons.get(d.reason, 0) + 1
    result.update(segments=report.segments_written, reasons=reasons, sent=sorted(sent))
    return result


def _run(args: argparse.Namespace) -> int:
    from plugin.cli import _manifest, _out, _setup_logging
    from plugin.progress import Progress, ingest_progress

    manifest = _manifest(args)
    _setup_logging("WARNING")
    clip, labels_path = Path(args.clip), Path(args.labels)
    if not labels_path.is_file():
        raise PluginError(f"labels file {labels_path} not found; see `reflectworld eval rules --help` for its form")
    try:
        labels = Labels.model_validate(yaml.safe_load(labels_path.read_text(encoding="utf-8")))
    except (yaml.YAMLError, ValueError) as exc:
        raise PluginError(f"{labels_path}: {exc}") from None
    bar = Progress()
    try:
        result = evaluate(clip, labels, manifest, progress=ingest_progress(clip.name, bar))
    finally:
        bar.finish()
    if args.json:
        _out(json.dumps({k: result[k] for k in ("precision", "recall", "deliveries")}))
        return 0
    _out(f"{clip.name}: {result['segments']} segment(s), {len(labels.events)} labelled event(s), "
         f"{result['deliveries']} deliveries")
    for i, ev in enumerate(labels.events):
        hit = result["credited"].get(i)
        shown = f"delivered at {result['sent'][hit][0]:.1f} s" if hit is not None else "MISSED"
        _out(f"  event {i}: {ev.start:.1f}–{ev.end:.1f} s  {shown}")
    _out("decisions: " + ", ".join(f"{k} {v}" for k, v in sorted(result["reasons"].items())))
    _out(f"precision {result['precision']:.3f}  recall {result['recall']:.3f}")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``reflectworld eval rules``."""
    p = sub.add_parser("rules", help="precision/recall of notification deliveries against labelled event windows",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("clip", help="video file to ingest (into a temporary store)")
    p.add_argument("labels", help="YAML/JSON: rules, optional policy, event windows (media seconds)")
    p.add_argument("--manifest", "-m", help="manifest whose perception settings (and rules) to use")
    p.add_argument("--json", action="store_true", help='print one JSON object {"precision", "recall", "deliveries"}')
    p.set_defaults(func=_run, store=None)
