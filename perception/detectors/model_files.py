"""Model files and ONNX Runtime options shared by every detector: paths, sha256 checks, threads.

Every model file is checked by sha256 before it is used. Every ONNX Runtime session is built from
:func:`ort_options`: :func:`ort_threads` intra-op threads (the manifest's ``perception.model_threads``,
set once per process by :func:`set_model_threads`; 1 by default), one inter-op thread and no
spin-waiting, so idle pool threads do not burn CPU between the many small calls of a stream. A
second thread per call finishes one call sooner but costs CPU for its synchronisation (15 % more
CPU per media second at the full level on two busy cores), and a box that runs several cameras
has no idle core to give it. Sessions are cached per process and shared by every source. A file that is missing (an optional
extra not installed) or altered disables its capability with one clear log line, instead of
failing ingestion.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

__all__ = ["MODELS_DIR", "file_sha256", "ort_options", "ort_threads", "package_file", "set_model_threads", "verified"]

logger = logging.getLogger(__name__)

MODELS_DIR = Path(__file__).resolve().parents[1] / "models"


_threads = 1


def set_model_threads(threads: int) -> None:
    """Threads of one model call in this process (ONNX Runtime, OpenCV, Whisper); before models load.

    Sessions are cached per process, so a session built earlier keeps the count it was built with.
    """
    global _threads
    _threads = max(1, min(4, threads, _usable_cpus()))
    import cv2

    cv2.setNumThreads(_threads)


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def ort_threads() -> int:
    """Intra-op threads for one model call (:func:`set_model_threads`; 1 unless set)."""
    return _threads


def ort_options(threads: int | None = None) -> Any:
    """ONNX Runtime session options: ``threads`` (default :func:`ort_threads`) intra-op, no spinning."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads or ort_threads()
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.log_severity_level = 3
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    opts.add_session_config_entry("session.inter_op.allow_spinning", "0")
    return opts


@lru_cache(maxsize=64)
def _digest(path: str, size: int, mtime: float) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def file_sha256(path: Path) -> str:
    """The sha256 of a file (cached per path, size and mtime)."""
    st = path.stat()
    return _digest(str(path), st.st_size, st.st_mtime)


def package_file(package: str, *parts: str) -> Path | None:
    """The path of a file inside an installed package, found without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))).joinpath(*parts)
    return path if path.is_file() else None


def verified(path: Path | None, sha256: str | None, capability: str, hint: str) -> Path | None:
    """Return ``path`` when it exists and matches ``sha256``; otherwise log one line and return None.

    Args:
        path: the model file (``None`` when its package is not installed).
        sha256: the pinned digest; ``None`` trusts a user-supplied file as is.
        capability: what is disabled when the file is unusable (for the log line).
        hint: how to fix it, e.g. ``pip install 'reflectworld-mm[asr]'``.
    """
    if path is None or not path.is_file():
        logger.warning("%s disabled: model file %s not found; %s", capability, path or "(package missing)", hint)
        return None
    if sha256 is not None:
        digest = file_sha256(path)
        if digest != sha256:
            logger.error("%s disabled: %s has sha256 %s, expected %s; %s", capability, path, digest, sha256, hint)
            return None
    return path
