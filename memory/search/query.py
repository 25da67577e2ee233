"""Query understanding: deterministic, local parsing of what a search question asks for.

:func:`understand` turns ``"what did Lin-Manuel say on the porch camera yesterday after 3 pm"`` into a
:class:`Understood` value, given a :class:`Vocabulary` read from the store *at query time* (so a rename
or merge applies to the next search):

* **entities** — entity names, aliases and ids found in the query (whole words, case-insensitive;
  a single word of a multi-word name counts when it is capitalised and belongs to one entity only);
  merged ids resolve to the entity they were merged into;
* **time** — ``today``, ``yesterday``, ``this morning/afternoon/evening``, ``tonight``, ``last night``,
  weekday names (``on Tuesday``, ``last Tuesday``), ``this/last week``, ``N minutes/hours/days ago``,
  ``in the last N hours``, ``at 3 pm`` / ``at 15:30`` (a ±1 h window, on the named day or today; "at 8
  this evening" is 20:00), ``between 8 and 9 pm`` / ``from 14:00 to 15:30``, ISO dates and dates with a
  month name (``March 3rd``, ``the 3rd of March 2025``; without a year, the latest one not in the
  future); resolved in the user's IANA time zone to wall-clock epoch seconds;
* **order** — ``the first time`` / ``the last time`` / ``most recent``, or ``first`` / ``last`` closing
  the question ("who spoke last");
* **cameras** — camera ids written as words (``front_door`` ↔ "front door");
* **objects and counts** — object words mapped to detector labels (``bike`` → bicycle,
  ``coffee`` → coffee cup / mug / cup) and people counts (``two people``, ``several people``, ``alone``).

What is left after removing time, camera and filler words is the ``text`` that full-text and vector
search match. Nothing here raises on odd input: what could not be read is reported in ``notes``.
"""

from __future__ import annotations

import re
from functools import lru_cache
from dataclasses import dataclass, field
from datetime import date, datetime, time as dtime, timedelta
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

__all__ = ["EntityName", "TimeRange", "Understood", "Vocabulary", "content_terms", "content_words", "stem",
           "understand"]

#: words that carry no content for matching (questions, articles, fillers)
STOP = frozenset("""a an the and or but of to in on at by for with from into onto about as is are was were be been being
do does did done have has had i me my we our you your it its this that these those there here then than so such
what which who whom whose when where why how any some someone somebody something show find tell give me us
segment segments clip clips video videos moment moments scene time times please can could would should will
just also very really ever all one happen happened happens happening thing things anything everything
something nothing see saw seen look looking there going go went record recorded may might must""".split())

_WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
#: words that say the answer is in what was said / what was written, not in what was seen
SPEECH_WORDS = frozenset("say said says saying talk talked talking talks mention mentioned mentions speak spoke "
                         "speaking tell told ask asked asks quote quoted word words voice sing sang sung".split())
TEXT_WORDS = frozenset("read sign signs written writing label poster banner text caption".split())
_MONTHS = frozenset("january february march april may june july august september october november december".split())
_NUMBERS = {"no": 0, "zero": 0, "one": 1, "a": 1, "single": 1, "two": 2, "three": 3, "four": 4, "five": 5,
            "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10, "both": 2, "couple": 2, "pair": 2}
#: hours of a day's periods (past 24 = early next morning); "night" runs from the evening on
_PERIODS = {"morning": (5, 12), "afternoon": (12, 17), "evening": (17, 22), "night": (18, 30), "noon": (11, 14),
            "midnight": (23, 25), "tonight": (17, 29)}

#: object words → detector labels (both the vendored SSD's Open Images names and COCO's)
LABEL_WORDS: dict[str, tuple[str, ...]] = {
    "person": ("person",), "people": ("person",), "man": ("person",), "woman": ("person",),
    "men": ("person",), "women": ("person",), "persons": ("person",), "child": ("person",), "kid": ("person",),
    "bike": ("bicycle", "stationary bicycle"), "bicycle": ("bicycle", "stationary bicycle"),
    "cycle": ("bicycle",), "laptop": ("laptop",), "computer": ("laptop", "computer monitor", "computer mouse"),
    "notebook": ("laptop", "book"), "mouse": ("computer mouse", "mouse"), "monitor": ("computer monitor", "tv"),
    "screen": ("computer monitor", "tv"), "tv": ("tv", "computer monitor"), "television": ("tv",),
    "chair": ("chair",), "seat": ("chair", "bench"), "cow": ("cattle", "cow"), "cattle": ("cattle", "cow"),
    "desk": ("desk", "table", "dining table"), "table": ("table", "desk", "dining table"),
    "cat": ("cat",), "kitten": ("cat",), "dog": ("dog",), "puppy": ("dog",), "box": ("box",),
    "parcel": ("box",), "package": ("box",), "mug": ("mug", "cup", "coffee cup"),
    "cup": ("coffee cup", "mug", "cup"), "coffee": ("coffee cup", "mug", "cup"), "tea": ("mug", "cup", "coffee cup"),
    "bottle": ("bottle",), "shoe": ("footwear", "boot", "high heels"), "shoes": ("footwear", "boot", "high heels"),
    "boot": ("boot",), "boots": ("boot",), "heels": ("high heels",), "footwear": ("footwear",),
    "car": ("car", "vehicle"), "cars": ("car", "vehicle"), "vehicle": ("vehicle", "car", "truck", "bus"),
    "truck": ("truck", "vehicle"), "bus": ("bus", "vehicle"), "book": ("book",), "books": ("book",),
    "camera": ("camera",), "phone": ("cell phone", "mobile phone"), "umbrella": ("umbrella",),
    "backpack": ("backpack",), "bag": ("handbag", "backpack", "suitcase"), "suitcase": ("suitcase",),
    "bird": ("bird",), "horse": ("horse",), "sofa": ("couch",), "couch": ("couch",), "plant": ("potted plant",),
    "bed": ("bed",), "clock": ("clock",), "knife": ("knife",), "bowl": ("bowl",), "pizza": ("pizza",),
}

_PEOPLE_WORDS = frozenset({"people", "persons", "person", "men", "women", "faces", "guys", "kids", "children"})
_MANY = frozenset({"several", "many", "crowd", "group", "lots", "multiple", "few", "audience"})
_ORDER = ((r"(?:the )?first (?:time|occurrence)|the first|earliest|oldest", "first"),
          (r"(?:the )?last (?:time|occurrence)|the last|latest|most recent(?:ly)?|newest", "last"))


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """A light English stem so "opened"/"opens"/"opening" and "bicycles"/"bicycle" meet."""
    w = word.lower()
    if len(w) <= 3:
        return w
    if w.endswith("ies") or w.endswith("ied"):
        w = w[:-3] + "y"
    elif w.endswith(("sses", "ches", "shes", "xes", "zes")):
        w = w[:-2]
    elif w.endswith("s") and not w.endswith(("ss", "us", "is")):
        w = w[:-1]
    elif w.endswith("ing") and len(w) > 5:
        w = w[:-3]
    elif w.endswith("ed") and len(w) > 4:
        w = w[:-2]
    if len(w) > 3 and w[-1] == w[-2] and w[-1] not in "aeiouls":
        w = w[:-1]  # running → run, stopped → stop
    if len(w) > 3 and w.endswith("e"):
        w = w[:-1]  # close / closed / closing meet at "clos"
    return w


_WORD = re.compile(r"[0-9a-zà-öø-ÿ]+(?:['’][a-z]+)?")


def _clean(word: str) -> str:
    if "'" in word or "’" in word:
        word = re.sub(r"['’]s$", "", word).replace("'", "").replace("’", "")
    return word


def words(text: str) -> list[str]:
    """Lower-case word tokens (apostrophe suffixes such as ``'s`` dropped)."""
    return [_clean(w) for w in _WORD.findall(text.lower())]


#: number words spelled out in questions and transcripts alike, matched as digits
_DIGITS = {w: str(n) for n, w in enumerate("zero one two three four five six seven eight nine ten eleven twelve "
                                            "thirteen fourteen fifteen sixteen seventeen eighteen nineteen "
                                            "twenty".split())}
_CODE = re.compile(r"([a-z])(\d+)")


@lru_cache(maxsize=8192)
def content_terms(text: str) -> tuple[str, ...]:
    """:func:`content_words` as a cached tuple (ranking tokenises the same row texts again and again).

    Numbers meet whichever way they were written: number words become digits, and a letter and
    number said apart ("x four", "p 9") also give the code Whisper writes ("x4", "p9"), which in
    turn gives its number.
    """
    out: dict[str, None] = {}
    lowered = text.lower()
    tokens = _WORD.findall(lowered)
    if "'" in lowered or "’" in lowered:
        tokens = [_clean(w) for w in tokens]
    # "one" stays a stop word ("the one who…") unless it follows a letter ("b one")
    numbers = [_DIGITS.get(w, w) for w in tokens]
    last = len(tokens) - 1
    for i, w in enumerate(tokens):
        n = numbers[i]
        if w != "one":
            w = n
        if len(w) == 1:
            if w.isalpha() and i < last and numbers[i + 1].isdigit():
                out[w + numbers[i + 1]] = None
            elif w.isdigit():
                out[stem(w)] = None
        elif w.isdigit():
            out[stem(w)] = None
        elif "a" <= w[0] <= "z" and w[1:].isdigit():  # a code ("x4"); tokens hold ASCII digits only
            out[w] = None
            out[w[1:]] = None
        elif w not in STOP:
            out[stem(w)] = None
    return tuple(out)


def content_words(text: str) -> list[str]:
    """The stemmed content words of ``text`` (stop words dropped), in order, without repeats."""
    return list(content_terms(text))


@dataclass(frozen=True)
class EntityName:
    """One name (or alias, or id) an entity answers to."""

    entity_id: str
    name: str
    kind: str = "person"


@dataclass
class Vocabulary:
    """What the store knows by name: entity names/aliases/ids (merges already followed) and camera ids."""

    names: list[EntityName] = field(default_factory=list)
    cameras: list[str] = field(default_factory=list)


@dataclass
class TimeRange:
    """A wall-clock window (epoch seconds) and the words it came from."""

    start: float
    end: float
    label: str


@dataclass
class Understood:
    """What a query asks for, and what could not be understood."""

    raw: str
    text: str
    terms: list[str] = field(default_factory=list)
    entities: dict[str, list[str]] = field(default_factory=dict)
    time: TimeRange | None = None
    order: Literal["first", "last"] | None = None
    cameras: list[str] = field(default_factory=list)
    labels: dict[str, tuple[str, ...]] = field(default_factory=dict)
    people: tuple[int, int] | None = None
    intent: Literal["speech", "text"] | None = None
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """One line: what the search used."""
        parts = []
        if self.entities:
            parts.append("entities " + ", ".join(f"{', '.join(v)} = {k}" for k, v in self.entities.items()))
        if self.time:
            parts.append(f"time {self.time.label}")
        if self.order:
            parts.append(f"the {self.order} occurrence")
        if self.cameras:
            parts.append("camera " + ", ".join(self.cameras))
        if self.labels:
            parts.append("objects " + ", ".join(self.labels))
        if self.people is not None:
            lo, hi = self.people
            parts.append(f"people {lo}" + ("" if lo == hi else f"–{hi}" if hi < 99 else "+"))
        if self.intent:
            parts.append(f"looking in {'what was said' if self.intent == 'speech' else 'text read'}")
        if self.terms:
            parts.append("words " + " ".join(self.terms))
        return "; ".join(parts) or "nothing searchable"


def _norm(text: str) -> str:
    return " " + " ".join(words(text.replace("_", " ").replace("-", " "))) + " "


def _tz(name: str | None) -> ZoneInfo | None:
    try:
        return ZoneInfo(name) if name else None
    except (ZoneInfoNotFoundError, ValueError):
        return None


class _Cutter:
    """The query as normalised text from which recognised phrases are cut out."""

    def __init__(self, raw: str) -> None:
        self.text = _norm(raw)

    def take(self, pattern: str) -> re.Match[str] | None:
        m = re.search(pattern, self.text)
        if m:
            self.text = self.text[: m.start()] + " " + self.text[m.end():]
        return m


def _resolve_entities(raw: str, cut: _Cutter, vocab: Vocabulary, out: Understood) -> None:
    candidates = sorted(vocab.names, key=lambda n: -len(n.name))
    for n in candidates:
        phrase = _norm(n.name)
        if len(phrase.strip()) < 2:
            continue
        if cut.take(re.escape(phrase.rstrip()) + r"(?= )") is not None:
            out.entities.setdefault(n.entity_id, []).append(n.name)
    # A capitalised single word of a multi-word name (e.g. "Lin-Manuel") names the one entity that has it.
    owners: dict[str, set[str]] = {}
    for n in vocab.names:
        for w in _norm(n.name).split():
            if len(w) >= 3 and w not in STOP:
                owners.setdefault(w, set()).add(n.entity_id)
    capitalised = {w.lower() for w in re.findall(r"\b[A-ZÀ-Ö][\w'-]+", raw) for w in re.split(r"[-_']", w)}
    for w, ids in owners.items():
        if w in capitalised and len(ids) == 1 and re.search(rf" {re.escape(w)} ", cut.text):
            (eid,) = ids
            cut.take(rf" {re.escape(w)}(?= )")
            out.entities.setdefault(eid, []).append(w.capitalize())


def _day_window(day: date, tz: ZoneInfo | None, hours: tuple[float, float] = (0, 24)) -> tuple[float, float]:
    start = datetime.combine(day, dtime(0), tzinfo=tz) + timedelta(hours=hours[0])
    return start.timestamp(), (start + timedelta(hours=hours[1] - hours[0])).timestamp()


def _clock_of(h: str, m: str | None, ampm: str | None, later: int | None = None) -> float | None:
    """Hour of day from matched parts; an hour under 12 without am/pm moves ``later`` hours (the part
    of the day it was said with), or, said alone, 1 to 6 means the afternoon ("at 2" is 14:00)."""
    hour, minute = int(h), int(m or 0)
    if ampm:
        if not 1 <= hour <= 12:
            return None
        hour = hour % 12 + (12 if ampm.startswith("p") else 0)
    elif hour < 12:
        hour += later if later is not None else 12 if 1 <= hour <= 6 else 0
    if hour > 23 or minute > 59:
        return None
    return hour + minute / 60


_MONTH_NAMES = ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
                "november", "december"]
_MONTH_RE = "|".join(sorted({*_MONTH_NAMES, *(n[:3] for n in _MONTH_NAMES), "sept"}, key=len, reverse=True))


def _month_day(m: re.Match[str], today: date) -> date | None:
    """The date of ``3rd of March`` / ``March 3`` (without a year: the latest one not after today)."""
    month = next(i for i, n in enumerate(_MONTH_NAMES, 1) if n.startswith(m.group("mon")[:3]))
    try:
        if m.group("y"):
            return date(int(m.group("y")), month, int(m.group("d")))
        found = date(today.year, month, int(m.group("d")))
        return found if found <= today else date(today.year - 1, month, int(m.group("d")))
    except ValueError:
        return None


_HOURS = {w: d for w, d in _DIGITS.items() if 1 <= int(d) <= 12}
#: how many days back ("a day ago", "three days ago"): number words up to ten
_COUNT_WORDS = "|".join(["a", *(w for w, d in _DIGITS.items() if 1 <= int(d) <= 10)])
_HOUR_WORD = re.compile(rf" (at|around|about|after|before|since|until|till) ({'|'.join(_HOURS)})(?= )"
                        rf"| ({'|'.join(_HOURS)})(?= (?:oclock|am|pm|a m|p m) )")


def _resolve_time(cut: _Cutter, now: datetime, tz: ZoneInfo | None, out: Understood) -> None:
    # hours in words ("at two", "three o'clock") become digits, and "o'clock" goes
    cut.text = _HOUR_WORD.sub(lambda m: f" {m.group(1)} {_HOURS[m.group(2)]}" if m.group(1)
                              else f" {_HOURS[m.group(3)]}", cut.text)
    cut.text = re.sub(r"(?: (at|around|about|after|before|since|until|till))? (\d{1,2}) oclock(?= )",
                      lambda m: f" {m.group(1) or 'at'} {m.group(2)}", cut.text)
    today = now.date()
    day: date | None = None
    label: list[str] = []
    if cut.take(r" today "):
        day, label = today, ["today"]
    elif cut.take(r" (?:the )?day before yesterday "):
        day, label = today - timedelta(days=2), ["the day before yesterday"]
    elif cut.take(r" yesterday "):
        day, label = today - timedelta(days=1), ["yesterday"]
    elif m := cut.take(r" (?:on |last |this past )?(" + "|".join(_WEEKDAYS) + r")s? "):
        wd = _WEEKDAYS.index(m.group(1))
        back = (today.weekday() - wd) % 7 or (7 if "last" in m.group(0) else 0)
        day, label = today - timedelta(days=back), [m.group(0).strip()]
    elif m := cut.take(rf" (\d+|{_COUNT_WORDS}) days? ago "):
        n = int(m.group(1)) if m.group(1).isdigit() else int(_DIGITS.get(m.group(1), "1"))
        day, label = today - timedelta(days=n), [m.group(0).strip()]
    elif m := cut.take(r" (\d{4})[ ](\d{1,2})[ ](\d{1,2}) "):
        try:
            day, label = date(int(m.group(1)), int(m.group(2)), int(m.group(3))), [m.group(0).strip()]
        except ValueError:
            out.notes.append(f"could not read the date {m.group(0).strip()!r}; not filtering by date")
    elif m := (cut.take(rf" (?:on )?(?:the )?(?P<d>\d{{1,2}})(?:st|nd|rd|th)? (?:of )?(?P<mon>{_MONTH_RE})"
                        r"(?: (?P<y>\d{4}))? ")
               or cut.take(rf" (?:on )?(?P<mon>{_MONTH_RE}) (?:the )?(?P<d>\d{{1,2}})(?:st|nd|rd|th)?"
                           r"(?: (?P<y>\d{4}))? ")):
        day = _month_day(m, today)
        if day is None:
            out.notes.append(f"could not read the date {m.group(0).strip()!r}; not filtering by date")
        else:
            label = [m.group(0).strip()]
    hours: tuple[float, float] | None = None
    if m := cut.take(r" (?:this |in the |last |yesterday )?(morning|afternoon|evening|night|tonight|noon|midnight) "):
        word = m.group(1)
        hours = _PERIODS[word]
        if m.group(0).startswith(" last night") or word == "night" and day is None:
            day = day or today - timedelta(days=1)  # last night: from yesterday evening to early this morning
        label.append(m.group(0).strip())
    # "at 8 this evening" is 20:00: an hour without am/pm takes the afternoon/evening it was said with
    later = None if hours is None else 12 if hours[0] >= 12 else 0
    if m := cut.take(r" (?:between|from) (?P<h>\d{1,2})(?: (?P<m>\d{2}))? ?(?P<ap>am|pm|a m|p m)?"
                     r" (?:and|to|until|till) (?P<h2>\d{1,2})(?: (?P<m2>\d{2}))? ?(?P<ap2>am|pm|a m|p m)? "):
        ap = m.group("ap") or m.group("ap2")  # "between 8 and 9 pm": both are pm
        lo = _clock_of(m.group("h"), m.group("m"), ap, later)
        hi = _clock_of(m.group("h2"), m.group("m2"), m.group("ap2") or ap, later)
        if lo is None or hi is None or hi <= lo:
            out.notes.append(f"could not read the times {m.group(0).strip()!r}; not filtering by time of day")
        else:
            hours = (lo, hi)
            label.append(m.group(0).strip())
    elif m := cut.take(r" (?:at|around|about|after|before|since) (?P<h>\d{1,2})(?: (?P<m>\d{2}))?"
                       r" ?(?P<ap>am|pm|a m|p m)? "):
        clock = _clock_of(m.group("h"), m.group("m"), m.group("ap"), later)
        if clock is None:
            out.notes.append(f"could not read the time {m.group(0).strip()!r}; not filtering by time of day")
        else:
            word = m.group(0).split()[0]
            hours = ((clock, 24.0) if word in ("after", "since") else (0.0, clock) if word == "before"
                     else (clock - 1, clock + 1))
            label.append(m.group(0).strip())
    elif m := cut.take(r" (?P<h>\d{1,2})(?: (?P<m>\d{2}))? ?(?P<ap>am|pm) "):
        clock = _clock_of(m.group("h"), m.group("m"), m.group("ap"))
        if clock is None:
            out.notes.append(f"could not read the time {m.group(0).strip()!r}; not filtering by time of day")
        else:
            hours = (clock - 1, clock + 1)
            label.append(m.group(0).strip())
    if day is not None or hours is not None:
        start, end = _day_window(day or today, tz, hours or (0, 24))
        out.time = TimeRange(start, end, " ".join(label))
        return
    if m := cut.take(r" (?:in the |during the |within the )?(?:last|past) (\d+|few|couple of)"
                     r" ?(minute|hour|day|week)s? "):
        n = int(m.group(1)) if m.group(1).isdigit() else 3
        span = timedelta(**{m.group(2) + "s": n})
        out.time = TimeRange((now - span).timestamp(), now.timestamp(), m.group(0).strip())
    elif m := cut.take(r" (\d+|a|an|few) (minute|hour|day|week)s? ago "):
        n = int(m.group(1)) if m.group(1).isdigit() else (3 if m.group(1) == "few" else 1)
        span = timedelta(**{m.group(2) + "s": n})
        centre = now - span
        out.time = TimeRange((centre - span / 2).timestamp(), (centre + span / 2).timestamp(), m.group(0).strip())
    elif m := cut.take(r" (this|last) week "):
        monday = today - timedelta(days=today.weekday() + (7 if m.group(1) == "last" else 0))
        start, _ = _day_window(monday, tz)
        end, _ = _day_window(monday + timedelta(days=7), tz)
        out.time = TimeRange(start, min(end, now.timestamp()), m.group(0).strip())
    elif m := re.search(r" (?:at|around|since|after|before) (\d+ ?(?:am|pm)|\d+ \d+) ", cut.text):
        out.notes.append(f"could not read the time {m.group(0).strip()!r}")


def _resolve_counts(cut: _Cutter, out: Understood) -> None:
    people = "|".join(sorted(_PEOPLE_WORDS))
    if m := cut.take(rf" (\d+|{'|'.join(_NUMBERS)}) (?:other )?({people}) "):
        n = int(m.group(1)) if m.group(1).isdigit() else _NUMBERS[m.group(1)]
        out.people = (n, n)
        out.labels["person"] = LABEL_WORDS["person"]
    elif m := cut.take(rf" (?:a )?({'|'.join(sorted(_MANY))})(?: of)?(?: ({people}))? "):
        # a crowd or an audience is more than a handful; "several", "a group" start at three
        out.people = (2, 99) if m.group(1) in ("few", "couple") else (
            (5, 99) if m.group(1) in ("crowd", "audience") else (3, 99))
        out.labels["person"] = LABEL_WORDS["person"]
        if m.group(1) in ("crowd", "group", "audience"):
            cut.text += f" {m.group(1)} "  # a noun worth matching in descriptions too
    elif cut.take(r" (?:alone|by (?:him|her|them)self) "):
        out.people = (1, 1)


def understand(raw: str, vocab: Vocabulary | None = None, tz: str | None = None,
               now: datetime | None = None) -> Understood:
    """Parse ``raw`` against ``vocab`` in time zone ``tz`` (IANA name; None = this machine's)."""
    vocab = vocab or Vocabulary()
    zone = _tz(tz)
    notes: list[str] = []
    if tz and zone is None:
        notes.append(f"unknown time zone {tz!r}; using this machine's")
    now = (now or datetime.now(zone)).astimezone(zone)
    out = Understood(raw=raw, text="", notes=notes)
    cut = _Cutter(raw)
    _resolve_entities(raw, cut, vocab, out)
    for eid in [e for e in re.findall(r"\b(?:person|object)_\d{3,}\b", raw.lower()) if e not in out.entities]:
        known = {n.entity_id for n in vocab.names if n.name == eid}
        if known:
            out.entities.setdefault(next(iter(known)), []).append(eid)
        else:
            out.notes.append(f"no entity has the id {eid!r}; call entity_list for ids")
    _resolve_time(cut, now, zone, out)
    for pattern, order in _ORDER:
        if cut.take(rf" (?:for )?(?:{pattern}) "):
            out.order = order  # type: ignore[assignment]
            break
    if out.order is None and (m := cut.take(r" (first|last) $")):  # "who spoke in the studio last"
        out.order = m.group(1)  # type: ignore[assignment]
    for camera in sorted(vocab.cameras, key=len, reverse=True):
        phrase = _norm(camera).rstrip()
        if phrase.strip() and cut.take(rf"(?: on| at| from| in)?(?: the)?{re.escape(phrase)}(?: camera| cam)?(?= )"):
            out.cameras.append(camera)
    cut.take(r" (?:on|in front of the) camera(?= )")
    _resolve_counts(cut, out)
    for w in cut.text.split():
        if w in LABEL_WORDS and w not in _PEOPLE_WORDS:
            out.labels.setdefault(w, LABEL_WORDS[w])
    out.text = " ".join(cut.text.split())
    said = [w for w in out.text.split() if w in SPEECH_WORDS]
    read = [w for w in out.text.split() if w in TEXT_WORDS]
    out.intent = "speech" if said and not read else "text" if read and not said else None
    drop = {stem(w) for w in said + read} if out.intent else set()
    out.terms = [t for t in content_words(out.text) if t not in drop]
    known_words = {w for n in vocab.names for w in _norm(n.name).split()}
    unknown = [w for w in re.findall(r"\b[A-Z][a-z]{2,}\b", raw.strip())
               if w.lower() not in known_words and w.lower() not in STOP and w.lower() not in _WEEKDAYS
               and w.lower() not in LABEL_WORDS and w.lower() not in _PERIODS and w.lower() not in _MONTHS
               and not any(w.lower() in _norm(c) for c in vocab.cameras)]
    if unknown:
        names = ", ".join(sorted({n.name for n in vocab.names if not n.name.startswith(("person_", "object_"))})[:8])
        notes.append(f"no person or object is named {' '.join(unknown)!r}" + (f" (known names: {names})" if names else
                     " (no entity has a name yet)") + "; matched the words instead")
    return out
