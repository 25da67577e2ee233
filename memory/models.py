"""Record models of the memory store.

These pydantic models are the vocabulary shared by the store, perception and the tools. They
carry no vectors: the store embeds the searchable ``text`` of a record when it writes it, so
callers never deal with embedding dimensions. Ids are deterministic (see :func:`stable_id`), so
writing the same segment twice upserts the same rows.
"""

from __future__ import annotations

import hashlib
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Level = Literal["observations", "traces", "schemas", "facts", "entities"]
EntityKind = Literal["person", "object"]

#: id prefix → level, so ``get(id)`` can find the table of any id.
ID_PREFIXES: dict[str, Level] = {
    "obs_": "observations",
    "trc_": "traces",
    "sch_": "schemas",
    "fct_": "facts",
    "person_": "entities",
    "object_": "entities",
}


def stable_id(prefix: str, *parts: object) -> str:
    """Return ``prefix`` + 12 hex chars of sha256 over ``parts`` (deterministic across runs)."""
    digest = hashlib.sha256("\x1f".join(str(p) for p in parts).encode("utf-8")).hexdigest()
    return f"{prefix}{digest[:12]}"


class Record(BaseModel):
    """Base of every stored record: strict about unknown fields."""

    model_config = ConfigDict(extra="forbid")


class Entity(Record):
    """A persistent person or object the system has resolved."""

    id: str = Field(description="persistent id, e.g. person_0007")
    kind: EntityKind
    name: str | None = Field(None, description="display name given by a user, if any")
    aliases: list[str] = Field(default_factory=list)
    description: str = Field("", description="short searchable description")
    first_seen: float = Field(0.0, description="wall-clock epoch seconds of the first sighting")
    last_seen: float = Field(0.0, description="wall-clock epoch seconds of the latest sighting")
    sightings: int = Field(0, description="number of segments the entity was observed in")
    cameras: list[str] = Field(default_factory=list)
    merged_into: str | None = Field(None, description="set when this id was merged into another")


class Observation(Record):
    """Episodic memory at entity level: one resolved entity in one segment."""

    id: str
    entity_id: str
    camera_id: str
    source: str
    segment_index: int
    t_start: float = Field(description="media seconds")
    t_end: float
    wall_start: float = Field(description="wall-clock epoch seconds")
    text: str = Field(description="appearance, behaviour, interactions in words")
    keyframe_ids: list[str] = Field(default_factory=list)
    confidence: float = 0.0


class Trace(Record):
    """Episodic memory at segment level: one analysed segment."""

    id: str
    camera_id: str
    source: str
    segment_index: int
    t_start: float
    t_end: float
    wall_start: float
    summary: str
    entity_ids: list[str] = Field(default_factory=list)
    objects: list[str] = Field(default_factory=list)
    ocr_text: str = ""
    transcript: str = ""
    quotes: list[str] = Field(default_factory=list)
    keyframe_ids: list[str] = Field(default_factory=list)
    level: Literal["light", "full"] = "light"
    speakers: list[str] = Field(default_factory=list, description=(
        "who spoke, in order of first words: entity ids, or voice_<n> for a voice not tied to anyone"))


class Keyframe(Record):
    """A stored still: JPEG bytes plus where it came from."""

    id: str
    camera_id: str
    source: str
    segment_index: int
    t: float = Field(description="media seconds")
    wall_time: float
    quality: float = Field(description="sharpness × colour entropy, higher is better")
    width: int
    height: int
    entity_ids: list[str] = Field(default_factory=list)
    jpeg: bytes = Field(repr=False)


class GallerySlot(Record):
    """One slot of an entity's gallery in some modality: an embedding and its quality."""

    id: str
    entity_id: str
    embedding: list[float]
    quality: float
    keyframe_id: str | None = None
    created_at: float = 0.0


class GalleryFace(GallerySlot):
    """One slot of an entity's face gallery (an SFace embedding) and the pose it was seen in."""

    turn: float = Field(0.0, description="how far the face was turned (nose offset in eye widths; >0.8 = profile)")


class GalleryBody(GallerySlot):
    """One slot of an entity's body gallery (an appearance descriptor of its person box)."""


class GalleryVoice(GallerySlot):
    """One slot of a person's voice gallery (a CAM++ speaker embedding)."""


class GalleryObject(GallerySlot):
    """One slot of an object entity's appearance gallery (colour/texture descriptor of its box)."""

    label: str = Field("", description="detector class, e.g. cat")
    camera_id: str = Field("", description="the camera the object is re-identified on")


class IdentityDecision(Record):
    """Why the resolver (or a user edit) gave an entity a sighting, with the evidence it used."""

    id: str = Field(description="dec_<12 hex>")
    entity_id: str
    action: str = Field(description="match | new | confirm_pending | enrol | name | merge | split")
    source: str = ""
    camera_id: str = ""
    segment_index: int = -1
    score: float = Field(0.0, description="best gallery similarity that decided it (1.0 for new)")
    runner_up: str | None = Field(None, description="the second-best candidate entity, if any")
    runner_up_score: float | None = None
    reason: str = ""
    evidence_json: str = Field("[]", description="JSON list of the evidence items (frame time, box, scores)")
    created_at: float = 0.0


class Chapter(Record):
    """Episodic memory at chapter level (table ``schemas``): a narrative over many traces."""

    id: str = Field(description="sch_<12 hex>")
    camera_id: str
    source: str
    t_start: float = Field(description="media seconds")
    t_end: float
    wall_start: float = 0.0
    wall_end: float = 0.0
    title: str = ""
    text: str = Field(description="the chapter narrative, searchable")
    trace_ids: list[str] = Field(default_factory=list)
    entity_ids: list[str] = Field(default_factory=list)
    updated_at: float = 0.0


class Fact(Record):
    """Semantic memory at entity level: edits supersede, they never erase history."""

    id: str = Field(description="fct_<12 hex>")
    entity_ids: list[str] = Field(default_factory=list, description="entities the fact is about")
    text: str
    kind: str = Field("attribute", description="identity | attribute | habit | relation | …")
    importance: float = Field(0.5, ge=0.0, le=1.0, description="w in [0, 1]; participates in ranking")
    evidence_ids: list[str] = Field(default_factory=list, description="supporting trace/observation ids")
    status: Literal["active", "superseded"] = "active"
    superseded_by: str | None = None
    created_at: float = 0.0
    key: str = Field("", description="the slot the fact fills (e.g. habit/morning); one active fact per key")
    supersedes: str | None = Field(None, description="the fact this one replaced (UPDATE)")
    retired_by: list[str] = Field(default_factory=list, description="evidence of the edit that superseded it")
    reason: str = Field("", description="why the latest edit was made")
    confirmations: int = Field(0, ge=0, description="times later evidence re-confirmed it")
    updated_at: float = 0.0


class VLMRuleSignal(Record):
    """A rule the VLM judged matched by a segment (evidence for the notification resolver)."""

    rule: str = Field(description="the rule text, as given in the prompt")
    evidence: str = ""


class SegmentWrite(Record):
    """Everything one segment commits, written idempotently by ``MemoryStore.write_segment``."""

    source: str
    camera_id: str
    segment_index: int
    trace: Trace
    observations: list[Observation] = Field(default_factory=list)
    keyframes: list[Keyframe] = Field(default_factory=list)
    entities: list[Entity] = Field(default_factory=list, description="new or updated entities")
    gallery_faces: list[GalleryFace] = Field(default_factory=list)
    gallery_bodies: list[GalleryBody] = Field(default_factory=list)
    gallery_voices: list[GalleryVoice] = Field(default_factory=list)
    gallery_objects: list[GalleryObject] = Field(default_factory=list)
    decisions: list[IdentityDecision] = Field(default_factory=list, description="identity decisions of the segment")
    source_size: int | None = None
    source_mtime: float | None = None
    people: int = Field(0, ge=0, description="most people seen at once: identified, unidentified faces or person "
                        "boxes (not stored)")
    enrichment: bool = Field(False, description="a live_latency second write: VLM text and signals onto the same ids")
    vlm_signals: list[VLMRuleSignal] = Field(default_factory=list, description="the VLM's matched rules (not stored)")
    risk: str = Field("none", description="the VLM's risk level for the segment (not stored)")
    object_scores: dict[str, float] = Field(default_factory=dict, description="detector class → best score in "
                                            "the segment (not stored)")
    seen_at: dict[str, float] = Field(default_factory=dict, description="entity id or detector class → media "
                                      "second it was first seen in the segment (not stored)")


class IngestState(Record):
    """Resume point of one source."""

    source: str
    camera_id: str
    last_segment_index: int = -1
    last_t_end: float = 0.0
    done: bool = False
    source_size: int | None = None
    source_mtime: float | None = None
    updated_at: float = 0.0


class Match(Record):
    """One reason a hit matched: a field and the query words (or entity, or measure) found there."""

    field: str = Field(description="speech | text read | names | objects | people | description | meaning | time")
    words: list[str] = Field(default_factory=list, description="query words (or names) found in that field")
    entity_id: str | None = Field(None, description="the named entity this hit shows")
    detail: str = Field("", description="a measure, e.g. 'similarity 0.62' or '3 people', or the word a "
                        "recogniser wrote, e.g. \"sounds like 'bimblue'\"")


class QueryUnderstanding(Record):
    """What a search understood in its query, so a caller can see (and fix) the interpretation."""

    query: str
    text: str = Field("", description="the words left for full-text and meaning search")
    entities: dict[str, list[str]] = Field(default_factory=dict, description="entity id → the names that named it")
    cameras: list[str] = Field(default_factory=list)
    time_label: str | None = None
    wall_start: float | None = Field(None, description="time window start, epoch seconds")
    wall_end: float | None = None
    order: Literal["first", "last"] | None = None
    labels: list[str] = Field(default_factory=list, description="object words mapped to detector labels")
    people: list[int] | None = Field(None, description="[min, max] people asked for")
    notes: list[str] = Field(default_factory=list, description="what could not be understood, and what was done")
    summary: str = ""


class SearchHit(Record):
    """One search result: the record's id, level, text and score, plus where/when and why it matched.

    ``score`` is in [0, 1]: the share of the question the hit answers (named entities present, words
    found per field, closeness in meaning, objects and people counts asked for).
    """

    id: str
    level: Level
    text: str
    score: float
    camera_id: str | None = None
    source: str | None = None
    t_start: float | None = None
    t_end: float | None = None
    wall_start: float | None = None
    entity_ids: list[str] = Field(default_factory=list)
    keyframe_ids: list[str] = Field(default_factory=list)
    why: list[Match] = Field(default_factory=list, description="why it matched: fields, entities, words")
    collapsed: list[str] = Field(default_factory=list,
                                 description="ids of near-identical neighbouring segments folded into this hit")


class GetResult(Record):
    """An item with its time-ordered neighbours and linked entities."""

    item: dict[str, object]
    level: Level
    before: list[dict[str, object]] = Field(default_factory=list)
    after: list[dict[str, object]] = Field(default_factory=list)
    entities: list[Entity] = Field(default_factory=list)
    children: list[dict[str, object]] = Field(
        default_factory=list, description="a chapter's traces in time order (walk down from ``sch_`` ids)")
