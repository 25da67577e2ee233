"""The gate: the candidates in focus → at most one actionable item, or silence.

Deterministic scorer, per candidate memory (``memory/search/focus.py`` found it because it names something
in view):

* **match** — the open clause itself must name the thing in view (a person may also be named
  elsewhere in the memory when the clause speaks of them as I/he/she/they: ``Kit: "I'll bring…"``);
  1.0 for a person or a detector class, ``word_weight`` for a word spoken or read;
* **open loop** — the clause is a promise, obligation, plan with an action, request, imperative or
  warning (``cues.py``): 1.0, or 0.9 for a state or need; a mere mention scores 0 and never passes;
* **not done** — a later memory (or a later clause of the same one) that reports the loop closed and
  shares its topic ("returned the charger") removes it; so does the recency horizon when one is set;
* **recency** — among items that pass, the newest wins; a small factor keeps older ones below;
* **not already spoken** — evidence ids already said are dropped before scoring (``spoken``).

The item returned carries every memory that says the same thing (the same topic about the same
thing in view), so all of them count as spoken once it is said.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from memory.search.focus import Candidate, Focus
from memory.search.focus_terms import mentions_label, mentions_name

from .cues import COMMON, VERB_WORDS, Clause, clauses, topic_words

__all__ = ["GateSettings", "Item", "select"]

_PRONOUN = re.compile(r"\b(?:i|i'll|i'm|i've|i'd|me|my|we|we'll|us|our|he|he'll|she|she'll|they|they'll|him|her|"
                      r"his|them|their|you|you'll|your)\b", re.IGNORECASE)
#: a clause names the thing to act on when it has at least this many topic words
_DAY = 86400.0


@dataclass(frozen=True)
class GateSettings:
    """The gate's thresholds (the manifest's ``proactive:`` section)."""

    min_score: float = 0.5
    word_weight: float = 0.7
    max_age_days: float | None = None


@dataclass(frozen=True)
class Item:
    """What the gate lets through: the memory to remind of, its open clause, and its evidence."""

    candidate: Candidate
    clause: str
    key: str  # the focus key it ties to: an entity id, a detector label or ``word:<w>``
    score: float
    topic: frozenset[str]
    evidence: tuple[Candidate, ...] = field(default_factory=tuple)

    @property
    def evidence_ids(self) -> list[str]:
        return [c.id for c in self.evidence] or [self.candidate.id]


def _ties(clause: Clause, note_text: str, key: str, focus: Focus) -> float:
    """How the clause ties to the focus key (0 = not at all)."""
    if key.startswith("word:"):
        word = key[5:]
        return 1.0 if re.search(rf"\b{re.escape(word)}\b", clause.text.lower()) else 0.0
    person = next((p for p in focus.people if p.entity_id == key), None)
    if person is not None:
        names = list(person.names)
        if names and mentions_name(clause.text, names):
            return 1.0
        if names and not mentions_name(note_text, names):
            return 0.0  # linked by id only: the text never names them here
        # named elsewhere in the memory: the clause speaks of them (I/he/she/they) or of no one else
        return 1.0 if _PRONOUN.search(clause.text) or not _other_names(clause.text, names) else 0.0
    return 1.0 if mentions_label(clause.text, key) else 0.0


_CAPITALISED = re.compile(r"\b[A-Z][a-z][\w'-]*")


def _other_names(text: str, names: Sequence[str]) -> list[str]:
    """Capitalised words of a clause that are not ``names`` nor ordinary words (a sentence's first word,
    days, months): the other people it speaks of."""
    own = {w for n in names for w in re.split(r"[\s-]+", n)}
    out = []
    for w in _CAPITALISED.findall(text):
        base = w.split("'")[0]
        if base not in own and base.lower() not in COMMON and base.lower() not in VERB_WORDS:
            out.append(base)
    return out


def _open_items(cand: Candidate, focus: Focus, settings: GateSettings) -> list[tuple[Clause, str, float]]:
    """The open clauses of a candidate that tie to something in focus, with the key and the score."""
    parts = clauses(cand.text)
    out = []
    for i, clause in enumerate(parts):
        if not clause.open:
            continue
        topic = topic_words(clause.text)
        # a later clause of the same memory that closes it ("…and returned it on Friday")
        if any(c.done and (topic & topic_words(c.text) or re.search(r"\b(?:it|them)\b", c.text.lower()))
               for c in parts[i + 1:]):
            continue
        best, best_key = 0.0, ""
        for key in cand.keys:
            tie = _ties(clause, cand.text, key, focus)
            if tie <= 0:
                continue
            weight = settings.word_weight if key.startswith("word:") else 1.0
            if tie * weight > best:
                best, best_key = tie * weight, key
        if best > 0:
            out.append((clause, best_key, best * clause.strength))
    return out


def select(candidates: Sequence[Candidate], focus: Focus, spoken: Collection[str], now: float,
           settings: GateSettings = GateSettings(), all_memories: Sequence[Candidate] | None = None) -> Item | None:
    """The one item worth saying now, or None.

    ``candidates`` are oldest first; ``all_memories`` (default: the candidates) are searched for later
    memories that close an open loop. ``spoken`` holds evidence ids already said.
    """
    closers = [c for c in (all_memories if all_memories is not None else candidates)]
    items: list[Item] = []
    for cand in candidates:
        if settings.max_age_days is not None and now - cand.wall > settings.max_age_days * _DAY:
            continue
        for clause, key, score in _open_items(cand, focus, settings):
            topic = topic_words(clause.text)
            if _closed_later(cand, topic, key, focus, closers):
                continue
            items.append(Item(candidate=cand, clause=clause.text, key=key, score=score, topic=topic))
    if not items:
        return None
    # one item per memory (its best clause); memories saying the same thing form one group
    newest = max(i.candidate.wall for i in items)
    oldest = min(i.candidate.wall for i in items)
    span = max(newest - oldest, 1.0)

    def ranked(item: Item) -> float:
        return item.score * (0.9 + 0.1 * (item.candidate.wall - oldest) / span)

    fresh = [i for i in items if i.candidate.id not in spoken]
    passing = [i for i in fresh if i.score >= settings.min_score]
    if not passing:
        return None
    # a memory that names the thing to act on ("Kit borrowed your charger") before one that only
    # refers back to it ("he'll return it on Monday"); among those, the best score, then the newest
    best = max(passing, key=lambda i: (bool(i.topic), ranked(i), i.candidate.wall, i.candidate.id))
    same = [i for i in items if i.key == best.key
            and (i.topic & best.topic or not i.topic or i.candidate.id == best.candidate.id)]
    evidence = tuple(dict.fromkeys(i.candidate for i in sorted(same, key=lambda i: (i.candidate.wall, i.candidate.id))))
    return Item(candidate=best.candidate, clause=best.clause, key=best.key, score=round(ranked(best), 4),
                topic=best.topic, evidence=evidence)


def _closed_later(cand: Candidate, topic: frozenset[str], key: str, focus: Focus,
                  memories: Sequence[Candidate]) -> bool:
    """Whether a memory after ``cand`` reports its loop closed: a done clause on the same topic that
    ties to the same thing in view."""
    if not topic:
        return False
    for other in memories:
        if key not in other.keys or (other.wall, other.id) <= (cand.wall, cand.id):
            continue
        for clause in clauses(other.text):
            if clause.done and topic & topic_words(clause.text) and _ties(clause, other.text, key, focus) > 0:
                return True
    return False
