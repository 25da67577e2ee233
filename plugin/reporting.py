"""One-line wording of ingest outcomes for the CLI."""

from __future__ import annotations

from typing import Any

__all__ = ["ingest_status"]


def ingest_status(report: Any) -> str:
    """``complete`` or ``partial — …`` for a finished :class:`perception.drivers.ingest.IngestReport`, with skipped packets."""
    damaged = f", {report.bad_packets} undecodable packet(s) skipped" if report.bad_packets else ""
    if report.partial:
        upto = f" up to {report.readable_s:.1f} s" if report.readable_s is not None else ""
        return f"partial — readable{upto}; the file is truncated or damaged{damaged}"
    return f"complete{damaged}"
