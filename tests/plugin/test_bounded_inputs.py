"""Bounded everything: manifest size/aliases/depth, literal secrets, image pixels, numeric tool arguments, CLI paths."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from mcp import Client
from mcp.types import TextContent

from plugin.cli import main
from plugin.errors import ManifestError
from plugin.manifest import load_manifest, parse_manifest
from plugin.server import create_server
from tests.conftest import write_manifest

LEAKS = ("Traceback", ".rs:", "lance", "datafusion", "arrow", "/src/", "filter")


def _png_header(width: int, height: int) -> bytes:
    """A PNG whose header claims ``width``×``height`` (the pixel data is a few bytes)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")


@pytest.mark.timeout(30)
def test_a_yaml_alias_bomb_is_refused_at_once(tmp_path: Path) -> None:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, 12):
        lines.append(f"a{i}: &a{i} [{', '.join(['*a' + str(i - 1)] * 9)}]")
    lines.append("rules: [{text: *a11}]")
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("\n".join(lines))
    with pytest.raises(ManifestError, match="expands to more than"):
        load_manifest(bomb)


def test_oversized_and_overly_deep_manifests_are_refused(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_text("user_id: x\n" + "# padding\n" * 200_000)
    with pytest.raises(ManifestError, match="larger than"):
        load_manifest(big)
    deep = tmp_path / "deep.yaml"
    deep.write_text("a: " + "[" * 100 + "]" * 100)
    with pytest.raises(ManifestError, match="nested more than"):
        load_manifest(deep)
    for name, text in (("deeper.yaml", "a: " + "[" * 5000 + "]" * 5000), ("deep.toml", "a = " + "[" * 900 + "]" * 900),
                       ("flow.yaml", "a: " + "{b: " * 3000 + "1" + "}" * 3000)):
        (tmp_path / name).write_text(text)
        with pytest.raises(ManifestError, match="nested more than") as info:
            load_manifest(tmp_path / name)
        assert "Traceback" not in str(info.value)
    latin = tmp_path / "latin.yaml"
    latin.write_bytes("user_id: caf\xe9\n".encode("latin-1"))
    with pytest.raises(ManifestError, match="not UTF-8") as info:
        load_manifest(latin)


def test_literal_secrets_are_rejected_with_the_env_form_as_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ManifestError) as info:
        parse_manifest({"vlm": {"base_url": "http://h/v1", "model": "m", "api_key": "sk-live-123"},
                        "server": {"http": {"token": "hunter2"}}})
    text = str(info.value)
    assert "vlm.api_key: a secret is written into the manifest" in text and "${VLM_API_KEY}" in text
    assert "server.http.token" in text and "sk-live-123" not in text and "hunter2" not in text
    with pytest.raises(ManifestError) as info:
        parse_manifest({"vlm": {"base_url": "http://h/v1", "model": "m", "api_key": "${RW_KEY:sk-default-9}"},
                        "sources": [{"uri": "rtsp://admin:pw-in-url@cam.lan/live"},
                                    {"uri": "https://cam.lan/live.m3u8?access_token=tk-in-url"}],
                        "notifications": {"channels": {"mqtt": {"host": "h", "username": "u", "password": "mq-pw"}}}})
    text = str(info.value)
    assert text.count("written into the manifest") == 4 and "notifications.channels.mqtt.password" in text
    assert not any(s in text for s in ("sk-default-9", "pw-in-url", "tk-in-url", "mq-pw"))
    monkeypatch.setenv("RW_KEY", "sk-live-123")
    monkeypatch.setenv("RW_CAM_PW", "pw")
    parse_manifest({"sources": [{"uri": "rtsp://admin:${RW_CAM_PW}@cam.lan/live"}, {"uri": "rtsp://admin@cam.lan/"}]})
    ok = parse_manifest({"vlm": {"base_url": "http://h/v1", "model": "m", "api_key": "${RW_KEY}"},
                         "server": {"http": {"token": "${RW_TOKEN:}"}}})
    assert ok.vlm is not None and ok.vlm.api_key.get_secret_value() == "sk-live-123"


async def _tools(tmp_path: Path) -> list[Any]:
    async with Client(create_server(load_manifest(write_manifest(tmp_path)))) as client:
        return list((await client.list_tools()).tools)


def _numbers(schema: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    found = []
    if isinstance(schema, dict):
        if schema.get("type") in ("integer", "number"):
            found.append((path, schema))
        for key, value in schema.items():
            found += _numbers(value, f"{path}/{key}")
    elif isinstance(schema, list):
        for i, value in enumerate(schema):
            found += _numbers(value, f"{path}[{i}]")
    return found


@pytest.mark.anyio
async def test_every_numeric_tool_argument_is_bounded_in_its_schema(tmp_path: Path) -> None:
    unbounded = []
    for tool in await _tools(tmp_path):
        for path, schema in _numbers(tool.input_schema):
            low = "minimum" in schema or "exclusiveMinimum" in schema
            high = "maximum" in schema or "exclusiveMaximum" in schema
            if not (low and high):
                unbounded.append(f"{tool.name}{path}")
    assert unbounded == []


@pytest.mark.anyio
async def test_a_huge_notify_cursor_and_a_giant_image_get_plain_errors(tmp_path: Path) -> None:
    (tmp_path / "giant.png").write_bytes(_png_header(8000, 6000))
    manifest = write_manifest(tmp_path, access={"roots": [str(tmp_path)]})
    with anyio.fail_after(60):
        async with Client(create_server(load_manifest(manifest))) as client:
            poll = await client.call_tool("notify_poll", {"since": 2**63 - 1, "wait_s": 0})
            giant = await client.call_tool("entity_update", {"action": "name", "name": "Big",
                                                             "image_path": str(tmp_path / "giant.png")})
    poll_text = " ".join(b.text for b in poll.content if isinstance(b, TextContent))
    giant_text = " ".join(b.text for b in giant.content if isinstance(b, TextContent))
    assert poll.is_error and "less than or equal to" in poll_text
    assert giant.is_error and "8000×6000" in giant_text and "megapixels" in giant_text
    for leak in LEAKS:
        assert leak not in poll_text and leak not in giant_text


def test_an_image_folder_skips_an_image_over_the_pixel_cap(tmp_path: Path) -> None:
    import threading

    import cv2
    import numpy as np

    from perception.media.sources import make_source

    folder = tmp_path / "shots"
    folder.mkdir()
    cv2.imwrite(str(folder / "a.png"), np.zeros((30, 40, 3), np.uint8))
    (folder / "b.png").write_bytes(_png_header(9000, 9000))
    (folder / "c.png").write_bytes(_png_header(20000, 20000))  # past Pillow's own bomb limit too
    items = list(make_source(str(folder)).open_stream(threading.Event()))
    assert len(items) == 1 and items[0].to_bgr().shape == (30, 40, 3)


def test_cli_keeps_urls_intact_refuses_missing_stores_and_long_paths(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    manifest = write_manifest(tmp_path)
    missing = tmp_path / "typo-store"
    assert main(["search", "person", "--manifest", str(manifest), "--store", str(missing)]) == 1
    assert "no memory store at" in capsys.readouterr().err and not missing.exists()
    assert main(["ingest", "--manifest", str(manifest), "rtsp://bob:pw@cam.lan:554/live"]) == 1
    err = capsys.readouterr().err
    assert "rtsp://cam.lan:554/live" in err and "rtsp:/cam" not in err and "pw" not in err
    assert main(["ingest", "--manifest", str(manifest), "/tmp/" + "a" * 5000]) == 1
    assert "too long" in capsys.readouterr().err
    data = yaml.safe_load(manifest.read_text())
    assert not Path(data["memory"]["uri"]).exists()  # nothing was created by the refused commands
