"""The dashboard in a real browser: `reflectworld serve --http` spawned for real, Debian's chromium
driven by Playwright, MCP over HTTP on the same server to check what the pages changed.

Screenshots land in the test's tmp dir and in ``tests/artifacts/`` (git-ignored).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client

from tests.conftest import CLIP
from tests.plugin.browser import chromium, copy_store, screenshot
from tests.plugin.fake_chat_server import FakeChatServer
from tests.plugin.test_ask_agent import Episode
from tests.plugin.test_transports import free_port, http_server

NAME = "Lin-Manuel Miranda"


def mcp_call(url: str, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    """Call one tool over streamable HTTP (on a thread of its own) and return its structured content."""

    async def go() -> dict[str, Any]:
        with anyio.fail_after(60):
            async with Client(url) as client:
                result = await client.call_tool(tool, args)
                assert not result.is_error, result.content
                return dict(result.structured_content or {})

    with ThreadPoolExecutor(1) as pool:  # Playwright's sync API owns this thread's event loop
        return pool.submit(anyio.run, go).result()


def test_dashboard_end_to_end_in_chromium(ingested: Path, clean_env: dict[str, str], tmp_path: Path) -> None:
    with FakeChatServer(Episode()) as fake:
        manifest = copy_store(ingested, tmp_path / "srv", qa={"base_url": fake.base_url, "model": "fake-qa",
                                                              "api_key": "${RW_TEST_QA_KEY:}"},
                              access={"roots": [str(tmp_path / "media")]})
        clip = tmp_path / "media" / "porch.mp4"
        clip.parent.mkdir()
        shutil.copy(CLIP, clip)
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        with http_server(manifest, port, clean_env, tmp_path / "serve.log"), chromium() as browser:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(30_000)

            # Sources: the page loads with the camera in memory and counts; a capture starts and stops.
            page.goto(base + "/")
            assert page.locator("h1").first.inner_text() == "Sources"
            assert "stage" in page.locator("section.grid2 table").inner_text()
            page.fill("input[name=source]", str(CLIP))  # outside the manifest's access roots
            page.get_by_role("button", name="Start capture").click()
            page.locator(".flash", has_text="not started").wait_for()
            assert "access" in page.locator(".flash").inner_text() and str(CLIP) not in page.locator(
                "#captures table").inner_text()
            page.fill("input[name=source]", str(clip))
            page.fill("input[name=camera_id]", "porch")
            page.get_by_role("button", name="Start capture").click()
            page.locator(".flash", has_text="started porch").wait_for()
            assert "porch" in page.locator("#captures table").inner_text()
            screenshot(page, tmp_path, "dashboard-sources")
            page.locator("#captures button", has_text="Stop").first.click()
            # The stop returns at once or says the segment in progress is being finished; the 2-second status
            # refresh then shows the capture stopped.
            page.locator(".flash", has_text=re.compile(r"stop(ped|ping) porch")).wait_for()
            page.locator("#captures tr", has_text="porch").locator(".state", has_text="stopped").wait_for(
                timeout=180_000)
            # The outcome stays on screen through the status refresh that follows it.
            with page.expect_response(lambda r: r.url.endswith("/sources/status")):
                pass
            assert re.search(r"stop(ped|ping) porch", page.locator(".flash").inner_text())

            # Timeline: moments with key frames that really are JPEGs served from the store.
            page.goto(base + "/timeline?camera=stage")
            moments = page.locator("li.moment")
            assert moments.count() >= 3
            frame = page.locator("img.frame").first.get_attribute("src")
            assert frame and httpx.get(base + frame).content[:3] == b"\xff\xd8\xff"
            screenshot(page, tmp_path, "dashboard-timeline")

            # Search (the memory_search search) returns the ingested clip's segments.
            page.goto(base + "/search")
            page.fill("input[name=q]", "several people on stage")
            page.press("input[name=q]", "Enter")
            page.locator("li.hit").first.wait_for()
            hits = page.locator("li.hit")
            assert hits.count() >= 1
            assert "stage" in hits.first.inner_text() and "trc_" in hits.first.inner_text()
            screenshot(page, tmp_path, "dashboard-search")

            # Open a moment: its segment, who was there, neighbours.
            page.locator("a.hit-link").first.click()
            page.wait_for_url("**/moments/trc_*")
            assert page.locator("#moment-title").inner_text()
            who = page.locator("#who a")
            assert who.count() >= 1
            assert page.locator(".neighbours li").count() >= 2
            screenshot(page, tmp_path, "dashboard-moment")

            # Rename the first person from the page; MCP entity_get sees the name.
            who.first.click()
            page.wait_for_url("**/entities/person_*")
            entity_id = page.url.rsplit("/", 1)[1]
            page.fill("input[name=name]", NAME)
            page.get_by_role("button", name="Rename").click()
            page.locator("#entity-name", has_text=NAME).wait_for()
            screenshot(page, tmp_path, "dashboard-entity")
            detail = mcp_call(base + "/mcp", "entity_get", {"entity_id": entity_id})
            assert detail["entity"]["name"] == NAME

            # A rule in plain words: the page shows what the compiler understood (the new name).
            page.goto(base + "/rules")
            page.fill("input[name=text]", f"tell me when {NAME} appears at night")
            page.get_by_role("button", name="Add rule").click()
            page.locator(".flash", has_text="added rule_").wait_for()
            row = page.locator("table.rules tbody tr").first
            assert NAME in row.inner_text() and "✓" in row.inner_text()
            screenshot(page, tmp_path, "dashboard-rules")
            rules = mcp_call(base + "/mcp", "rule_list", {})["rules"]
            assert [r["text"] for r in rules] == [f"tell me when {NAME} appears at night"]
            assert rules[0]["conditions"]["entities"]

            # Chat through the QA agent (a scripted model on loopback): answer with linked memories.
            page.goto(base + "/chat")
            page.fill("input[name=question]", "who is on stage?")
            page.get_by_role("button", name="Ask").click()
            answer = page.locator(".answer")
            answer.wait_for()
            assert "A person is on stage" in answer.inner_text()
            assert answer.locator("a.chip").count() >= 1
            screenshot(page, tmp_path, "dashboard-chat")

            # Merge another person into the renamed one, split a sighting back off, forget the split-off.
            page.goto(f"{base}/entities?kind=person")
            other = next(h for h in (a.get_attribute("href") for a in page.locator("ul.cards a").all())
                         if h and not h.endswith(entity_id))
            page.goto(base + other)
            page.select_option("select[name=into_id]", entity_id)
            page.get_by_role("button", name="Merge into it").click()
            page.wait_for_url(f"**/entities/{entity_id}")
            merged_away = other.rsplit("/", 1)[1]
            assert mcp_call(base + "/mcp", "entity_get", {"entity_id": merged_away})["entity"]["id"] == entity_id
            sightings = page.locator("ul.sightings input[name=observation_ids]")
            assert sightings.count() >= 2
            sightings.first.check()
            page.get_by_role("button", name="Split the ticked sightings into a new entity").click()
            page.wait_for_url(lambda url: "/entities/person_" in url and not url.endswith(entity_id))
            split_off = page.url.rsplit("/", 1)[1]
            page.once("dialog", lambda dialog: dialog.accept())
            page.get_by_role("button", name="Forget").click()
            page.wait_for_url(f"{base}/entities")
            listed = mcp_call(base + "/mcp", "entity_list", {"kind": "person", "limit": 100})["entities"]
            assert split_off not in {e["id"] for e in listed} and entity_id in {e["id"] for e in listed}

            # Notifications page loads; a cross-site style POST (no HX-Request) changes nothing.
            page.goto(base + "/notifications")
            assert page.locator("#feed").count() == 1
            refused = httpx.post(f"{base}/entities/{entity_id}/forget")
            assert refused.status_code == 403
            assert mcp_call(base + "/mcp", "entity_get", {"entity_id": entity_id})["entity"]["name"] == NAME
            page.close()


def test_read_only_dashboard_behind_a_token_shows_no_forms_and_refuses_changes(
        ingested: Path, clean_env: dict[str, str], tmp_path: Path) -> None:
    manifest = copy_store(ingested, tmp_path / "srv", server={
        "http": {"token": "${RW_DASH_TOKEN}"}, "dashboard": {"read_only": True}})
    env = {**clean_env, "RW_DASH_TOKEN": "dash-s3cret"}
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    auth = {"Authorization": "Bearer dash-s3cret"}
    with http_server(manifest, port, env, tmp_path / "serve.log"):
        assert httpx.get(base + "/").status_code == 401  # the /mcp guard covers the pages too
        assert httpx.get(base + "/entities", headers=auth).status_code == 200
        with chromium() as browser:
            page = browser.new_page(extra_http_headers=auth)
            page.goto(base + "/entities")
            page.locator("ul.cards a").first.click()
            page.wait_for_url("**/entities/person_*")
            assert page.locator("input[name=name]").count() == 0
            assert page.locator(".badge.ro").inner_text() == "read-only"
            entity_id = page.url.rsplit("/", 1)[1]
        changed = httpx.post(f"{base}/entities/{entity_id}/name", data={"name": "X"},
                             headers={**auth, "HX-Request": "true"})
        assert changed.status_code == 403 and "read-only" in changed.text
        assert httpx.post(base + "/rules", data={"text": "someone"},
                          headers={**auth, "HX-Request": "true"}).status_code == 403


def test_run_with_http_serves_the_dashboard_while_its_sources_ingest(clean_env: dict[str, str],
                                                                     tmp_path: Path) -> None:
    from tests.conftest import NO_MODELS, write_manifest
    from tests.plugin.test_transports import cli

    manifest = write_manifest(tmp_path, perception={"level": "light", **NO_MODELS})
    clip = tmp_path / "hall.mp4"
    shutil.copy(CLIP, clip)
    port = free_port()
    log = tmp_path / "run.log"
    with log.open("wb") as err:
        proc = subprocess.Popen([*cli(), "run", "--manifest", str(manifest), "--source", str(clip), "--http",
                                 f"127.0.0.1:{port}"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=err, env=clean_env)
    try:
        deadline = time.monotonic() + 90
        status = ""
        while "hall" not in status:
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, f"no capture on the dashboard: {status[-500:]}\n{log.read_text()}"
            try:
                status = httpx.get(f"http://127.0.0.1:{port}/sources/status", headers={"HX-Request": "true"}).text
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        assert "hall.mp4" in status
        assert f"dashboard at http://127.0.0.1:{port}/" in log.read_text()
    finally:
        proc.terminate()
        proc.wait(60)
