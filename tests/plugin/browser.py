"""Test helpers: Debian's chromium under Playwright, a copy of the ingested store, screenshots as artefacts.

Chromium comes from the system (``apt-get install chromium``, done by ``.ci/run``); Playwright never
downloads a browser. Without it the browser tests skip with the reason, except under ``CI=true``,
where a missing browser fails them.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

CHROMIUM = Path(os.environ.get("REFLECTWORLD_CHROMIUM", "/usr/bin/chromium"))
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"


def require(binary: Path, what: str, install: str) -> None:
    """Skip (or, under CI, fail) when ``binary`` is missing."""
    if binary.exists():
        return
    message = f"{what} not found at {binary}; install it with `{install}`"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Debian chromium driven by Playwright."""
    require(CHROMIUM, "chromium", "apt-get install chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                     args=["--no-sandbox", "--disable-dev-shm-usage"])
        try:
            yield browser
        finally:
            browser.close()


def copy_store(ingested: Path, directory: Path, **extra: object) -> Path:
    """A writable copy of the ingested store with its manifest (plus ``extra`` top-level keys)."""
    data = yaml.safe_load(ingested.read_text())
    source = Path(data["memory"]["uri"])
    target = directory / "lancedb"
    shutil.copytree(source, target, ignore=shutil.ignore_patterns(".capture-owner"))
    data["memory"]["uri"] = str(target)
    data.update(extra)
    path = directory / "manifest.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def screenshot(page: Any, directory: Path, name: str) -> Path:
    """Save a full-page screenshot under ``directory`` and copy it to ``tests/artifacts/``."""
    path = directory / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    ARTIFACTS.mkdir(exist_ok=True)
    shutil.copy(path, ARTIFACTS / path.name)
    return path
