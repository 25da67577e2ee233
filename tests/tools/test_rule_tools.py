"""Rule and notification tools through the real SDK client, in memory."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.client.subscriptions import ResourceUpdated

from memory import HashEmbedder, MemoryStore
from memory.models import Entity, Keyframe, SegmentWrite, Trace
from memory.procedural import NOTIFICATIONS_URI
from plugin.manifest import load_manifest
from plugin.acting.notify import NotificationService
from plugin.server import create_server
from tests.conftest import write_manifest

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def door_segment() -> SegmentWrite:
    kf = Keyframe(id="kf_000000000001", camera_id="door", source="src", segment_index=0, t=0.5, wall_time=1.7e9,
                  quality=1.0, width=8, height=8, entity_ids=["person_0001"], jpeg=b"")
    trace = Trace(id="trc_000000000001", camera_id="door", source="src", segment_index=0, t_start=0.0, t_end=2.0,
                  wall_start=1.7e9, summary="", entity_ids=["person_0001"], keyframe_ids=[kf.id])
    return SegmentWrite(source="src", camera_id="door", segment_index=0, trace=trace, keyframes=[kf],
                        entities=[Entity(id="person_0001", kind="person", name="Lin")])


def send_from_another_process(manifest_path: Path) -> str:
    """What `reflectworld ingest` does in another process: evaluate rules and record a sent notification."""
    manifest = load_manifest(manifest_path)
    with MemoryStore(manifest.store_uri(), HashEmbedder(64), user_id=manifest.user_id) as store:
        [decision] = NotificationService(store, manifest).on_commit(door_segment())
    assert decision.decision == "sent"
    return decision.id


async def test_rules_are_added_listed_and_removed(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        async with Client(create_server(load_manifest(write_manifest(tmp_path)))) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert {"rule_add", "rule_list", "rule_remove", "notify_policy", "notify_poll"} <= set(tools)
            assert tools["rule_list"].annotations.read_only_hint and tools["notify_poll"].annotations.read_only_hint
            assert tools["rule_remove"].annotations.destructive_hint
            added = await client.call_tool("rule_add", {
                "text": "Lin at the door at night", "camera": "door", "severity": "warning", "cooldown": 60,
                "conditions": {"entities": ["Lin"], "time_window": {"start": "22:00", "end": "06:00"}}})
            assert not added.is_error
            rule = added.structured_content
            assert rule["id"].startswith("rule_") and rule["camera_ids"] == ["door"] and rule["cooldown_s"] == 60
            again = await client.call_tool("rule_add", {
                "text": "Lin at the door at night", "camera": "door", "severity": "warning", "cooldown": 60,
                "conditions": {"entities": ["Lin"], "time_window": {"start": "22:00", "end": "06:00"}}})
            assert again.structured_content["id"] == rule["id"]  # idempotent
            await client.call_tool("rule_add", {"text": "a suitcase is left outside"})  # a COCO class
            listed = (await client.call_tool("rule_list", {"camera": "door"})).structured_content
            assert listed["total"] == 2 and listed["rules"][0]["text"] == "Lin at the door at night"
            assert (await client.call_tool("rule_list", {"camera": "garden"})).structured_content["total"] == 1
            removed = await client.call_tool("rule_remove", {"rule_id": rule["id"]})
            assert removed.structured_content == {"removed": rule["id"]}
            missing = await client.call_tool("rule_remove", {"rule_id": rule["id"]})
            assert missing.is_error and "rule_list" in missing.content[0].text
            bad = await client.call_tool("rule_add", {"text": "x", "conditions": {"zone": "everywhere"}})
            assert bad.is_error


async def test_notify_policy_shows_and_changes_a_camera_policy(tmp_path: Path) -> None:
    manifest = write_manifest(tmp_path, notifications={"policy": {"min_severity": "warning"}})
    with anyio.fail_after(60):
        async with Client(create_server(load_manifest(manifest))) as client:
            shown = (await client.call_tool("notify_policy", {"camera": "door"})).structured_content
            assert shown["min_severity"] == "warning" and shown["channels"] == ["poll"] and shown["quiet_hours"] is None
            changed = await client.call_tool("notify_policy", {
                "camera": "door", "quiet_hours": {"start": "23:00", "end": "07:00"}, "timezone": "Europe/Paris"})
            assert changed.structured_content["quiet_hours"] == {"start": "23:00", "end": "07:00"}
            assert changed.structured_content["min_severity"] == "warning"  # untouched fields are kept
            other = (await client.call_tool("notify_policy", {"camera": "garden"})).structured_content
            assert other["quiet_hours"] is None
            wrong = await client.call_tool("notify_policy", {"camera": "door", "timezone": "Mars/Olympus"})
            assert wrong.is_error and "IANA" in wrong.content[0].text


async def test_notify_poll_times_out_cleanly_when_nothing_arrives(tmp_path: Path) -> None:
    with anyio.fail_after(30):
        async with Client(create_server(load_manifest(write_manifest(tmp_path)))) as client:
            result = await client.call_tool("notify_poll", {"since": 0, "wait_s": 0.5})
    assert not result.is_error
    assert result.structured_content == {"notifications": [], "cursor": 0, "timed_out": True}


async def test_notify_poll_returns_within_its_wait_when_a_notification_arrives(tmp_path: Path) -> None:
    manifest_path = write_manifest(tmp_path, rules=[{"text": "Lin is at the door", "cameras": ["door"],
                                                     "conditions": {"entities": ["Lin"]}, "severity": "warning"}])
    polled: dict[str, object] = {}
    events: list[object] = []
    with anyio.fail_after(60):
        async with Client(create_server(load_manifest(manifest_path))) as client:
            listening = anyio.Event()

            async def listen() -> None:
                async with client.listen(resource_subscriptions=[NOTIFICATIONS_URI]) as stream:
                    listening.set()
                    async for event in stream:
                        events.append(event)
                        return

            async def poll() -> None:
                result = await client.call_tool("notify_poll", {"since": 0, "wait_s": 45})
                polled.update(result.structured_content)

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(listen)
                tasks.start_soon(poll)
                await listening.wait()
                sent_id = await anyio.to_thread.run_sync(send_from_another_process, manifest_path)
            resource = await client.read_resource(NOTIFICATIONS_URI)
    assert polled["timed_out"] is False
    [notification] = polled["notifications"]
    assert notification["id"] == sent_id and notification["entity_id"] == "*" and notification["entities"] == ["person_0001"]
    assert notification["keyframe_id"] == "kf_000000000001" and polled["cursor"] == notification["seq"]
    assert events and isinstance(events[0], ResourceUpdated) and events[0].uri == NOTIFICATIONS_URI
    shown = json.loads(resource.contents[0].text)
    assert [n["id"] for n in shown["notifications"]] == [sent_id] and shown["cursor"] == notification["seq"]
