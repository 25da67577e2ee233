"""One guard for every HTTP route: Host, Origin, token (or phone pairing cookie), streamed size limit."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx2
import pytest
import yaml

from plugin.guard import DASHBOARD, Pairing
from plugin.http import build_http_app
from plugin.manifest import load_manifest
from plugin.server import create_server
from tests.conftest import write_manifest
from tests.plugin.test_transports import free_port, http_server

pytestmark = pytest.mark.anyio

LIMIT = 64 * 1024


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _client(tmp_path: Path, token: str | None, host: str = "127.0.0.1") -> httpx2.AsyncClient:
    server = create_server(load_manifest(write_manifest(tmp_path)))
    app = build_http_app(server, host, token, max_body_bytes=LIMIT)
    return httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://127.0.0.1:8765")


async def test_cross_origin_posts_are_refused_on_every_route(tmp_path: Path) -> None:
    async with _client(tmp_path, None) as client:
        evil = {"Origin": "https://evil.example"}
        chunk = await client.post("/phone/chunk?camera=cam&session=s", content=b"x" * 10, headers=evil)
        mcp = await client.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, headers=evil)
        page = await client.get("/phone", headers={"Sec-Fetch-Site": "cross-site"})
        null = await client.post("/phone/chunk", content=b"x", headers={"Origin": "null"})
        same = await client.get("/phone", headers={"Origin": "http://127.0.0.1:8765"})
    assert chunk.status_code == mcp.status_code == page.status_code == null.status_code == 403
    assert same.status_code == 200


async def test_a_foreign_host_header_is_refused_on_a_loopback_bind(tmp_path: Path) -> None:
    async with _client(tmp_path, None) as client:
        rebound = await client.get("/phone", headers={"Host": "attacker.example:8765"})
        ipv6 = await client.get("/phone", headers={"Host": "[::1]:8765"})
    assert rebound.status_code == 421 and ipv6.status_code == 200


async def test_an_oversized_body_is_refused_without_being_read(tmp_path: Path) -> None:
    produced = 0

    async def endless() -> AsyncIterator[bytes]:
        nonlocal produced
        for _ in range(10_000):  # 160 MB if it were all read
            produced += 16 * 1024
            yield b"\0" * (16 * 1024)

    with anyio.fail_after(30):
        async with _client(tmp_path, None) as client:
            declared = await client.post("/phone/chunk", content=b"x" * (LIMIT + 1))
            streamed = await client.post("/mcp", content=endless(), headers={"Content-Type": "application/json"})
    assert declared.status_code == streamed.status_code == 413
    assert "at most" in streamed.json()["error"]
    assert produced <= LIMIT + 2 * 16 * 1024  # stopped reading right after the limit


async def test_the_bearer_scheme_is_case_insensitive_and_the_token_is_required(tmp_path: Path) -> None:
    async with _client(tmp_path, "tok-123") as client:
        none = await client.get("/phone")
        wrong = await client.get("/phone", headers={"Authorization": "Bearer nope"})
        lower = await client.get("/phone", headers={"Authorization": "bearer tok-123"})
        upper = await client.get("/phone", headers={"Authorization": "BEARER tok-123"})
    assert none.status_code == wrong.status_code == 401 and "pairing link" in none.json()["error"]
    assert lower.status_code == upper.status_code == 200


async def test_a_one_time_pairing_link_lets_the_phone_page_in_and_nothing_else(tmp_path: Path) -> None:
    async with _client(tmp_path, "tok-123") as client:
        refused = await client.post("/phone/pair")
        link = (await client.post("/phone/pair", headers={"Authorization": "Bearer tok-123"})).json()
        assert refused.status_code == 401 and "/phone?pair=" in link["url"]
        path = link["url"].split("8765", 1)[1]
        paired = await client.get(path)
        assert paired.status_code == 303 and paired.headers["location"] == "/phone"
        cookie = paired.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/phone" in cookie
        page = await client.get("/phone")
        client.cookies.clear()
        again = await client.get(path)
        after = await client.get("/phone")
        session = cookie.split(";", 1)[0].split("=", 1)[1]
        mcp = await client.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                                headers={"Cookie": f"rw_phone={session}"})
        chunk = await client.post("/phone/chunk?camera=cam&session=s", content=b"x",
                                  headers={"Cookie": f"rw_phone={session}"})
    assert page.status_code == 200 and "ReflectWorld camera" in page.text
    assert again.status_code == 401 and "already used" in again.text  # one-time
    assert after.status_code == 401
    assert mcp.status_code == 401  # the cookie only opens the phone routes
    assert chunk.status_code == 503  # past the guard (no worker runs in this in-process app)


async def test_the_phone_camera_streams_through_a_token_protected_server(tmp_path: Path,
                                                                         clean_env: dict[str, str]) -> None:
    manifest = write_manifest(tmp_path, server={"http": {"token": "${RW_TEST_TOKEN}"}})
    env = {**clean_env, "RW_TEST_TOKEN": "s3cret-token"}
    port = free_port()
    log = tmp_path / "http.log"
    data = yaml.safe_load(manifest.read_text())
    data["log_level"] = "INFO"
    manifest.write_text(yaml.safe_dump(data))
    with http_server(manifest, port, env, log) as proc, anyio.fail_after(90):
        deadline = time.monotonic() + 10
        while "phone?pair=" not in log.read_text() and time.monotonic() < deadline:
            await anyio.sleep(0.1)
        logged = log.read_text()
        code = logged.split("phone?pair=", 1)[1].split()[0]
        async with httpx2.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30,
                                      follow_redirects=True) as phone:
            assert (await phone.get(f"/phone?pair={code}")).status_code == 200  # redirected to the page
            sent = await phone.post("/phone/chunk?camera=cam1&session=a", content=b"\x1a\x45\xdf\xa3" + b"\0" * 100)
            rss_before = _rss_mb(proc.pid)
            produced = 0

            async def chunked() -> AsyncIterator[bytes]:
                nonlocal produced
                for _ in range(4096):  # 256 MB if it were all read
                    produced += 65536
                    yield b"\0" * 65536

            try:
                cut = (await phone.post("/phone/chunk?camera=cam1&session=a", content=chunked())).status_code
            except httpx2.TransportError:
                cut = 413  # the server may close the connection while the client is still sending
            assert cut == 413 and produced < 64 * 1024 * 1024
            assert _rss_mb(proc.pid) - rss_before < 64
    assert sent.status_code == 202 and sent.json()["camera"] == "cam1"
    assert "s3cret-token" not in log.read_text()


async def test_a_dashboard_pairing_link_opens_the_dashboard_but_never_mcp(tmp_path: Path) -> None:
    server = create_server(load_manifest(write_manifest(tmp_path)))
    pairing = Pairing()
    app = build_http_app(server, "127.0.0.1", "tok-123", max_body_bytes=LIMIT, pairing=pairing)
    async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://127.0.0.1:8765") as client:
        locked = await client.get("/")
        paired = await client.get(f"/?pair={pairing.issue(DASHBOARD)}")
        cookie = paired.headers["set-cookie"]
        session = cookie.split(";", 1)[0].split("=", 1)[1]
        mcp = await client.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                                headers={"Cookie": f"rw_dashboard={session}"})
        phone = await client.get("/phone", headers={"Cookie": f"rw_dashboard={session}"})
        page = await client.get("/", headers={"Cookie": f"rw_dashboard={session}"})
    assert locked.status_code == 401 and page.status_code != 401
    assert paired.status_code == 303 and paired.headers["location"] == "/" and "rw_dashboard=" in cookie
    assert "HttpOnly" in cookie and "Path=/" in cookie
    assert mcp.status_code == 401 and phone.status_code == 403  # the dashboard cookie opens only the dashboard


async def test_a_phone_session_gets_403_on_every_dashboard_route_and_its_code_does_not_open_the_dashboard(
        tmp_path: Path) -> None:
    server = create_server(load_manifest(write_manifest(tmp_path)))
    pairing = Pairing()
    app = build_http_app(server, "127.0.0.1", "tok-123", max_body_bytes=LIMIT, pairing=pairing)
    routes = [(r.path, sorted(r.methods or [])) for r in app.app.routes if hasattr(r, "methods")]  # type: ignore[attr-defined]
    dashboard = [(path.replace("{", "").replace("}", "").replace(".jpg", "x.jpg"), method) for path, methods in routes
                 for method in methods if method in ("GET", "POST") and not path.startswith(("/phone", "/mcp"))]
    assert len(dashboard) >= 15 and ("/sources/start", "POST") in dashboard and ("/rules", "POST") in dashboard
    async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://127.0.0.1:8765") as client:
        phone_code = pairing.issue()
        wrong_page = await client.get(f"/?pair={phone_code}")  # a phone link's code redeemed on the dashboard
        paired = await client.get(f"/phone?pair={phone_code}")
        session = paired.headers["set-cookie"].split(";", 1)[0].split("=", 1)[1]
        client.cookies.clear()
        answers = {}
        for path, method in dashboard:
            for name in ("rw_phone", "rw_dashboard"):
                reply = await client.request(method, path, headers={"Cookie": f"{name}={session}", "HX-Request": "true"},
                                             data={"source": "/etc/hostname", "text": "x"} if method == "POST" else None)
                answers[(path, method, name)] = reply.status_code
        phone = await client.get("/phone", headers={"Cookie": f"rw_phone={session}"})
    assert wrong_page.status_code == 401 and paired.status_code == 303
    assert set(answers.values()) == {403}, answers
    assert phone.status_code == 200
