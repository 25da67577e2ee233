"""Ranking that follows the question: field-aware word matches fused with meaning, scores in [0, 1].

Each candidate row (found by full-text, vector or entity-filtered search) is scored from parts the
question actually asks for (:func:`score_row`):

* **entities** — share of the named entities the row shows (a strong part: half the score when the
  question names someone), plus a smaller *focus* part: the share of the people in the segment who
  are the named ones (a close-up of them beats a crowd they stand in);
* **words** — share of the question's content words found in the row, per field (speech, text read,
  names, objects, description); when the question asks what was said (or read), a word found only in
  another field counts :data:`OFF_FIELD`; in what a recogniser wrote (speech, text read) a word it
  misheard by one letter ("Bimblue" for "bin blue") counts :data:`SOUNDS_LIKE`;
* **meaning** — the cosine similarity of the question and the row, mapped linearly from
  ``[SIM_FLOOR, SIM_CEIL]`` to ``[0, 1]`` (below the floor a text is unrelated; above the ceiling it
  says the same thing);
* **objects** and **people** — when the question names object words or a number of people, whether
  the detector labels / people count of the row agree.

The score is the weighted mean of the parts present, so 1.0 means every part of the question is
answered and 0.5 about half of it; scores from different levels are comparable. Every part that
contributes is reported as a :class:`~memory.models.Match` (``why``). :func:`collapse` then folds
near-identical neighbouring segments into the best of them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from ..models import Match
from .query import Understood, content_terms, stem, words

__all__ = ["Prepared", "Scored", "collapse", "finish_row", "people_count", "prepare_row", "row_fields", "score_row"]

SIM_FLOOR = 0.15
SIM_CEIL = 0.75

#: when the question asks what was said (or written), words found in other fields count this much
OFF_FIELD = 0.6
_INTENT_FIELD = {"speech": "speech", "text": "text read"}
#: a word a recogniser wrote one letter off (a question's word, or two run together) counts this much
SOUNDS_LIKE = 0.7
_HEARD = ("speech", "text read")

#: weights of the score parts
W_ENTITY, W_FOCUS, W_WORDS, W_MEANING, W_LABELS, W_PEOPLE = 1.0, 0.25, 0.5, 0.5, 0.3, 0.5

_NUMBER_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9}
_PEOPLE_RE = re.compile(r"\b(one|two|three|four|five|six|seven|eight|nine|\d+) (?:person|people)\b")
_PERSON_OBJ = re.compile(r"\b(\d+) × person\b")
_TIMESTAMP = re.compile(r"\b\d+:\d\d(?:\.\d)?(?:–\d+:\d\d(?:\.\d)?)?")
#: numbers a description writes for itself (its time span, "4 × person"): not words a question can match
_OWN_NUMBERS = re.compile(rf"{_TIMESTAMP.pattern}|\b\d+ × ")


@dataclass
class Scored:
    """A candidate row with its score and reasons."""

    level: str
    row: dict[str, Any]
    score: float
    why: list[Match] = field(default_factory=list)
    collapsed: list[str] = field(default_factory=list)
    #: raw cosine similarity; orders hits whose scores tie (e.g. both past the similarity ceiling)
    cosine: float = 0.0


def row_fields(level: str, row: dict[str, Any], names: dict[str, list[str]]) -> dict[str, str]:
    """The searchable text of ``row`` split by field (``names`` maps entity ids to their names)."""
    ids = _entity_ids(level, row)
    fields: dict[str, str] = {}
    if level == "traces":
        fields["speech"] = " ".join([row.get("transcript") or "", *(row.get("quotes") or [])])
        fields["text read"] = row.get("ocr_text") or ""
        fields["objects"] = " ".join(row.get("objects") or [])
        fields["description"] = _OWN_NUMBERS.sub(" ", row.get("summary") or row.get("text") or "")
    elif level == "entities":
        fields["description"] = row.get("description") or ""
        ids = [row["id"]]
        fields["names"] = " ".join([row.get("name") or "", *(row.get("aliases") or [])])
    elif level == "schemas":
        fields["title"] = row.get("title") or ""
        fields["description"] = row.get("text") or ""
    else:
        fields["description"] = row.get("text") or ""
    fields["names"] = " ".join([fields.get("names", ""), *(n for i in ids for n in names.get(i, []))]).strip()
    return {k: v for k, v in fields.items() if v}


def _entity_ids(level: str, row: dict[str, Any]) -> list[str]:
    if level == "entities":
        return [row["id"]]
    if level == "observations":
        return [row["entity_id"]]
    return list(row.get("entity_ids") or [])


def people_count(level: str, row: dict[str, Any]) -> int | None:
    """How many people a trace (or observation) shows, from its description and labels; None if unknown."""
    if level not in ("traces", "observations"):
        return None
    text = row.get("summary") or row.get("text") or ""
    counts = [int(m) if m.isdigit() else _NUMBER_WORDS[m] for m in _PEOPLE_RE.findall(text)]
    counts += [int(m) for m in _PERSON_OBJ.findall(text)]
    persons = [e for e in _entity_ids(level, row) if e.startswith("person_")]
    if persons:
        counts.append(len(persons))
    if not counts:
        return 0 if "no faces visible" in text else None
    return max(counts)


_UNIDENTIFIED = re.compile(r"\b(\d+) unidentified\b")


def _unidentified(row: dict[str, Any]) -> int:
    """Faces the describer saw but could not identify (``"… 2 unidentified)"``)."""
    m = _UNIDENTIFIED.search(row.get("summary") or row.get("text") or "")
    return int(m.group(1)) if m else 0


def similarity_part(cosine: float) -> float:
    """Map a cosine similarity onto [0, 1] (see :data:`SIM_FLOOR`, :data:`SIM_CEIL`)."""
    return min(max((cosine - SIM_FLOOR) / (SIM_CEIL - SIM_FLOOR), 0.0), 1.0)


@dataclass
class Prepared:
    """The parts of a row's score that do not depend on its cosine similarity: those before the
    meaning part (entities, words) and those after it (objects, people), in scoring order."""

    level: str
    row: dict[str, Any]
    meaning: bool
    why: list[Match]
    parts: list[tuple[float, float]]
    why_after: list[Match]
    parts_after: list[tuple[float, float]]


def score_row(level: str, row: dict[str, Any], cosine: float | None, q: Understood,
              names: dict[str, list[str]], entity_map: dict[str, str]) -> Scored:
    """Score one candidate row against the understood question (see the module docstring).

    ``entity_map`` maps merged-away ids to the entity they became, so old rows count for the new id.
    """
    return finish_row(prepare_row(level, row, q, names, entity_map), cosine)


def prepare_row(level: str, row: dict[str, Any], q: Understood, names: dict[str, list[str]],
                entity_map: dict[str, str]) -> Prepared:
    """Everything of :func:`score_row` but the meaning part, which :func:`finish_row` adds once the
    row's cosine similarity is known (a search prepares rows while its vector query runs)."""
    why: list[Match] = []
    parts: list[tuple[float, float]] = []  # (weight, value)
    row_ids = {entity_map.get(e, e) for e in _entity_ids(level, row)}
    if q.entities:
        shown = [e for e in q.entities if e in row_ids]
        for e in shown:
            why.append(Match(field="names", entity_id=e, words=q.entities[e]))
        parts.append((W_ENTITY, len(shown) / len(q.entities)))
        people = [e for e in row_ids if e.startswith("person_")]
        if shown and people and level in ("traces", "schemas"):  # a segment about them, not one they pass through
            parts.append((W_FOCUS, len([e for e in shown if e in people]) / (len(people) + _unidentified(row))))
    if q.terms:
        fields = row_fields(level, row, names)
        per_field = {f: set(content_terms(t)) for f, t in fields.items()}
        if "names" in per_field:  # a name matches as written: "line" stems to "lin" but is not Lin
            spelled = set(words(fields["names"]))
            per_field["names"] = {t for t in per_field["names"] if _as_written(q.text).get(t, t) in spelled}
        found: dict[str, list[str]] = {}
        total = 0.0
        wanted = _INTENT_FIELD.get(q.intent or "")
        for term in q.terms:
            best = max(((1.0 if wanted in (None, f) else OFF_FIELD, f) for f, ws in per_field.items() if term in ws),
                       default=None)
            if best is not None:
                total += best[0]
                found.setdefault(best[1], []).append(term)
        missing = [t for t in q.terms if not any(t in ws for ws in found.values())]
        for f in _HEARD:
            if missing and f in fields:
                near = _sounds_like(tuple(q.terms), tuple(missing), q.text, fields[f])
                weight = SOUNDS_LIKE * (1.0 if wanted in (None, f) else OFF_FIELD)
                for heard, terms in near.items():
                    total += weight * len(terms)
                    why.append(Match(field=f, words=list(terms), detail=f"sounds like '{heard}'"))
                    missing = [t for t in missing if t not in terms]
        for f, ws in found.items():
            why.append(Match(field=f, words=ws))
        parts.append((W_WORDS, total / len(q.terms)))
    why_after: list[Match] = []
    parts_after: list[tuple[float, float]] = []
    labels = {str(o).lower() for o in row.get("objects") or []}
    if q.labels and level == "traces" and labels:  # rows without detector output neither gain nor lose
        asked = [w for w, ls in q.labels.items() if ls != ("person",)]
        if asked:
            hit = [w for w in asked if labels & set(q.labels[w])]
            if hit and (labelled := Match(field="objects", words=hit)) not in why:  # said once, if also a word
                why_after.append(labelled)
            parts_after.append((W_LABELS, len(hit) / len(asked)))
    if q.people is not None and level in ("traces", "observations"):
        n = people_count(level, row)
        lo, hi = q.people
        if n is not None:  # an unknown count neither gains nor loses
            value = 1.0 if lo <= n <= hi else max(0.0, 1 - min(abs(n - lo), abs(n - hi)) / 2)
            if value > 0:
                why_after.append(Match(field="people", detail=f"{n} {'person' if n == 1 else 'people'}"))
            parts_after.append((W_PEOPLE, value))
    return Prepared(level, row, bool(q.terms or not q.entities), why, parts, why_after, parts_after)


def finish_row(prepared: Prepared, cosine: float | None) -> Scored:
    """The :class:`Scored` row: ``prepared`` with the meaning part of ``cosine`` (None: no vector query)."""
    level, row = prepared.level, prepared.row
    why, parts = list(prepared.why), list(prepared.parts)
    if cosine is not None and prepared.meaning:
        sim = similarity_part(cosine)
        parts.append((W_MEANING, sim))
        if sim > 0:
            why.append(Match(field="meaning", detail=f"similarity {cosine:.2f}"))
    why += prepared.why_after
    parts += prepared.parts_after
    if not parts:
        score = 1.0  # only filters were asked for (a time, a camera): every row passing them answers it
    else:
        score = sum(w * v for w, v in parts) / sum(w for w, _ in parts)
    if level == "facts":  # importance participates in ranking of facts
        score *= 0.5 + 0.5 * float(row.get("importance") or 0.0)
    return Scored(level=level, row=row, score=round(float(score), 4), why=why, cosine=cosine or 0.0)


@lru_cache(maxsize=256)
def _as_written(text: str) -> dict[str, str]:
    """Each content term of a question → the word it was written as."""
    return {stem(w): w for w in words(text)}


def _near(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` differ by at most one letter changed, added or dropped."""
    if abs(len(a) - len(b)) > 1:
        return False
    if len(a) > len(b):
        a, b = b, a
    i = 0
    while i < len(a) and a[i] == b[i]:
        i += 1
    return a[i + (len(a) == len(b)):] == b[i + 1:]


@lru_cache(maxsize=4096)
def _long_words(text: str) -> tuple[str, ...]:
    """The words of five letters or more in ``text``, once each, in the order they were written (so the
    word a near miss is credited to does not depend on set ordering, which varies between processes)."""
    return tuple(dict.fromkeys(w for w in words(text) if len(w) >= 5 and w.isalpha()))


@lru_cache(maxsize=4096)
def _sounds_like(terms: tuple[str, ...], missing: tuple[str, ...], question: str, heard: str) -> dict[str, tuple[str, ...]]:
    """Missing question terms a recogniser wrote one letter off: a word of five letters or more
    ("Dashwod" → "Dashwood"), or two neighbouring words run together ("bin blue" → "Bimblue").
    Returns the recognised word → the terms it stands for."""
    written = _as_written(question)
    said = _long_words(heard)
    if not said:
        return {}
    out: dict[str, tuple[str, ...]] = {}
    taken: set[str] = set()
    for i, t in enumerate(terms):
        if t not in missing or t in taken or not written.get(t, t).isalpha():
            continue
        w = written.get(t, t)
        nxt = terms[i + 1] if i + 1 < len(terms) else None
        if nxt is not None and nxt not in taken and written.get(nxt, nxt).isalpha():
            joined = w + written.get(nxt, nxt)
            hit = next((h for h in said if h[0] == joined[0] and _near(joined, h)), None)
            if hit is not None and len(joined) >= 6:
                out[hit] = (t, nxt) if nxt in missing else (t,)
                taken.update(out[hit])
                continue
        if len(w) >= 5:
            hit = next((h for h in said if h[0] == w[0] and h != w and _near(w, h)), None)
            if hit is not None:
                out[hit] = (t,)
                taken.add(t)
    return out


def _signature(row: dict[str, Any]) -> set[str]:
    return set(content_terms(_TIMESTAMP.sub(" ", row.get("text") or "")))


def collapse(ranked: list[Scored], threshold: float = 0.75) -> list[Scored]:
    """Fold rows of the same source and camera, adjacent in segment order and nearly the same text
    (word-set Jaccard ≥ ``threshold``), into the best-ranked of them (``collapsed`` lists the others)."""
    kept: list[Scored] = []
    spans: list[tuple[int, int]] = []
    for s in ranked:
        idx = s.row.get("segment_index")
        if s.level not in ("traces", "observations") or idx is None:
            kept.append(s)
            spans.append((0, -1))
            continue
        target = None
        for k, (other, (lo, hi)) in enumerate(zip(kept, spans)):
            if (other.level == s.level and lo - 1 <= idx <= hi + 1
                    and other.row.get("source") == s.row.get("source")
                    and other.row.get("camera_id") == s.row.get("camera_id")
                    and other.row.get("entity_id") == s.row.get("entity_id")):
                osig, sig = _signature(other.row), _signature(s.row)
                if osig and sig and len(osig & sig) / len(osig | sig) >= threshold:
                    target = k
                    break
        if target is None:
            kept.append(s)
            spans.append((idx, idx))
        else:
            kept[target].collapsed.append(s.row["id"])
            lo, hi = spans[target]
            spans[target] = (min(lo, idx), max(hi, idx))
    return kept

