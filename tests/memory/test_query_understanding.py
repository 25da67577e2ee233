"""Query understanding: names, times in the user's zone, cameras, objects and counts; what was not understood."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from memory.search.query import EntityName, Vocabulary, content_words, understand

BERLIN = ZoneInfo("Europe/Berlin")
NOW = datetime(2026, 12, 1, 10, 30, tzinfo=BERLIN)  # a Tuesday morning
VOCAB = Vocabulary(
    names=[EntityName("person_0001", "Lin-Manuel Miranda"), EntityName("person_0001", "Lin"),
           EntityName("person_0001", "person_0001"), EntityName("person_0002", "Alex Lacamoire"),
           EntityName("person_0002", "person_0002"), EntityName("object_0001", "red bicycle", "object")],
    cameras=["front_door", "garage"])


def _local(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, BERLIN)


def test_full_names_aliases_single_capitalised_name_words_and_ids_resolve_to_entities() -> None:
    assert understand("Lin-Manuel Miranda", VOCAB, now=NOW).entities == {"person_0001": ["Lin-Manuel Miranda"]}
    assert set(understand("when did Lacamoire play", VOCAB, now=NOW).entities) == {"person_0002"}
    assert set(understand("person_0002 at the piano", VOCAB, now=NOW).entities) == {"person_0002"}
    assert set(understand("the red bicycle", VOCAB, now=NOW).entities) == {"object_0001"}
    # a lower-case common word that happens to be part of a name is not a name
    assert understand("alex", Vocabulary(names=[EntityName("person_0002", "Alex Lacamoire")]),
                      now=NOW).entities == {}


def test_times_resolve_in_the_users_time_zone() -> None:
    q = understand("what happened yesterday at 3 pm", VOCAB, tz="Europe/Berlin", now=NOW)
    assert q.time is not None
    assert (_local(q.time.start), _local(q.time.end)) == (datetime(2026, 11, 30, 14, tzinfo=BERLIN),
                                                          datetime(2026, 11, 30, 16, tzinfo=BERLIN))
    tuesday = understand("last Tuesday at 3 pm", VOCAB, tz="Europe/Berlin", now=NOW).time
    assert tuesday is not None and _local(tuesday.start).date().isoformat() == "2026-11-24"
    morning = understand("this morning", VOCAB, tz="Europe/Berlin", now=NOW).time
    assert morning is not None and (_local(morning.start).hour, _local(morning.end).hour) == (5, 12)
    recent = understand("in the last 2 hours", VOCAB, tz="Europe/Berlin", now=NOW).time
    assert recent is not None and recent.end - recent.start == pytest.approx(7200)
    # the same words in another zone are another instant
    tokyo = understand("yesterday at 3 pm", VOCAB, tz="Asia/Tokyo", now=NOW).time
    assert tokyo is not None and tokyo.start != q.time.start


def test_first_and_last_time_cameras_objects_and_counts() -> None:
    q = understand("the first time someone rode a bike at the front door camera", VOCAB, now=NOW)
    assert q.order == "first" and q.cameras == ["front_door"] and "bike" in q.labels
    assert "bicycle" in q.labels["bike"]
    assert understand("the last time the garage was open", VOCAB, now=NOW).order == "last"
    assert understand("who spoke in the garage last", VOCAB, now=NOW).order == "last"
    assert understand("who came in first this morning", VOCAB, now=NOW).order == "first"
    assert understand("what happened last night", VOCAB, now=NOW).order is None
    assert understand("two people with coffee", VOCAB, now=NOW).people == (2, 2)
    assert understand("wide shot with several people", VOCAB, now=NOW).people == (3, 99)
    assert understand("the audience", VOCAB, now=NOW).people == (5, 99)  # a crowd is more than a handful
    assert understand("a crowd in the garage", VOCAB, now=NOW).people == (5, 99)
    assert understand("a man alone in the garage", VOCAB, now=NOW).people == (1, 1)


def test_what_was_said_or_read_is_an_intent_not_a_word_to_match() -> None:
    said = understand("what did Lin say about the country", VOCAB, now=NOW)
    assert said.intent == "speech" and said.terms == ["country"]
    read = understand("the sign that read no parking", VOCAB, now=NOW)
    assert read.intent == "text" and "park" in read.terms


def test_what_could_not_be_understood_is_said_in_notes() -> None:
    unknown = understand("Zorro at the door", VOCAB, now=NOW)
    assert unknown.entities == {} and "no person or object is named 'Zorro'" in unknown.notes[0]
    assert "Lin-Manuel Miranda" in unknown.notes[0] and unknown.terms == ["zorro", "door"]
    bad_time = understand("at 25 pm in the garage", VOCAB, now=NOW)
    assert bad_time.time is None and any("could not read the time 'at 25 pm'" in n for n in bad_time.notes)
    assert bad_time.cameras == ["garage"]
    missing = understand("person_0042 in the garage", VOCAB, now=NOW)
    assert any("person_0042" in n and "entity_list" in n for n in missing.notes)
    assert understand("yesterday", VOCAB, tz="Not/AZone", now=NOW).notes[0].startswith("unknown time zone")


def test_content_words_stem_so_forms_of_a_word_meet() -> None:
    assert content_words("bicycles") == content_words("a bicycle") == ["bicycl"]
    assert content_words("opened") == content_words("opening") == content_words("opens")
    assert content_words("what is the") == []


def test_last_night_runs_from_yesterday_evening_into_this_morning() -> None:
    night = understand("what happened last night", VOCAB, tz="Europe/Berlin", now=NOW).time
    assert night is not None
    assert (_local(night.start), _local(night.end)) == (datetime(2026, 11, 30, 18, tzinfo=BERLIN),
                                                        datetime(2026, 12, 1, 6, tzinfo=BERLIN))


def test_numbers_meet_whether_spelled_out_or_written_as_digits_or_codes() -> None:
    assert content_words("room three") == content_words("room 3") == ["room", "3"]
    # Whisper writes "X4" for "x four"; both give the code and its number
    assert content_words("the x four instruction") == ["x4", "4", "instruction"]
    assert set(content_words("lay blue at X4 now")) >= {"x4", "4"}
    # "one" is still a filler word unless a letter comes before it
    assert content_words("the one who left") == ["left"] and content_words("b one") == ["b1"]


def test_time_spans_month_dates_and_hours_said_with_the_part_of_the_day() -> None:
    def span(text: str) -> tuple[datetime, datetime] | None:
        t = understand(text, VOCAB, tz="Europe/Berlin", now=NOW).time
        return (_local(t.start), _local(t.end)) if t else None

    assert span("between 8 and 9 this morning") == (datetime(2026, 12, 1, 8, tzinfo=BERLIN),
                                                    datetime(2026, 12, 1, 9, tzinfo=BERLIN))
    assert span("from 14:00 to 15:30 yesterday") == (datetime(2026, 11, 30, 14, tzinfo=BERLIN),
                                                     datetime(2026, 11, 30, 15, 30, tzinfo=BERLIN))
    assert span("between 8 and 9 pm")[0].hour == 20  # type: ignore[index]
    assert span("at 8 this evening") == (datetime(2026, 12, 1, 19, tzinfo=BERLIN),
                                         datetime(2026, 12, 1, 21, tzinfo=BERLIN))
    assert span("on March 3rd")[0] == datetime(2026, 3, 3, tzinfo=BERLIN)  # type: ignore[index]
    assert span("the 24th of December")[0] == datetime(2025, 12, 24, tzinfo=BERLIN)  # not in the future
    assert span("nov 30 at 3 pm") == (datetime(2026, 11, 30, 14, tzinfo=BERLIN),
                                      datetime(2026, 11, 30, 16, tzinfo=BERLIN))
    # an hour said alone: 1 to 6 is the afternoon, in words or with "o'clock" too
    assert span("what happened at 2 o'clock today") == (datetime(2026, 12, 1, 13, tzinfo=BERLIN),
                                                        datetime(2026, 12, 1, 15, tzinfo=BERLIN))
    assert span("at two today") == span("at 2 pm today") and span("at 8")[0].hour == 7  # type: ignore[index]
    assert span("three o'clock yesterday")[0] == datetime(2026, 11, 30, 14, tzinfo=BERLIN)  # type: ignore[index]
    # days counted back are calendar days, so a part of the day can narrow them
    assert span("two days ago in the evening") == (datetime(2026, 11, 29, 17, tzinfo=BERLIN),
                                                   datetime(2026, 11, 29, 22, tzinfo=BERLIN))
    assert span("the day before yesterday")[0] == datetime(2026, 11, 29, tzinfo=BERLIN)  # type: ignore[index]
    assert span("3 days ago") == (datetime(2026, 11, 28, tzinfo=BERLIN), datetime(2026, 11, 29, tzinfo=BERLIN))
    # a night (yesterday's, tonight) runs from the evening into the next morning
    assert span("yesterday night") == span("last night") == (datetime(2026, 11, 30, 18, tzinfo=BERLIN),
                                                             datetime(2026, 12, 1, 6, tzinfo=BERLIN))
    bad = understand("march 45 between 9 and 8", VOCAB, tz="Europe/Berlin", now=NOW)
    assert bad.time is None and len(bad.notes) == 2
    assert "could not read the date 'march 45'" in bad.notes[0] and "between 9 and 8" in bad.notes[1]
