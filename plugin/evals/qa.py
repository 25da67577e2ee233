"""``reflectworld eval qa ANNOTATIONS.json``: the QA agent over video-QA benchmarks, the papers' way.

Annotation formats (``--format auto`` tells them apart):

* **M3-Bench** — ``{video_id: {"qa_list": [{question, answer, timestamp, type}, …]}}`` (also a bare
  ``{"qa_list": […]}`` or a list of such questions); open-ended, judged by a model.
* **EgoSchema** — ``[{q_uid, question, "option 0" … "option 4"}]`` with the answer index in each entry
  (``answer``) or in ``--answers subset_answers.json`` (``{q_uid: index}``); the video is ``q_uid``.
* **Video-MME** — ``[{videoID, question_id, question, options: ["A. …", …], answer: "A", task_type}]``.
* **OVO-Bench** (backward / real-time tasks) — ``[{id, video, task, question, options, gt, realtime}]``;
  the question is asked at ``realtime`` seconds.

Questions with options are scored by the letter the agent picks (multiple choice); open questions by
a judge model (``qa.judge``, else the QA model).

**Per-video driver** (``--videos DIR --work DIR``): every video is ingested into its own store
(``WORK/<video>/lancedb``), resumably, so nothing of one video can inform another, and its questions
are asked of that store alone. Without ``--videos`` the questions go to the manifest's store, each
video limited to the camera named like it with ``--camera-per-video``.

Every question is asked at its timestamp: the agent sees memory through :class:`memory.search.timecut.TimeCut`,
which applies the cut to traces, observations, chapters, facts, entities, neighbours and key frames.
Each row records the rounds, tool calls and tokens the agent used. Ablations: ``--no-semantic`` (no
facts), ``--no-chapters`` (no chapters), ``--no-visual`` (no key frames).
"""

from __future__ import annotations

import argparse
import json
import logging
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from openai import AsyncOpenAI

from plugin.errors import PluginError

__all__ = ["QAItem", "accuracy_by_type", "add_parser", "choice_of", "load_annotations", "mc_prompt",
           "parse_timestamp"]

logger = logging.getLogger(__name__)

JUDGE_PROMPT = """\
You grade answers to questions about a video. Reply with exactly one word: Yes if the candidate
answer states the same thing as the reference answer (wording may differ; extra detail is fine if it
does not contradict the reference), otherwise No.

Question: {question}
Reference answer: {reference}
Candidate answer: {candidate}"""

LETTERS = "ABCDEFGH"
VIDEO_EXTENSIONS = (".mp4", ".mkv", ".webm", ".mov", ".avi", ".mpg")


@dataclass(frozen=True)
class QAItem:
    """One annotated question (``options`` and ``correct`` for multiple choice)."""

    video: str
    question: str
    answer: str
    timestamp: float | None
    types: tuple[str, ...]
    options: tuple[str, ...] = ()
    correct: int | None = None
    qid: str = ""
    video_path: str | None = field(default=None, compare=False)


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


def _strip_letter(option: str) -> str:
    return re.sub(r"^\s*\(?[A-H][.):]\s*", "", str(option)).strip()


def _m3(path: Path, data: Any) -> list[QAItem]:
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
                                timestamp=when, types=tuple(kind) if isinstance(kind, list) else (str(kind),),
                                qid=f"{video}#{n}"))
    return items


def _egoschema(path: Path, data: list[dict[str, Any]], answers: dict[str, Any]) -> list[QAItem]:
    items = []
    for n, q in enumerate(data):
        options = tuple(str(q[f"option {i}"]) for i in range(8) if f"option {i}" in q)
        uid = str(q.get("q_uid") or q.get("video_idx") or n)
        raw = q.get("answer", answers.get(uid))
        correct = int(raw) if raw is not None and str(raw).isdigit() else None
        if correct is None:
            logger.warning("%s: EgoSchema question %s has no answer (pass --answers); skipped", path, uid)
            continue
        items.append(QAItem(video=uid, question=str(q["question"]), answer=options[correct], timestamp=None,
                            types=("egoschema",), options=options, correct=correct, qid=uid))
    return items


def _videomme(data: list[dict[str, Any]]) -> list[QAItem]:
    items = []
    for q in data:
        options = tuple(_strip_letter(o) for o in q["options"])
        correct = LETTERS.index(str(q["answer"]).strip()[:1].upper())
        items.append(QAItem(video=str(q.get("videoID") or q["video_id"]), question=str(q["question"]),
                            answer=options[correct], timestamp=None,
                            types=(str(q.get("task_type") or q.get("duration") or "videomme"),), options=options,
                            correct=correct, qid=str(q.get("question_id") or "")))
    return items


def _ovo(data: list[dict[str, Any]]) -> list[QAItem]:
    items = []
    for q in data:
        if "options" not in q or "realtime" not in q:
            logger.info("OVO-Bench item %s is a forward (active-response) task; skipped", q.get("id"))
            continue
        options = tuple(_strip_letter(o) for o in q["options"])
        gt = q.get("gt", q.get("answer"))
        correct = int(gt) if isinstance(gt, int) or str(gt).isdigit() else LETTERS.index(str(gt).strip()[:1].upper())
        video = str(q["video"])
        items.append(QAItem(video=Path(video).stem, question=str(q["question"]), answer=options[correct],
                            timestamp=parse_timestamp(q["realtime"]), types=(str(q.get("task") or "ovo"),),
                            options=options, correct=correct, qid=str(q.get("id") or ""), video_path=video))
    return items


def detect_format(data: Any) -> str:
    """``m3`` | ``egoschema`` | ``videomme`` | ``ovo`` from the shape of the annotations."""
    if isinstance(data, dict):
        return "m3"
    first = data[0] if isinstance(data, list) and data and isinstance(data[0], dict) else {}
    if "q_uid" in first or "option 0" in first:
        return "egoschema"
    if "realtime" in first:
        return "ovo"
    if "options" in first and ("videoID" in first or "video_id" in first):
        return "videomme"
    return "m3"


def load_annotations(path: Path, fmt: str = "auto", answers: Path | None = None) -> list[QAItem]:
    """Read benchmark annotations into :class:`QAItem` rows (see the module docstring for formats).

    Raises:
        PluginError: the file is missing, not JSON, or an entry lacks what its format needs.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        extra = json.loads(answers.read_text(encoding="utf-8")) if answers else {}
    except (OSError, json.JSONDecodeError) as exc:
        raise PluginError(f"cannot read annotations {path}: {exc}; pass a benchmark's JSON file") from exc
    fmt = detect_format(data) if fmt == "auto" else fmt
    try:
        if fmt == "egoschema":
            return _egoschema(path, data, extra)
        if fmt == "videomme":
            return _videomme(data)
        if fmt == "ovo":
            return _ovo(data)
    except (KeyError, ValueError, IndexError, TypeError) as exc:
        raise PluginError(f"{path}: not valid {fmt} annotations ({exc!r}); check --format") from exc
    return _m3(path, data)


def mc_prompt(item: QAItem) -> str:
    """The question with lettered options and the instruction to pick one."""
    lines = [item.question, "", "Options:"]
    lines += [f"({LETTERS[i]}) {o}" for i, o in enumerate(item.options)]
    lines += ["", "Answer with the letter of the best option first, e.g. '(B) …', then one short reason."]
    return "\n".join(lines)


def choice_of(answer: str, options: tuple[str, ...]) -> int | None:
    """The option an answer picks: a leading/explicit letter, else the one option it quotes."""
    letters = LETTERS[: len(options)]
    for pattern in (rf"^\W*\(?([{letters}])\b[).:]?", rf"\b(?:answer|option)(?: is)?:?\s*\(?([{letters}])\b",
                    rf"\(([{letters}])\)"):
        m = re.search(pattern, answer.strip(), re.IGNORECASE if "answer" in pattern else 0)
        if m:
            return letters.index(m.group(1).upper())
    quoted = [i for i, o in enumerate(options) if o and o.lower() in answer.lower()]
    return quoted[0] if len(quoted) == 1 else None


def accuracy_by_type(items: list[QAItem], correct: list[bool],
                     rows: list[dict[str, Any]] | None = None) -> dict[str, dict[str, float]]:
    """``{type: {n, correct, accuracy[, rounds, tokens]}}`` plus ``overall``; a question counts in each type."""
    table: dict[str, list[float]] = defaultdict(lambda: [0, 0, 0.0, 0.0])
    for n, (item, ok) in enumerate(zip(items, correct, strict=True)):
        for kind in (*item.types, "overall"):
            table[kind][0] += 1
            table[kind][1] += int(ok)
            if rows is not None:
                table[kind][2] += rows[n].get("rounds", 0)
                table[kind][3] += rows[n].get("prompt_tokens", 0) + rows[n].get("completion_tokens", 0)
    out: dict[str, dict[str, float]] = {}
    for k, (n, c, r, t) in sorted(table.items()):
        out[k] = {"n": n, "correct": c, "accuracy": c / n if n else 0.0}
        if rows is not None:
            out[k].update(rounds=r / n if n else 0.0, tokens=t / n if n else 0.0)
    return out


async def judge(client: AsyncOpenAI, model: str, item: QAItem, candidate: str) -> bool:
    """Ask the judge model whether ``candidate`` matches the reference answer."""
    response = await client.chat.completions.create(model=model, max_tokens=5, messages=[{
        "role": "user",
        "content": JUDGE_PROMPT.format(question=item.question, reference=item.answer, candidate=candidate)}])
    verdict = (response.choices[0].message.content or "").strip().lower() if response.choices else ""
    return verdict.startswith("yes")


def find_video(videos: Path, item: QAItem) -> Path:
    """The file of ``item``'s video under ``videos`` (its own path, or ``<video id>.<ext>``).

    Raises:
        PluginError: no such file.
    """
    if item.video_path:
        direct = videos / item.video_path
        if direct.is_file():
            return direct
    for ext in VIDEO_EXTENSIONS:
        candidate = videos / f"{item.video}{ext}"
        if candidate.is_file():
            return candidate
    raise PluginError(f"no video file for {item.video!r} under {videos}; expected {item.video}.mp4 (or "
                      f"{', '.join(VIDEO_EXTENSIONS[1:])})")


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:120] or "video"


def cmd_qa(args: argparse.Namespace) -> int:
    """Run the agent over every annotated question and print accuracy per type."""
    from plugin.agent.ask import ALL_LEVELS, MemoryAgent, build_client
    from plugin.cli import DRAIN_S, _engine, _ingest, _manifest, _out, _setup_logging
    from plugin.engine import open_store
    from plugin.progress import eval_progress

    manifest = _manifest(args)
    _setup_logging(manifest.log_level)
    qa = manifest.qa
    if qa is None:
        raise PluginError("no QA model configured: add a `qa:` section (and optionally qa.judge) to the "
                          "manifest — see manifests/example.yaml — and pass it with --manifest")
    items = load_annotations(Path(args.annotations), args.format,
                             Path(args.answers) if args.answers else None)[: args.limit or None]
    judge_cfg = qa.judge
    judge_model = judge_cfg.model if judge_cfg else qa.model
    if judge_cfg is None and any(not i.options for i in items):
        logger.warning("qa.judge is not set; the QA model %s also judges its own answers", qa.model)
    judge_qa = qa.model_copy(update={
        "base_url": (judge_cfg and judge_cfg.base_url) or qa.base_url,
        "api_key": (judge_cfg and judge_cfg.api_key) or qa.api_key})
    levels = tuple(lv for lv in ALL_LEVELS if not (args.no_semantic and lv == "facts")
                   and not (args.no_chapters and lv == "schemas"))
    by_video: dict[str, list[QAItem]] = defaultdict(list)
    for item in items:
        by_video[item.video if args.videos else ""].append(item)

    def own_manifest(video: str) -> Any:
        if not args.videos:
            return manifest
        work = Path(args.work or "reflectworld-eval").expanduser()
        return manifest.model_copy(update={"memory": manifest.memory.model_copy(
            update={"uri": str(work / _safe(video) / "lancedb")})})

    if args.videos:  # ingest first (in the main thread: Ctrl-C stops after a segment, a re-run resumes)
        for video, group in by_video.items():
            path = find_video(Path(args.videos).expanduser(), group[0])
            engine = _engine(own_manifest(video))
            try:
                report = _ingest(engine, path, video)
            finally:
                engine.close(drain_s=DRAIN_S)  # facts and chapters of the video are written before its questions
            logger.info("video %s: %d segment(s) new, %d already in memory", video, report.segments_written,
                        report.segments_skipped)
            if report.interrupted:
                raise PluginError(f"ingestion of {path} was interrupted; run the same command again to resume")

    async def ask_all(store: Any, group: list[QAItem], client: AsyncOpenAI,
                      judge_client: AsyncOpenAI) -> list[dict[str, Any]]:
        rows = []
        for item in group:
            camera = item.video if args.camera_per_video and not args.videos else None
            agent = MemoryAgent(store, client, qa.model, max_rounds=args.rounds or qa.max_rounds,
                                max_images=qa.max_images, until=item.timestamp, camera=camera, levels=levels,
                                visual=not args.no_visual)
            result = await agent.ask(mc_prompt(item) if item.options else item.question)
            if item.options:
                picked = choice_of(result.answer, item.options)
                ok, method = picked is not None and picked == item.correct, "choice"
            else:
                picked, method = None, "judge"
                ok = await judge(judge_client, judge_model, item, result.answer)
            logger.info("qa %s: %s (%s) %s", item.qid or item.video, "correct" if ok else "wrong", method,
                        item.question)
            rows.append({"video": item.video, "qid": item.qid, "question": item.question, "reference": item.answer,
                         "answer": result.answer, "correct": ok, "scored_by": method,
                         "choice": LETTERS[picked] if picked is not None else None, "types": list(item.types),
                         "until": item.timestamp, "memory_ids": result.memory_ids, "rounds": result.rounds,
                         "tool_calls": len(result.tool_calls), "prompt_tokens": result.prompt_tokens,
                         "completion_tokens": result.completion_tokens})
        return rows

    show = eval_progress("qa", "question(s)")

    async def run() -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        async with build_client(qa) as client, build_client(judge_qa) as judge_client:
            for video, group in by_video.items():
                store = await anyio.to_thread.run_sync(open_store, own_manifest(video))
                try:
                    rows += await ask_all(store, group, client, judge_client)
                finally:
                    store.close()
                show(len(rows), len(items))
        return rows

    rows = anyio.run(run)
    ordered = [i for group in by_video.values() for i in group]
    table = accuracy_by_type(ordered, [r["correct"] for r in rows], rows)
    if args.json:
        _out(json.dumps({"questions": rows, "accuracy": table,
                         "ablations": {"semantic": not args.no_semantic, "chapters": not args.no_chapters,
                                       "visual": not args.no_visual}}, indent=2))
        return 0
    width = max([len(k) for k in table] + [4])
    _out(f"{'type':<{width}}  {'n':>4}  {'correct':>7}  accuracy  rounds  tokens")
    for kind, row in table.items():
        _out(f"{kind:<{width}}  {row['n']:>4}  {row['correct']:>7}  {row['accuracy']:.3f}     "
             f"{row['rounds']:>5.1f}  {row['tokens']:>6.0f}")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``reflectworld eval qa``."""
    p = sub.add_parser("qa", help="QA accuracy per question type (M3-Bench, EgoSchema, Video-MME, OVO-Bench)")
    p.add_argument("annotations", help="annotations JSON")
    p.add_argument("--format", choices=["auto", "m3", "egoschema", "videomme", "ovo"], default="auto")
    p.add_argument("--answers", help="EgoSchema answers JSON ({q_uid: index}) when not in the annotations")
    p.add_argument("--videos", help="folder of the benchmark's videos: ingest each into its own store first")
    p.add_argument("--work", help="where per-video stores go (default ./reflectworld-eval)")
    p.add_argument("--manifest", "-m", help="manifest with a `qa:` section (and qa.judge)")
    p.add_argument("--store", help="LanceDB URI of the ingested store, overriding memory.uri")
    p.add_argument("--rounds", type=int, help="tool-calling rounds per question (default: qa.max_rounds)")
    p.add_argument("--limit", type=int, default=0, help="only the first N questions")
    p.add_argument("--camera-per-video", action="store_true",
                   help="without --videos: limit each question to the camera id named like its video")
    p.add_argument("--no-semantic", action="store_true", help="ablation: no facts (semantic memory)")
    p.add_argument("--no-chapters", action="store_true", help="ablation: no chapters")
    p.add_argument("--no-visual", action="store_true", help="ablation: no key frames for the agent")
    p.add_argument("--json", action="store_true", help="print every answer and the table as JSON")
    p.set_defaults(func=cmd_qa)
