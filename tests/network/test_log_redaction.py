"""Logs never carry credentials or token parameters, at any level, from any logger."""

from __future__ import annotations

import logging

import pytest

from perception.media.redact import redact_text
from plugin import cli

SECRETS = ("hunter2", "tk-9f8e", "s1g-abc", "pw0rd")


def test_redact_text_masks_userinfo_and_secret_parameters_inside_any_sentence() -> None:
    text = ("cannot open 'rtsp://admin:hunter2@10.0.0.5:554/live' (timeout); retry http://u:pw0rd@cam/x.ts?"
            "token=tk-9f8e&res=720, then https://h/a.m3u8?X-Amz-Signature=s1g-abc.")
    out = redact_text(text)
    assert not any(s in out for s in SECRETS)
    assert "rtsp://10.0.0.5:554/live" in out and "res=720" in out and out.endswith("***.")


def test_the_cli_logging_redacts_every_record_at_every_level(capfd: pytest.CaptureFixture[str]) -> None:
    cli._setup_logging("DEBUG")
    try:
        url = "http://bob:hunter2@127.0.0.1:9/cam.ts?token=tk-9f8e"
        logging.getLogger("perception.media.fetch").debug("GET %s", url)
        logging.getLogger("tests.a_library").info("Opening '%s' for reading", url)
        logging.getLogger("plugin.worker").error("source %s failed: %s", url, "rtsp://a:pw0rd@cam/live")
        try:
            raise OSError(f"connect failed for {url}")
        except OSError:
            logging.getLogger("plugin.worker").exception("capture failed")
    finally:
        logging.basicConfig(level=logging.WARNING, force=True)
    err = capfd.readouterr().err
    assert "GET http://127.0.0.1:9/cam.ts?token=***" in err and "Opening" in err and "Traceback" in err
    assert not any(s in err for s in SECRETS)
