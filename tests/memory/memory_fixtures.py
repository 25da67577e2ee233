"""Synthetic segments and entities shared by the memory tests."""

from __future__ import annotations

from memory import Entity, Keyframe, MemoryStore, Observation, SegmentWrite, Trace, stable_id

SOURCE = "/videos/kitchen.mp4"
CAMERA = "kitchen"

#: one summary per segment of the synthetic source; entities appear where named.
SUMMARIES = [
    "a woman walks into the kitchen and switches on the kettle",
    "the woman pours boiling water into a red mug",
    "a man carries a bicycle through the hallway",
    "the dog sleeps on the sofa near the window",
    "the man leaves the bicycle by the front door and waves",
    "two people drink tea at the kitchen table",
]


def make_segment(index: int, *, source: str = SOURCE, camera: str = CAMERA, user: str = "default",
                 summary: str | None = None, entity_ids: list[str] | None = None,
                 obs_texts: dict[str, str] | None = None) -> SegmentWrite:
    """Build a deterministic segment of 10 s with its trace, observations and one key frame."""
    t0 = index * 10.0
    trace_id = stable_id("trc_", user, source, index)
    kf_id = stable_id("kf_", user, source, index, 0)
    entity_ids = entity_ids if entity_ids is not None else []
    obs_texts = obs_texts or {}
    observations = [
        Observation(id=stable_id("obs_", user, source, index, eid), entity_id=eid, camera_id=camera, source=source,
                    segment_index=index, t_start=t0, t_end=t0 + 10, wall_start=1_700_000_000 + t0,
                    text=obs_texts.get(eid, f"{eid} seen in segment {index}"), keyframe_ids=[kf_id], confidence=0.9)
        for eid in entity_ids
    ]
    trace = Trace(id=trace_id, camera_id=camera, source=source, segment_index=index, t_start=t0, t_end=t0 + 10,
                  wall_start=1_700_000_000 + t0, summary=summary or SUMMARIES[index % len(SUMMARIES)],
                  entity_ids=entity_ids, keyframe_ids=[kf_id])
    keyframe = Keyframe(id=kf_id, camera_id=camera, source=source, segment_index=index, t=t0 + 5,
                        wall_time=1_700_000_005 + t0, quality=0.5, width=4, height=3, entity_ids=entity_ids,
                        jpeg=b"\xff\xd8fake-jpeg-" + str(index).encode())
    return SegmentWrite(source=source, camera_id=camera, segment_index=index, trace=trace,
                        observations=observations, keyframes=[keyframe], source_size=1234, source_mtime=1.5)


PERSONS = {
    "person_0001": Entity(id="person_0001", kind="person", name="Alice", description="woman with a red scarf",
                          sightings=3, cameras=[CAMERA]),
    "person_0002": Entity(id="person_0002", kind="person", name="Bob", description="man with a bicycle helmet",
                          sightings=2, cameras=[CAMERA, "hallway"]),
}

#: who appears in which segment, with the observation text.
CAST: dict[int, dict[str, str]] = {
    0: {"person_0001": "Alice in a red scarf switches on the kettle"},
    1: {"person_0001": "Alice pours water into a red mug"},
    2: {"person_0002": "Bob carries a bicycle"},
    4: {"person_0002": "Bob waves at the front door"},
    5: {"person_0001": "Alice drinks tea", "person_0002": "Bob drinks tea"},
}


def populate(store: MemoryStore) -> list[SegmentWrite]:
    """Write the six synthetic segments (entities included) and return them."""
    segments = []
    for i in range(len(SUMMARIES)):
        cast = CAST.get(i, {})
        seg = make_segment(i, entity_ids=list(cast), obs_texts=cast)
        seg = seg.model_copy(update={"entities": [PERSONS[e] for e in cast]})
        store.write_segment(seg)
        segments.append(seg)
    return segments
