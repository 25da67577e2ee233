"""Synthetic segments and entities shared by the memory tests."""

from __future__ import annotations

from memory import Chapter, Entity, Fact, Keyframe, MemoryStore, Observation, SegmentWrite, Trace, stable_id

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


#: the cut of the timeline below: segments 0 (0–10 s) and 1 (10–20 s) are in the past; 2 (20–30 s) ends after it
UNTIL = 25.0


def populate_timeline(store: MemoryStore) -> dict[str, set[str]]:
    """Segments 0–5 of 10 s; Alice from 0 s, Bob only from 30 s; facts and chapters on both sides."""
    past: set[str] = set()
    future: set[str] = set()
    alice = Entity(id="person_0001", kind="person", name="Alice", description="later consolidated: drives a red car")
    bob = Entity(id="person_0002", kind="person", name="Bob", description="man with a bicycle helmet")
    for i in range(6):
        cast = ["person_0001"] + (["person_0002"] if i >= 3 else [])
        seg = make_segment(i, entity_ids=cast, summary=f"segment {i}: Alice and friends in the kitchen",
                           obs_texts={e: f"{e} in the kitchen at segment {i}" for e in cast})
        seg = seg.model_copy(update={"entities": [alice] + ([bob] if i >= 3 else [])})
        store.write_segment(seg)
        bucket = past if seg.trace.t_end <= UNTIL else future
        bucket |= {seg.trace.id, *(o.id for o in seg.observations)}
        for kf in seg.keyframes:  # a frame is dated by when it was taken
            (past if kf.t <= UNTIL else future).add(kf.id)
    future.add("person_0002")
    trace = {i: stable_id("trc_", "default", SOURCE, i) for i in range(6)}
    store.upsert_chapters([
        Chapter(id="sch_000000000001", camera_id=CAMERA, source=SOURCE, t_start=0, t_end=20,
                text="Alice starts the day in the kitchen", trace_ids=[trace[0], trace[1]], entity_ids=["person_0001"]),
        Chapter(id="sch_000000000002", camera_id=CAMERA, source=SOURCE, t_start=20, t_end=60,
                text="Alice and Bob in the kitchen", trace_ids=[trace[i] for i in range(2, 6)],
                entity_ids=["person_0001", "person_0002"]),
    ])
    store.upsert_facts([
        Fact(id="fct_000000000001", entity_ids=["person_0001"], text="Alice is in the kitchen every morning",
             evidence_ids=[trace[0], trace[1]]),
        Fact(id="fct_000000000002", entity_ids=["person_0001"], text="Alice drives a red car to the kitchen",
             evidence_ids=[trace[1], trace[4]]),
        Fact(id="fct_000000000003", entity_ids=["person_0002"], text="Bob is Alice's brother in the kitchen",
             kind="identity"),
    ])
    past |= {"sch_000000000001", "fct_000000000001", "person_0001"}
    future |= {"sch_000000000002", "fct_000000000002", "fct_000000000003"}
    return {"past": past, "future": future}
