"""``reflectworld eval qa ANNOTATIONS.json``: the QA agent over M3-Bench-format questions.

Accepted layouts (M3-Bench's own, and two flatter ones)::

    {"video_id": {"qa_list": [{"question": …, "answer": …, "timestamp": "03:05", "type": [...]}, …]}, …}
    {"qa_list": [ … ]}
    [ {"question": …, "answer": …, "timestamp": 185.0, "type": "Person Understanding"}, … ]

Each question is asked of an already-ingested store with memory limited to what was seen up to its
``timestamp`` (media seconds, or ``[HH:]MM:SS``); ``--camera-per-video`` also limits it to the camera
named like the video id. A judge model (``qa.judge``; else the QA model) decides whether each answer
matches the reference, and accuracy is printed per question type.
"""

from __future__ import annotations

import argparse
import json
import logging
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from openai import AsyncOpenAI

from plugin.errors import PluginError

__all__ = ["QAItem", "accuracy_by_type", "add_parser", "load_annotations", "parse_timestamp"]

logger = logging.getLogger(__name__)

JUDGE_PROMPT = """\
You grade answers to questions about a video. Reply with exactly one word: Yes if the candidate
answer states the same thing as the reference answer (wording may differ; extra detail is fine if it
does not contradict the reference), otherwise No.

Question: {question}
Reference answer: {reference}
Candidate answer: {candidate}"""


@dataclass(frozen=True)
class QAItem:
    """One annotated question."""

    video: str
    question: str
    answer: str
    timestamp: float | None
    types: tuple[str, ...]


def parse_timestamp(value: Any) -> float | None:
    """Seconds from a number or ``[HH:]MM:SS[.s]``; ``None`` when absent.

    Raises:
        ValueError: an unreadable timestamp.
    """
    if value is None or value == "":
        return None
    if isinstance(value, int | float):
        return float(value)
    total = 0.0
    for part in str(value).strip().split(":"):
        total = total * 60 + float(part)
    return total


def load_annotations(path: Path) -> list[QAItem]:
    """Read M3-Bench-style annotations into :class:`QAItem` rows.

    Raises:
        PluginError: the file is missing, not JSON, or an entry lacks question/answer.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise PluginError(f"cannot read annotations {path}: {exc}; pass an M3-Bench-format JSON file") from exc
    if isinstance(data, dict) and "qa_list" in data:
        videos: dict[str, Any] = {path.stem: data}
    elif isinstance(data, dict):
        videos = data
    else:
        videos = {path.stem: {"qa_list": data}}
    items: list[QAItem] = []
    for video, entry in videos.items():
        qa_list = entry.get("qa_list") if isinstance(entry, dict) else None
        if not isinstance(qa_list, list):
            raise PluginError(f"{path}: video {video!r} has no qa_list; expected {{video: {{qa_list: [...]}}}}")
        for n, qa in enumerate(qa_list):
            if not isinstance(qa, dict) or not qa.get("question") or "answer" not in qa:
                raise PluginError(f"{path}: {video} qa_list[{n}] needs 'question' and 'answer'")
            kind = qa.get("type") or ["untyped"]
            try:
                when = parse_timestamp(qa.get("timestamp"))
            except ValueError as exc:
                raise PluginError(f"{path}: {video} qa_list[{n}] timestamp {qa.get('timestamp')!r} is not "
                                  "seconds or [HH:]MM:SS") from exc
            items.append(QAItem(video=str(video), question=str(qa["question"]), answer=str(qa["answer"]),
                                timestamp=when, types=tuple(kind) if isinstance(kind, list) else (str(kind),)))
    return items


def accuracy_by_type(items: list[QAItem], correct: list[bool]) -> dict[str, dict[str, float]]:
    """``{type: {n, correct, accuracy}}`` plus an ``overall`` row; a question counts in each of its types."""
    table: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for item, ok in zip(items, correct, strict=True):
        for kind in (*item.types, "overall"):
            table[kind][0] += 1
            table[kind][1] += int(ok)
    return {k: {"n": n, "correct": c, "accuracy": c / n if n else 0.0} for k, (n, c) in sorted(table.items())}


async def judge(client: AsyncOpenAI, model: str, item: QAItem, candidate: str) -> bool:
    """Ask the judge model whether ``candidate`` matches the reference answer."""
    response = await client.chat.completions.create(model=model, max_tokens=5, messages=[{
        "role": "user",
        "content": JUDGE_PROMPT.format(question=item.question, reference=item.answer, candidate=candidate)}])
    verdict = (response.choices[0].message.content or "").strip().lower() if response.choices else ""
    return verdict.startswith("yes")


def cmd_qa(args: argparse.Namespace) -> int:
    """Run the agent over every annotated question and print accuracy per type."""
    from plugin.ask import MemoryAgent, build_client
    from plugin.cli import _manifest, _out, _setup_logging
    from plugin.engine import open_store
    from plugin.progress import eval_progress

    manifest = _manifest(args)
    _setup_logging(manifest.log_level)
    qa = manifest.qa
    if qa is None:
        raise PluginError("no QA model configured: add a `qa:` section (and optionally qa.judge) to the "
                          "manifest — see manifests/example.yaml — and pass it with --manifest")
    items = load_annotations(Path(args.annotations))[: args.limit or None]
    judge_cfg = qa.judge
    judge_model = judge_cfg.model if judge_cfg else qa.model
    if judge_cfg is None:
        logger.warning("qa.judge is not set; the QA model %s also judges its own answers", qa.model)
    judge_qa = qa.model_copy(update={
        "base_url": (judge_cfg and judge_cfg.base_url) or qa.base_url,
        "api_key": (judge_cfg and judge_cfg.api_key) or qa.api_key})

    show = eval_progress("qa", "question(s)")

    async def run() -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        async with build_client(qa) as client, build_client(judge_qa) as judge_client:
            for n, item in enumerate(items, 1):
                agent = MemoryAgent(store, client, qa.model, max_rounds=args.rounds or qa.max_rounds,
                                    max_images=qa.max_images, until=item.timestamp,
                                    camera=item.video if args.camera_per_video else None)
                result = await agent.ask(item.question)
                ok = await judge(judge_client, judge_model, item, result.answer)
                logger.info("qa %d/%d %s: %s", n, len(items), "correct" if ok else "wrong", item.question)
                show(n, len(items))
                rows.append({"video": item.video, "question": item.question, "reference": item.answer,
                             "answer": result.answer, "correct": ok, "types": list(item.types),
                             "memory_ids": result.memory_ids, "rounds": result.rounds})
        return rows

    store = open_store(manifest)
    try:
        rows = anyio.run(run)
    finally:
        store.close()
    table = accuracy_by_type(items, [r["correct"] for r in rows])
    if args.json:
        _out(json.dumps({"questions": rows, "accuracy": table}, indent=2))
        return 0
    width = max([len(k) for k in table] + [4])
    _out(f"{'type':<{width}}  {'n':>4}  {'correct':>7}  accuracy")
    for kind, row in table.items():
        _out(f"{kind:<{width}}  {row['n']:>4}  {row['correct']:>7}  {row['accuracy']:.3f}")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``reflectworld eval qa``."""
    p = sub.add_parser("qa", help="QA accuracy per question type on M3-Bench-format annotations")
    p.add_argument("annotations", help="annotations JSON (question, answer, timestamp, type)")
    p.add_argument("--manifest", "-m", help="manifest with a `qa:` section (and qa.judge)")
    p.add_argument("--store", help="LanceDB URI of the ingested store, overriding memory.uri")
    p.add_argument("--rounds", type=int, help="tool-calling rounds per question (default: qa.max_rounds)")
    p.add_argument("--limit", type=int, default=0, help="only the first N questions")
    p.add_argument("--camera-per-video", action="store_true",
                   help="limit each question to the camera id named like its video")
    p.add_argument("--json", action="store_true", help="print every answer and the table as JSON")
    p.set_defaults(func=cmd_qa)
