"""The QA agent on a real ingested clip, driven by a scripted OpenAI-compatible model over real HTTP."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import anyio
import cv2
import numpy as np
import pytest
import yaml
from mcp import Client
from mcp.types import TextContent

from plugin.agent.ask import MemoryAgent
from plugin.cli import main
from plugin.manifest import load_manifest
from plugin.server import create_server
from plugin.engine import open_store
from tests.plugin.fake_chat_server import FakeChatServer, call, tool_replies

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def qa_manifest(ingested: Path, tmp_path: Path, base_url: str, **qa: Any) -> Path:
    """The ingested store's manifest plus a ``qa`` section pointing at the fake model."""
    data = yaml.safe_load(ingested.read_text())
    data["qa"] = {"base_url": base_url, "model": "fake-qa", "api_key": "${RW_QA_KEY:}", **qa}
    path = tmp_path / "qa.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


class Episode:
    """search → malformed get → get with neighbours → key frame (written as text) → answer."""

    def __init__(self) -> None:
        self.top: str | None = None

    def __call__(self, n: int, body: dict[str, Any]) -> dict[str, Any]:
        if "You grade answers" in json.dumps(body["messages"]):  # the eval's judge
            return {"content": "Yes"}
        step = sum(1 for m in body["messages"] if m["role"] == "assistant")
        if step == 0:
            return {"tool_calls": [call("search_memory", {"query": "person on stage", "limit": 3})]}
        if step == 1:
            self.top = json.loads(tool_replies(body)[0])[0]["id"]
            return {"tool_calls": [call("get_memory", '{"id": "' + self.top + '", neighbors: 1')]}  # bad JSON
        if step == 2:
            return {"tool_calls": [call("get_memory", {"id": self.top, "neighbors": 1})]}
        if step == 3:
            return {"content": f'<tool_call>{{"name": "visual_evidence", "arguments": {{"id": "{self.top}"}}}}'
                               "</tool_call>"}
        return {"tool_calls": [call("answer", {"answer": f"A person is on stage ({self.top}).",
                                               "memory_ids": [self.top, "trc_deadbeef0000"]})]}


def jpeg_images(message: dict[str, Any]) -> list[np.ndarray]:
    frames = []
    for part in message["content"] if isinstance(message["content"], list) else []:
        if part.get("type") == "image_url":
            url = part["image_url"]["url"]
            assert url.startswith("data:image/jpeg;base64,")
            raw = np.frombuffer(base64.b64decode(url.split(",", 1)[1]), np.uint8)
            frames.append(cv2.imdecode(raw, cv2.IMREAD_COLOR))
    return frames


async def test_agent_searches_opens_neighbours_looks_at_a_frame_and_cites_what_it_used(ingested: Path) -> None:
    script = Episode()
    store = open_store(load_manifest(ingested))
    try:
        with FakeChatServer(script) as fake, anyio.fail_after(60):
            from openai import AsyncOpenAI

            async with AsyncOpenAI(base_url=fake.base_url, api_key="sk-test", max_retries=0) as client:
                result = await MemoryAgent(store, client, "fake-qa", max_rounds=6).ask("Who is on stage?")
    finally:
        store.close()
    top = script.top
    assert top is not None and top.startswith("trc_")
    assert result.finished == "answered" and result.rounds == 5
    assert result.tool_calls == ["search_memory", "get_memory", "get_memory", "visual_evidence", "answer"]
    assert result.memory_ids == [top]  # the invented trc_deadbeef0000 is not cited
    assert top in result.answer
    # every request offered the four functions, with schemas
    assert {t["function"]["name"] for t in fake.requests[0]["tools"]} == {
        "search_memory", "get_memory", "visual_evidence", "answer"}
    # the malformed call got an actionable error, and the episode went on
    assert "error: the arguments of get_memory are not valid" in tool_replies(fake.requests[2])[0]
    opened = json.loads(tool_replies(fake.requests[3])[0])
    assert opened["item"]["id"] == top and len(opened["before"]) + len(opened["after"]) >= 1
    neighbour_ids = [r["id"] for r in opened["before"] + opened["after"]]
    assert set(neighbour_ids) <= set(result.consulted)
    # the key frame reached the model as a decodable image after the tool reply
    assert "key frame(s) follow as images" in tool_replies(fake.requests[4])[0]
    frames = jpeg_images(fake.requests[4]["messages"][-1])
    assert frames and frames[0] is not None and frames[0].shape[0] > 100 and frames[0].std() > 5


async def test_round_limit_forces_an_answer_without_tools(ingested: Path) -> None:
    def stubborn(n: int, body: dict[str, Any]) -> dict[str, Any]:
        if "tools" not in body:
            return {"content": "I could not find it."}
        return {"tool_calls": [call("search_memory", {"query": f"attempt {n}"}),
                               call("forget_everything", {})]}  # an unknown function, every round

    store = open_store(load_manifest(ingested))
    try:
        with FakeChatServer(stubborn) as fake, anyio.fail_after(60):
            from openai import AsyncOpenAI

            async with AsyncOpenAI(base_url=fake.base_url, api_key="sk-test", max_retries=0) as client:
                result = await MemoryAgent(store, client, "fake-qa", max_rounds=2).ask("What happened?")
    finally:
        store.close()
    assert result.finished == "round_limit" and result.rounds == 3
    assert len(fake.requests) == 3
    assert all("tools" in r for r in fake.requests[:2]) and "tools" not in fake.requests[2]
    assert "there is no function 'forget_everything'" in tool_replies(fake.requests[1])[1]
    assert result.answer == "I could not find it." and result.memory_ids == []


async def test_memory_ask_tool_answers_with_a_summary_and_structured_result(ingested: Path, tmp_path: Path) -> None:
    script = Episode()
    with FakeChatServer(script) as fake, anyio.fail_after(60):
        manifest = load_manifest(qa_manifest(ingested, tmp_path, fake.base_url))
        async with Client(create_server(manifest)) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert tools["memory_ask"].output_schema is not None
            assert tools["memory_ask"].annotations.read_only_hint
            result = await client.call_tool("memory_ask", {"question": "Who is on stage?"})
    assert not result.is_error, result.content
    assert result.structured_content["memory_ids"] == [script.top]
    [text] = result.content
    assert isinstance(text, TextContent) and text.text.startswith("A person is on stage")
    assert f"Memories used: {script.top}" in text.text and "{" not in text.text


async def test_memory_ask_is_only_offered_when_a_qa_model_is_configured(ingested: Path) -> None:
    async with Client(create_server(load_manifest(ingested))) as client:
        names = {t.name for t in (await client.list_tools()).tools}
    assert "memory_search" in names and "memory_ask" not in names


def test_cli_ask_and_eval_qa_run_the_agent(ingested: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with FakeChatServer(Episode()) as fake:
        manifest = qa_manifest(ingested, tmp_path, fake.base_url)
        assert main(["ask", "Who is on stage?", "--manifest", str(manifest)]) == 0
        out = capsys.readouterr().out
        assert "A person is on stage" in out and "Memories used: trc_" in out

        annotations = tmp_path / "robot.json"
        annotations.write_text(json.dumps({"stage": {"qa_list": [
            {"question": "Who is on stage?", "answer": "a person", "timestamp": "00:20",
             "type": ["Person Understanding", "Cross-Modal Reasoning"]},
            {"question": "Is anyone there?", "answer": "yes", "timestamp": 5, "type": "Person Understanding"}]}}))
        assert main(["eval", "qa", str(annotations), "--manifest", str(manifest), "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
    overall = report["accuracy"]["overall"]
    assert {k: overall[k] for k in ("n", "correct", "accuracy")} == {"n": 2, "correct": 2, "accuracy": 1.0}
    # the fake endpoint reports 10 + 5 tokens per call; each question took the scripted rounds
    rows = report["questions"]
    assert all(r["prompt_tokens"] == 10 * r["rounds"] and r["completion_tokens"] == 5 * r["rounds"] for r in rows)
    assert overall["rounds"] == sum(r["rounds"] for r in rows) / 2 and overall["tokens"] == 15 * overall["rounds"]
    assert all(r["scored_by"] == "judge" and r["tool_calls"] >= 4 for r in rows)
    assert report["accuracy"]["Person Understanding"]["n"] == 2
    assert report["accuracy"]["Cross-Modal Reasoning"]["n"] == 1
    judged = [r for r in fake.requests if "You grade answers" in json.dumps(r["messages"])]
    assert len(judged) == 2 and "Reference answer: a person" in judged[0]["messages"][0]["content"]
    # the first question only sees memories up to 20 s: every hit the agent got ends by then
    searches = [json.loads(tool_replies(r)[0]) for r in fake.requests
                if "search_memory" in json.dumps(r["messages"][-2:]) and tool_replies(r)
                and tool_replies(r)[0].startswith("[")]
    assert searches and all(h["t_end"] <= 20.0 + 1e-6 for hits in searches for h in hits)


def test_cli_ask_without_a_qa_section_says_how_to_configure_it(ingested: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ask", "anything", "--manifest", str(ingested)]) == 1
    assert "add a `qa:` section" in capsys.readouterr().err
