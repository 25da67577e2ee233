"""Third-party models keep the terminal quiet: no line on stderr for routine work."""

from __future__ import annotations

import numpy as np
import pytest

from perception.detectors.ocr import RapidTextReader


def test_ocr_on_a_frame_without_text_writes_nothing_to_stderr(capfd: pytest.CaptureFixture[str]) -> None:
    reader = RapidTextReader()
    if not reader.available:
        pytest.skip("rapidocr is not installed (extra `ocr`)")
    capfd.readouterr()
    frame = (np.random.default_rng(0).random((240, 320, 3)) * 60).astype(np.uint8)  # dark noise: no text
    assert reader.read(frame) == []
    assert reader.read(np.full((240, 320, 3), 128, np.uint8)) == []
    # rapidocr logs "The text detection result is empty" as a coloured WARNING on its own handler otherwise
    assert capfd.readouterr().err == ""
