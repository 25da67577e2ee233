"""A generated week of observation records (no video): visits of entities to cameras at set hours."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from memory import Entity, MemoryStore, Observation, SegmentWrite, Trace, stable_id
from memory.semantic.consolidate import ConsolidationEngine, ConsolidationReport

#: Monday 2024-01-01 00:00 UTC
DAY0 = 1_704_067_200.0


@dataclass
class Stream:
    """Builds segments with per-source indices; media time is seconds since DAY0."""

    segments: list[SegmentWrite] = field(default_factory=list)
    _index: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def visit(self, entities: list[str], camera: str, day: int, hour: float, n: int = 3, objects: tuple[str, ...] = (),
              transcript: str = "", ocr: str = "", what: str = "sits at a table") -> list[SegmentWrite]:
        """``n`` consecutive 10-minute segments of ``entities`` at ``camera`` on ``day`` from ``hour``."""
        source = f"rtsp://{camera}"
        out = []
        for k in range(n):
            idx = self._index[source]
            self._index[source] += 1
            wall = DAY0 + day * 86_400 + hour * 3600 + k * 600
            t0 = wall - DAY0
            obs = [Observation(id=stable_id("obs_", source, idx, e), entity_id=e, camera_id=camera, source=source,
                               segment_index=idx, t_start=t0, t_end=t0 + 600, wall_start=wall,
                               text=f"{e} {what} at {camera}") for e in entities]
            trace = Trace(id=stable_id("trc_", source, idx), camera_id=camera, source=source, segment_index=idx,
                          t_start=t0, t_end=t0 + 600, wall_start=wall,
                          summary=f"{' and '.join(entities) or 'nobody'} {what} at {camera}",
                          entity_ids=list(entities), objects=list(objects), transcript=transcript, ocr_text=ocr)
            ents = [Entity(id=e, kind="person" if e.startswith("person_") else "object", cameras=[camera],
                           first_seen=DAY0, last_seen=wall) for e in entities]
            seg = SegmentWrite(source=source, camera_id=camera, segment_index=idx, trace=trace, observations=obs,
                               entities=ents)
            out.append(seg)
        self.segments += out
        return out


def run(store: MemoryStore, engine: ConsolidationEngine, segments: list[SegmentWrite],
        places: dict[str, str] | None = None) -> list[ConsolidationReport]:
    """Commit each segment, count it, and consolidate every entity that became due (as the runner does)."""
    reports = []
    for seg in segments:
        store.write_segment(seg)
        for entity_id in engine.note_segment(seg):
            reports.append(engine.consolidate(entity_id, current=seg, places=places, now=seg.trace.wall_start))
    return reports


def week(stream: Stream, entity: str = "person_0001", days: range = range(7)) -> None:
    """Mornings (08:00) at the cafe camera with a coffee cup, evenings (18:00) at the gym camera."""
    for day in days:
        stream.visit([entity], "cam_cafe", day, 8.0, objects=("Coffee cup",), what="drinks coffee")
        stream.visit([entity], "cam_gym", day, 18.0, objects=("Stationary bicycle",), what="works out")
