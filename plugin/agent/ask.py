"""The memory QA agent: a tool-calling loop on any OpenAI-compatible model over the memory store.

``reflectworld ask``, the ``memory_ask`` tool and ``reflectworld eval qa`` share
:class:`MemoryAgent`. Each round sends the conversation to the model with four functions:
``search_memory`` (any level, filters), ``get_memory`` (a record with its time neighbours),
``visual_evidence`` (key frames, shown to the model as images) and ``answer`` (the final answer
plus the ids it rests on). After ``max_rounds`` rounds the model is asked once more, without
tools, to answer from what it found. Malformed calls (bad JSON, unknown function, invalid
arguments, unknown ids) are answered with an error message the model can act on; they never end
the episode. Cited ids are checked against what the episode actually retrieved.
"""

from __future__ import annotations

import base64
import json
import logging
import re
from dataclasses import dataclass, field
from collections.abc import Awaitable, Callable
from typing import Any, Literal

import anyio
import openai
from mcp.server.mcpserver.exceptions import ToolError
from openai import AsyncOpenAI
from pydantic import BaseModel, Field, ValidationError

from memory import MemoryStore
from memory.errors import MemoryStoreError
from memory.search.timecut import TimeCut
from plugin.errors import BackendUnavailableError
from plugin.manifest import QAConfig
from tools.ask import AskAnswer

__all__ = ["MemoryAgent", "build_client", "make_asker"]

logger = logging.getLogger(__name__)

SYSTEM = """\
You answer questions about what cameras and videos showed, using ONLY the memory tools.
Memory levels: traces (what happened in a segment), observations (one person/object in one
segment), entities (people and objects), schemas (chapters), facts (what is known about an entity).
Work like this: search_memory with a few plain words (names of people, times such as "yesterday
evening" or "the first time", camera names and counts like "two people" are understood; each hit
says why it matched and scores 0-1); open promising hits with get_memory to see
what happened just before and after; call visual_evidence to look at key frames when appearance,
colour, clothing or position matters. Then call answer with a short answer and the ids of the
memories it rests on. If memory holds nothing relevant, say so in the answer — never guess."""

_ID = re.compile(r"\b(?:trc|obs|sch|fct|kf)_[0-9a-f]{6,}\b|\b(?:person|object)_\d{3,}\b")


class SearchArgs(BaseModel):
    """Search memory by meaning and keywords; returns ids, text and times, best first."""

    query: str = Field(min_length=1, description="what to look for, in plain words")
    level: Literal["traces", "observations", "entities", "schemas", "facts"] = Field(
        "traces", description="which kind of memory to search")
    camera: str | None = Field(None, description="only this camera id")
    entity: str | None = Field(None, description="only memories involving this entity id")
    start: float | None = Field(None, ge=0, description="only from this media second on")
    end: float | None = Field(None, ge=0, description="only up to this media second")
    limit: int = Field(5, ge=1, le=10, description="hits to return")


class GetArgs(BaseModel):
    """Open one memory by id with its earlier and later neighbours and the entities in it."""

    id: str = Field(description="a memory id from search_memory (trc_…, obs_…) or an entity id")
    neighbors: int = Field(1, ge=0, le=3, description="neighbours on each side")


class EvidenceArgs(BaseModel):
    """Look at the key frames behind a memory (they are shown to you as images)."""

    id: str = Field(description="a trace, observation, key-frame (kf_…) or entity id")


class AnswerArgs(BaseModel):
    """Give the final answer and the ids of the memories it rests on. Ends the task."""

    answer: str = Field(min_length=1, description="short, direct answer to the question")
    memory_ids: list[str] = Field(default_factory=list, description="ids of the memories used")


TOOLS: dict[str, type[BaseModel]] = {
    "search_memory": SearchArgs, "get_memory": GetArgs, "visual_evidence": EvidenceArgs, "answer": AnswerArgs,
}


@dataclass
class _Episode:
    consulted: list[str] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    images: list[dict[str, Any]] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def saw(self, ids: list[str]) -> None:
        self.consulted.extend(i for i in ids if i not in self.consulted)


def build_client(cfg: QAConfig) -> AsyncOpenAI:
    """An OpenAI-compatible client for ``cfg`` (the SDK retries 429/5xx twice on its own)."""
    return AsyncOpenAI(base_url=cfg.base_url, api_key=cfg.api_key.get_secret_value() or "not-needed",
                       timeout=cfg.timeout_s, max_retries=2)


def make_asker(qa: QAConfig) -> Callable[..., Awaitable[AskAnswer]]:
    """The ``memory_ask`` tool's backend: one agent episode per call, model errors as ``ToolError``."""

    async def ask(store: MemoryStore, question: str, *, max_rounds: int | None = None, camera: str | None = None,
                  until: float | None = None) -> AskAnswer:
        async with build_client(qa) as client:
            agent = MemoryAgent(store, client, qa.model, max_rounds=max_rounds or qa.max_rounds,
                                max_images=qa.max_images, until=until, camera=camera)
            try:
                return await agent.ask(question)
            except BackendUnavailableError as exc:
                raise ToolError(f"{exc}. Meanwhile answer with memory_search / memory_get yourself.") from exc

    return ask


def _schema(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema()
    schema.pop("title", None)
    return {"type": "function", "function": {"name": next(k for k, v in TOOLS.items() if v is model),
                                             "description": model.__doc__ or "", "parameters": schema}}


#: every memory level; ablations switch some off
ALL_LEVELS = ("traces", "observations", "entities", "schemas", "facts")


class MemoryAgent:
    """Answers one question at a time from ``store`` with the model behind ``client``."""

    def __init__(self, store: MemoryStore, client: AsyncOpenAI, model: str, max_rounds: int = 6,
                 max_images: int = 2, until: float | None = None, camera: str | None = None,
                 levels: tuple[str, ...] = ALL_LEVELS, visual: bool = True) -> None:
        """``until``/``camera`` cut memory at every level (``memory/search/timecut.py``): the agent sees only
        what was seen by that media second. ``levels`` and ``visual`` switch memory levels and the
        key-frame tool off (ablations)."""
        self.store, self.client, self.model = store, client, model
        self.max_rounds, self.max_images = max_rounds, max_images
        self.until, self.camera = until, camera
        self.memory = TimeCut(store, until=until, camera=camera, levels=levels)
        self.visual = visual
        self.tools = [_schema(m) for m in TOOLS.values() if visual or m is not EvidenceArgs]

    async def ask(self, question: str) -> AskAnswer:
        """Run the tool-calling loop and return the answer with its memory ids.

        Raises:
            BackendUnavailableError: the model endpoint failed or returned nothing usable.
        """
        episode = _Episode()
        messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM},
                                          {"role": "user", "content": question}]
        for rounds in range(1, self.max_rounds + 1):
            message = await self._complete(messages, tools=True, episode=episode)
            calls = [(c.id, c.function.name, c.function.arguments) for c in message.tool_calls or []
                     if getattr(c, "function", None)]
            assistant = message.model_dump(exclude_none=True)
            if not calls:
                calls = _inline_calls(message.content or "")
                if not calls:
                    return self._finish(question, message.content or "", [], episode, rounds, "answered")
                logger.info("QA model wrote %d tool call(s) as text; running them", len(calls))
                assistant = {"role": "assistant", "content": None, "tool_calls": [
                    {"id": i, "type": "function", "function": {"name": n, "arguments": a}} for i, n, a in calls]}
            messages.append(assistant)
            final: AnswerArgs | None = None
            for call_id, name, arguments in calls:
                episode.calls.append(name)
                reply, final_args = await self._dispatch(name, arguments, episode)
                final = final or final_args
                messages.append({"role": "tool", "tool_call_id": call_id, "content": reply})
            if final is not None:
                return self._finish(question, final.answer, final.memory_ids, episode, rounds, "answered")
            if episode.images:
                messages.append({"role": "user", "content": episode.images})
                episode.images = []
        messages.append({"role": "user", "content": "The tool budget is used up. Answer the question now "
                         "from what you found, and name the memory ids you used."})
        message = await self._complete(messages, tools=False, episode=episode)
        return self._finish(question, message.content or "", [], episode, self.max_rounds + 1, "round_limit")

    async def _complete(self, messages: list[dict[str, Any]], tools: bool, episode: _Episode | None = None) -> Any:
        extra: dict[str, Any] = {"tools": self.tools, "tool_choice": "auto"} if tools else {}
        try:
            response = await self.client.chat.completions.create(model=self.model, messages=messages, **extra)
            usage = getattr(response, "usage", None)
            if usage is not None and episode is not None:
                episode.prompt_tokens += int(getattr(usage, "prompt_tokens", 0) or 0)
                episode.completion_tokens += int(getattr(usage, "completion_tokens", 0) or 0)
        except openai.APIError as exc:
            raise BackendUnavailableError(
                f"the QA model {self.model!r} failed: {exc}; check qa.base_url, qa.model and qa.api_key "
                "in the manifest") from exc
        if not response.choices:
            raise BackendUnavailableError(f"the QA model {self.model!r} returned no choices; try again "
                                          "or use another model")
        return response.choices[0].message

    async def _dispatch(self, name: str, arguments: str | None, episode: _Episode) -> tuple[str, AnswerArgs | None]:
        """Run one tool call; any mistake becomes a message telling the model how to fix it."""
        model = TOOLS.get(name)
        if model is EvidenceArgs and not self.visual:
            return "error: visual_evidence is switched off in this run; use get_memory instead", None
        if model is None:
            return f"error: there is no function {name!r}; use one of {', '.join(TOOLS)}", None
        try:
            args = model.model_validate_json(arguments or "{}")
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in exc.errors())
            logger.info("QA model sent malformed %s arguments: %s", name, problems)
            return (f"error: the arguments of {name} are not valid ({problems}); send a JSON object "
                    f"matching its parameters"), None
        if isinstance(args, AnswerArgs):
            return "ok", args
        try:
            return await anyio.to_thread.run_sync(self._run, args, episode), None
        except (MemoryStoreError, ValueError, KeyError) as exc:
            text = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
            return f"error: {text}", None

    def _run(self, args: BaseModel, episode: _Episode) -> str:
        if isinstance(args, SearchArgs):
            hits = self.memory.search(args.query, level=args.level, camera=args.camera, entity=args.entity,
                                      start=args.start, end=args.end, limit=args.limit)
            episode.saw([h.id for h in hits])
            if not hits:
                return "no hits; try other words or another level"
            return json.dumps([h.model_dump(exclude_none=True, exclude={"source", "wall_start"}) for h in hits])
        if isinstance(args, GetArgs):
            result = self.memory.get(args.id, neighbors=args.neighbors)
            episode.saw([args.id, *(str(n.get("id")) for n in [*result.before, *result.after])])
            drop = {"embedding", "vector", "source", "user_id"}
            slim = [{k: v for k, v in row.items() if k not in drop} for row in [result.item]]
            payload = {"level": result.level, "item": slim[0],
                       "before": [{k: v for k, v in r.items() if k not in drop} for r in result.before],
                       "after": [{k: v for k, v in r.items() if k not in drop} for r in result.after],
                       "entities": [e.model_dump(include={"id", "kind", "name", "description"})
                                    for e in result.entities]}
            return json.dumps(payload, default=str)
        assert isinstance(args, EvidenceArgs)
        ids = self.memory.keyframe_ids(args.id)
        frames = self.memory.keyframes(ids[: self.max_images]) if ids and self.max_images else []
        if not frames:
            return f"no key frames are stored for {args.id!r}; use get_memory on it instead"
        episode.saw([args.id, *(kf.id for kf in frames)])
        parts: list[dict[str, Any]] = [{"type": "text", "text": f"Key frames for {args.id}:"}]
        for kf in frames:
            parts.append({"type": "text", "text": f"{kf.id}: camera {kf.camera_id} at {kf.t:.1f} s"})
            url = "data:image/jpeg;base64," + base64.b64encode(kf.jpeg).decode("ascii")
            parts.append({"type": "image_url", "image_url": {"url": url, "detail": "low"}})
        episode.images.extend(parts)
        listed = ", ".join(f"{kf.id} ({kf.camera_id} {kf.t:.1f} s)" for kf in frames)
        return f"{len(frames)} key frame(s) follow as images in the next message: {listed}"

    def _finish(self, question: str, answer: str, cited: list[str], episode: _Episode, rounds: int,
                finished: Literal["answered", "round_limit"]) -> AskAnswer:
        named = list(dict.fromkeys([*cited, *_ID.findall(answer)]))
        used = [i for i in named if i in episode.consulted]
        dropped = [i for i in named if i not in episode.consulted]
        if dropped:
            logger.info("QA answer cited ids it never retrieved (dropped): %s", ", ".join(dropped))
        text = answer.strip() or "The model gave no answer."
        return AskAnswer(question=question, answer=text, memory_ids=used, consulted=episode.consulted,
                         rounds=rounds, finished=finished, tool_calls=episode.calls,
                         prompt_tokens=episode.prompt_tokens, completion_tokens=episode.completion_tokens)


_INLINE = re.compile(r"\{.*\}", re.DOTALL)


def _inline_calls(content: str) -> list[tuple[str, str, str]]:
    """Tool calls a model wrote as text (``<tool_call>{"name": …, "arguments": {…}}</tool_call>`` or bare JSON)."""
    found: list[tuple[str, str, str]] = []
    for n, chunk in enumerate(re.split(r"</?tool_call>|```(?:json)?", content)):
        match = _INLINE.search(chunk)
        if not match:
            continue
        try:
            data = json.loads(match.group(0))
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict) and data.get("name") in TOOLS:
            args = data.get("arguments", data.get("parameters", {}))
            found.append((f"inline_{n}", str(data["name"]), args if isinstance(args, str) else json.dumps(args)))
    return found
