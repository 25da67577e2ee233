"""Native heap policy for long captures: fewer malloc arenas, freed pages handed back.

A capture process runs a dozen native threads (the decoder's, LanceDB's tokio workers, ONNX
Runtime's pools). glibc gives every thread that meets a locked arena a new one, up to eight per
core, and memory freed in an arena stays mapped to it; over hours the resident size kept rising
although nothing was held (Python's own heap stayed flat). :func:`limit_arenas` caps the arenas
(the effect of ``MALLOC_ARENA_MAX``, set from inside the process before its threads start) and fixes
the size from which an allocation gets its own mapping (glibc raises that threshold each time such
a block is freed, after which LanceDB's per-commit buffers of a few hundred KB stayed in the
arenas, fragmenting them); :func:`trim` asks glibc to return free pages to the system, and
:func:`trim_due` does so at most every :data:`TRIM_EVERY_S` seconds (the drivers call it after each
segment). All are no-ops without glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import threading
import time
from functools import lru_cache
from typing import Any

__all__ = ["ARENAS", "MMAP_THRESHOLD", "TRIM_EVERY_S", "limit_arenas", "trim", "trim_due"]

logger = logging.getLogger(__name__)

#: malloc arenas a process may use (glibc's default is 8 per core)
ARENAS = 2
#: allocations from this size get a mapping of their own, returned to the system when freed
MMAP_THRESHOLD = 128 * 1024
_M_ARENA_MAX, _M_MMAP_THRESHOLD = -8, -3  # mallopt parameters (malloc.h)
#: seconds between two trims at most: a trim costs 1-3 ms, and the pages freed since the last one
#: stay resident until it runs (up to ~12 MB on a light stream).
TRIM_EVERY_S = 10.0
_last_trim = [0.0]
_trim_lock = threading.Lock()


@lru_cache(maxsize=1)
def _libc() -> Any:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.mallopt, libc.malloc_trim  # noqa: B018 (glibc only: musl and others lack them)
    except (OSError, AttributeError):
        return None
    return libc


@lru_cache(maxsize=1)
def limit_arenas(arenas: int = ARENAS) -> bool:
    """Cap the process's malloc arenas and fix its mmap threshold (once per process); False where
    that is not possible.

    Takes effect for arenas created afterwards, so call it before the pipeline's threads start.
    """
    libc = _libc()
    ok = bool(libc is not None and libc.mallopt(_M_ARENA_MAX, arenas) == 1
              and libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1)
    logger.debug("malloc arenas %s", f"capped at {arenas}" if ok else "left as they are (no glibc)")
    return ok


def trim() -> bool:
    """Return freed heap pages to the system; True when some were released."""
    libc = _libc()
    return bool(libc is not None and libc.malloc_trim(0))


def trim_due() -> bool:
    """:func:`trim` when the last one (from any thread) is :data:`TRIM_EVERY_S` old; True when it ran."""
    now = time.monotonic()
    with _trim_lock:
        if now - _last_trim[0] < TRIM_EVERY_S:
            return False
        _last_trim[0] = now
    trim()
    return True
