"""The proactive gate on its own: what ties to the thing in view, what is actionable, what is done or said."""

from __future__ import annotations

import pytest

from memory.search.focus import Candidate, Focus, FocusPerson
from plugin.acting.reminders.cues import clauses
from plugin.acting.reminders.gate import GateSettings, select
from plugin.acting.reminders.generator import template

DAY = 86400.0
KIT = Focus(people=(FocusPerson("person_0001", ("Kit",)),))


def note(i: int, text: str, keys: tuple[str, ...] = ("person_0001",), days: float = 10.0) -> Candidate:
    return Candidate(id=f"trc_{i:012d}", level="note", text=text, wall=1_000 * DAY - days * DAY, keys=keys)


@pytest.mark.parametrize("text", [
    "Kit watched a match on Sunday.", "Kit had to leave early.", "Kit needed help with the boxes yesterday.",
    "Kit must have been tired.", "Kit is going to Paris next week.", "Kit said the charger he bought works well.",
    "Kit talked about the weather.", "Kit is a careful driver.", "Kit wanted to watch the film.",
    "Kit will turn 40 next week.", "Kit will get married in June.", "Kit was fixing his bike in the garage.",
])
def test_a_mere_mention_is_never_a_reminder(text: str) -> None:
    assert select([note(1, text)], KIT, set(), now=1_000 * DAY) is None


@pytest.mark.parametrize("text", [
    "Kit promised to bring back the charger.", 'Kit: "I\'ll bring your charger back on Monday."',
    "Kit has to return the charger by Friday.", "Remind Kit to return the charger.",
    "Kit owes you the charger.", "I lent Kit my charger.", "Kit borrowed the charger.",
    "Kit said he would give the charger back.", "Don't forget: Kit needs to return the charger.",
    "Kit hasn't returned the charger yet.", "Kit still has your charger.", "Kit is bringing the charger on Sunday.",
    "Kit came by last week. Ask him for the charger back.", "Kit's birthday is on Friday - wrap the charger for him.",
])
def test_a_promise_obligation_or_loan_about_the_person_in_view_passes(text: str) -> None:
    item = select([note(1, text)], KIT, set(), now=1_000 * DAY)
    assert item is not None and item.key == "person_0001" and "charger" in template(item, {"person_0001": "Kit"})


def test_a_later_memory_that_closes_the_loop_silences_it_and_new_evidence_reopens_it() -> None:
    promise = note(1, "Kit promised to bring back the charger.", days=30)
    returned = note(2, "Kit returned the charger yesterday.", days=10)
    other = note(3, "Kit returned the book to the library.", days=5)
    assert select([promise, returned], KIT, set(), now=1_000 * DAY) is None
    assert select([promise, other], KIT, set(), now=1_000 * DAY) is not None  # another topic closes nothing
    again = note(4, "Kit asked to borrow the charger again and will bring it back on Sunday.", days=2)
    item = select([promise, returned, again], KIT, set(), now=1_000 * DAY)
    assert item is not None and item.candidate.id == again.id


def test_already_spoken_evidence_and_stale_memories_are_not_said() -> None:
    promise = note(1, "Kit promised to bring back the charger.", days=200)
    assert select([promise], KIT, {promise.id}, now=1_000 * DAY) is None
    assert select([promise], KIT, set(), now=1_000 * DAY, settings=GateSettings(max_age_days=90)) is None
    assert select([promise], KIT, set(), now=1_000 * DAY, settings=GateSettings(max_age_days=365)) is not None


def test_the_open_clause_itself_must_name_what_is_in_view() -> None:
    # Kit is mentioned, but the obligation is Sam's: nothing to say when Kit walks in
    mixed = note(1, "Kit watched the match. Sam has to return the ladder.")
    assert select([mixed], KIT, set(), now=1_000 * DAY) is None
    cup = Focus(labels=("cup",))
    assert select([note(2, "Remember to take the mug back to the office.", keys=("cup",))], cup, set(),
                  now=1_000 * DAY) is not None
    assert select([note(3, "Feed the dog at six.", keys=("cat",))], Focus(labels=("cat",)), set(),
                  now=1_000 * DAY) is None


def test_the_memory_naming_the_thing_is_said_and_a_later_one_referring_back_joins_it() -> None:
    borrowed = note(1, "Kit took your charger home.", days=20)
    later = note(2, "Kit said he'd return it on Monday.", days=3)
    item = select([borrowed, later], KIT, set(), now=1_000 * DAY)
    assert item is not None and item.candidate.id == borrowed.id and item.evidence_ids == [borrowed.id, later.id]


def test_memories_on_the_same_topic_are_one_item_citing_all_of_them() -> None:
    first = note(1, "Kit promised to bring back the charger.", days=20)
    second = note(2, "Kit said again he will bring the charger back.", days=3)
    item = select([first, second], KIT, set(), now=1_000 * DAY)
    assert item is not None and item.evidence_ids == [first.id, second.id]


def test_clauses_read_done_and_negated_needs() -> None:
    assert [c.done for c in clauses("We already bought batteries for the remote.")] == [True]
    assert [c.open for c in clauses("We don't need to buy milk anymore.")] == [False]
    assert [c.open for c in clauses("The remote needs batteries.")] == [True]


def test_a_word_heard_or_read_reaches_an_open_loop_about_it_at_a_lower_weight() -> None:
    words = Focus(words=frozenset({"passport"}))
    renew = note(1, "Remember to renew the passport before June.", keys=("word:passport",))
    photo = note(2, "The passport photo was funny.", keys=("word:passport",))
    item = select([renew, photo], words, set(), now=1_000 * DAY)
    assert item is not None and item.candidate.id == renew.id and item.score < 1.0
    assert select([renew], words, set(), now=1_000 * DAY, settings=GateSettings(min_score=0.8)) is None
