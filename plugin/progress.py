"""Progress of long commands (``ingest``, ``run``, ``eval``) on stderr, never on stdout.

On a terminal one line is redrawn in place (a bar, counts, speed); into a pipe or a log file each
update is one plain line (``ingest`` writes one per committed segment; ``run`` at most one per
source every few seconds, plus every change of state), so logs stay readable and a caller can
follow them line by line. Log records are not involved: progress shows whatever the log level.
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO

__all__ = ["Progress", "bar", "capture_line", "eval_progress", "ingest_progress", "watch_captures"]


def bar(fraction: float, width: int = 24) -> str:
    """``[#########---------------]`` for ``fraction`` in [0, 1]."""
    filled = int(round(max(0.0, min(1.0, fraction)) * width))
    return "[" + "#" * filled + "-" * (width - filled) + "]"


class Progress:
    """One progress line on ``stream`` (stderr by default).

    Args:
        tty_only: show nothing unless the stream is a terminal (``demo``, whose output is the point).
        interval_s: on a pipe, the least time between two lines of the same key (0 = every update).
    """

    def __init__(self, stream: TextIO | None = None, *, tty_only: bool = False, interval_s: float = 0.0) -> None:
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.enabled = self.tty or not tty_only
        self.interval_s = interval_s
        self._last: dict[str, tuple[float, str]] = {}
        self._drawn = False
        self._lock = threading.Lock()

    def show(self, text: str, key: str = "", *, force: bool = False) -> None:
        """Redraw the line (terminal) or write ``text`` as a line (pipe; throttled per ``key``)."""
        if not self.enabled:
            return
        with self._lock:
            if self.tty:
                width = shutil.get_terminal_size((100, 20)).columns
                self.stream.write("\r\x1b[2K" + text[: max(10, width - 1)])
                self._drawn = True
            else:
                now = time.monotonic()
                last_t, last_text = self._last.get(key, (float("-inf"), ""))
                if not force and (text == last_text or now - last_t < self.interval_s):
                    return
                self._last[key] = (now, text)
                self.stream.write(text + "\n")
            self.stream.flush()

    def finish(self) -> None:
        """End the redrawn line so that what follows starts on a line of its own."""
        with self._lock:
            if self.tty and self._drawn:
                self.stream.write("\n")
                self.stream.flush()
                self._drawn = False


def ingest_progress(name: str, progress: Progress) -> Callable[[float, float, int], None]:
    """The ``progress`` callback of ``ingest_file``: media seconds done, bar, segments, speed."""
    started = time.monotonic()

    def report(done_s: float, total_s: float, segments: int) -> None:
        pct = 100.0 * done_s / total_s if total_s else 0.0
        rate = done_s / max(time.monotonic() - started, 1e-6)
        shown = f"ingest {name}: {done_s:.1f}/{total_s:.1f} s ({pct:.0f}%), {segments} segment(s), {rate:.1f}x real time"
        if progress.tty:
            shown = f"ingest {name} {bar(pct / 100, 20)} " + shown.split(": ", 1)[1]
        progress.show(shown, name, force=done_s >= total_s)

    return report


def eval_progress(name: str, unit: str, progress: Progress | None = None) -> Callable[[int, int], None]:
    """A ``progress(done, total)`` callback for an evaluation loop (``eval reid``, ``asr``, ``qa``)."""
    shown = progress or Progress()

    def report(done: int, total: int) -> None:
        fraction = done / total if total else 1.0
        shown.show(f"eval {name} {bar(fraction, 20)} {done}/{total} {unit}" if shown.tty
                   else f"eval {name}: {done}/{total} {unit}", name)
        if done >= total:
            shown.finish()

    return report


def capture_line(info: Any) -> str:
    """One capture of ``worker.status()`` in a few words: state, segments, speed or position."""
    stats = info.stats or {}
    parts = [f"{info.camera_id}: {info.state}", f"{info.segments_written} segment(s)"]
    if info.live:
        parts.append(f"{float(stats.get('fps_in', 0) or 0):.1f} fps, {stats.get('dropped', 0)} dropped, "
                     f"{stats.get('reconnects', 0)} reconnects")
    elif "progress_s" in stats:
        parts.append(f"{float(stats['progress_s']):.1f} s in")
    if info.error:
        parts.append(str(info.error)[:80])
    return ", ".join(parts)


def watch_captures(status: Callable[[], Sequence[Any]], idle: Callable[[], bool], stop: threading.Event,
                   progress: Progress, poll_s: float = 1.0) -> bool:
    """Show every capture's progress until all have ended (True) or ``stop`` is set (False).

    On a terminal all sources share one redrawn line; on a pipe each source gets a line when its
    state changes and otherwise at most every ``progress.interval_s``.
    """
    try:
        while not stop.wait(poll_s):
            infos = list(status())
            if progress.tty:
                progress.show(" | ".join(capture_line(i) for i in infos))
            else:
                for info in infos:
                    progress.show(capture_line(info), info.camera_id, force=_state_changed(progress, info))
            if idle():
                return True
        return False
    finally:
        progress.finish()


def _state_changed(progress: Progress, info: Any) -> bool:
    last = progress._last.get(info.camera_id)
    return last is None or not last[1].startswith(f"{info.camera_id}: {info.state},")
