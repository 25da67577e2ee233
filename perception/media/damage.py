"""How much of a file was readable: skipped packets and whether it broke off before its end."""

from __future__ import annotations

from typing import Any

__all__ = ["read_damage", "readable_end"]

#: a file whose last frame is this far before its stated end counts as partial (seconds)
END_TOLERANCE_S = 1.0


def read_damage(gateway: Any, audio: Any, end_t: float) -> dict[str, Any]:
    """``bad_packets``, ``partial`` and ``readable_s`` of one file ingest.

    ``gateway`` is the file's :class:`~perception.media.gateway.Gateway` (after it ended), ``audio`` its
    :class:`~perception.media.audio.AudioScan` (anything with ``bad_packets``) or ``None``, ``end_t`` the container's stated end time.
    A file is partial when reading broke off with an error, or when its last decoded frame lies
    well before the duration its header states (a truncated MP4 or Matroska file).
    """
    stats = gateway.stats
    bad = int(stats.bad_packets) + (int(audio.bad_packets) if audio is not None else 0)
    last = stats.last_frame_t
    partial = _partial(gateway, end_t)
    return {"bad_packets": bad, "partial": partial, "readable_s": float(last) if partial and last is not None else None}


def readable_end(gateway: Any, end_t: float) -> float | None:
    """Where a file's last segment ends: its stated end, or ``None`` (its last frame) when it broke off."""
    return None if _partial(gateway, end_t) else end_t


def _partial(gateway: Any, end_t: float) -> bool:
    stats = gateway.stats
    last = stats.last_frame_t
    # sampled frames sit on a grid, so the last one may lie up to two grid steps before the end
    tolerance = max(END_TOLERANCE_S, 2.0 / float(getattr(gateway, "sample_fps", 1.0) or 1.0))
    short = stats.state == "done" and last is not None and end_t > 0 and last < end_t - tolerance
    return bool(stats.truncated) or short
