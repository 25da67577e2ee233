"""The local rule compiler: a rule written in plain words → structured conditions, where it can.

Without a VLM, only structured conditions can fire (``perception/rules/matcher.py``). The compiler
reads the text a user gives ``rule_add`` (or the manifest's ``rules:``) and recognises, with
deterministic patterns and the vocabulary it is given (known people, cameras, detector labels):

* **people**: "someone", "anyone", "a person", "people", "a visitor" → anyone (``entities: ["*"]``);
  a known entity's name or alias → that entity; "a stranger", "an unknown person", "someone I
  don't know" → only people without a name (``unknown_people``);
* **objects** the active detector knows ("a dog", "the car", "a package" → ``box``); an object
  word it does not know (e.g. "sofa" for the bundled detector) is reported as needing a VLM;
* **spoken words**: "when someone says 'dinner is ready'" → ``said``;
* **text read on screen**: "when the screen shows 'error'", "a sign reading 'open'" → ``text_read``;
* **times of day**: "at night" (22:00–06:00), "in the morning" (06:00–12:00), "in the afternoon"
  (12:00–18:00), "in the evening" (18:00–22:00), "during the day" (07:00–19:00),
  "between 10 pm and 6 am", "after 22:00", "before 7 am";
* **cameras**: a known camera id mentioned in the text ("on the porch camera");
* **absence**: "if nobody is there for 10 minutes", "if Alice hasn't been seen for 2 hours".

What remains (a relation like "gets on", an action, an object the detector does not know) is
returned in ``needs_vlm``. The caller decides: with a VLM the rule text goes to the model; without
one, a rule of which nothing was understood is refused with a way to rephrase it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from memory.procedural import RuleConditions, TimeWindow

__all__ = ["CompiledRule", "OBJECT_WORDS", "compile_rule", "rephrase_help"]

#: words people use for things → the detector label they mean (applied only when the detector has that label)
OBJECT_WORDS: dict[str, str] = {
    "dog": "dog", "dogs": "dog", "puppy": "dog", "cat": "cat", "cats": "cat", "kitten": "cat",
    "car": "car", "cars": "car", "vehicle": "vehicle", "truck": "truck", "van": "vehicle", "bus": "bus",
    "bike": "bicycle", "bicycle": "bicycle", "motorbike": "motorcycle", "motorcycle": "motorcycle",
    "laptop": "laptop", "chair": "chair", "desk": "desk", "table": "table", "bottle": "bottle", "book": "book",
    "mug": "mug", "cup": "coffee cup", "package": "box", "parcel": "box", "box": "box", "delivery": "box",
    "monitor": "computer monitor", "mouse": "computer mouse", "shoe": "footwear", "shoes": "footwear",
    "boots": "boot", "cow": "cattle", "cows": "cattle", "sofa": "couch", "couch": "couch", "tv": "tv",
    "television": "tv", "backpack": "backpack", "umbrella": "umbrella", "handbag": "handbag", "bag": "handbag",
    "suitcase": "suitcase", "bird": "bird", "horse": "horse", "phone": "cell phone", "keys": "keys",
    "bed": "bed", "plant": "potted plant", "oven": "oven", "sink": "sink", "fridge": "refrigerator",
    "refrigerator": "refrigerator", "clock": "clock", "scissors": "scissors", "knife": "knife",
}

_ANYONE = r"\b(someone|somebody|anyone|anybody|any ?one|a person|people|persons?|a visitor|visitors?|a human|humans?)\b"
_STRANGER = (r"\b(a stranger|strangers?|an? unknown (person|face|visitor)|someone (i|we) (don'?t|do not) know|"
             r"someone new|an unfamiliar (person|face)|unrecognised|unrecognized)\b")
_NOBODY = r"\b(nobody|no one|no-one|noone|no person|no people)\b"
_QUOTED = r"[\"“'‘]([^\"”'’]+)[\"”'’]"
_DURATION = r"(\d+(?:\.\d+)?)\s*(seconds?|secs?|s|minutes?|mins?|m|hours?|hrs?|h|days?|d)\b"
_PARTS_OF_DAY = {
    "at night": ("22:00", "06:00"), "overnight": ("22:00", "06:00"), "in the night": ("22:00", "06:00"),
    "in the morning": ("06:00", "12:00"), "this morning": ("06:00", "12:00"),
    "in the afternoon": ("12:00", "18:00"), "in the evening": ("18:00", "22:00"),
    "during the day": ("07:00", "19:00"), "in the daytime": ("07:00", "19:00"),
}
_LEAD_INS = (r"^(please\s+)?((tell|notify|alert|warn|ping|message|inform) me|let me know|i want to know|"
             r"send (me )?(a )?(notification|alert))\b[\s,]*")
_FILLER = {"when", "whenever", "if", "the", "a", "an", "is", "are", "at", "on", "in", "into", "of", "to", "there",
           "here", "comes", "come", "appears", "appear", "shows", "show", "up", "gets", "get", "enters", "enter",
           "arrives", "arrive", "walks", "walk", "seen", "be", "being", "been", "any", "my", "our", "view",
           "camera", "cam", "and", "or", "front", "back", "someone", "somebody", "anyone", "anybody", "person",
           "people", "visible", "present", "detected", "spotted", "it", "this", "that", "has", "have", "for",
           "with", "by", "me", "let", "know", "tell", "notify", "alert", "please", "frame", "scene", "picture",
           "time", "sees", "see", "goes", "go", "out", "leaves", "leave", "inside", "outside", "near", "around",
           "screen", "sign", "display", "text", "about", "again", "something", "anything", "happens", "whether", "written", "reading", "voice", "hear", "heard", "minutes", "hours"}


@dataclass
class CompiledRule:
    """What the compiler made of a rule's text."""

    conditions: RuleConditions
    #: one line per recognised part: the words and what they became
    understood: list[str] = field(default_factory=list)
    #: words that only a VLM can judge
    needs_vlm: list[str] = field(default_factory=list)
    #: camera ids the text names (the rule's scope)
    cameras: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Everything in the text became a condition."""
        return not self.needs_vlm and not self.conditions.is_empty()


def _hhmm(text: str) -> str | None:
    """``10 pm`` / ``22:00`` / ``7am`` / ``noon`` → ``HH:MM``."""
    t = text.strip().lower().replace(".", "")
    if t in {"noon", "midday"}:
        return "12:00"
    if t == "midnight":
        return "00:00"
    m = re.fullmatch(r"(\d{1,2})(?::(\d{2}))?\s*(am|pm|h)?", t)
    if not m:
        return None
    hour, minute, half = int(m[1]), int(m[2] or 0), m[3]
    if half == "pm" and hour < 12:
        hour += 12
    if half == "am" and hour == 12:
        hour = 0
    if hour > 23 or minute > 59:
        return None
    return f"{hour:02d}:{minute:02d}"


_TIME = r"(\d{1,2}(?::\d{2})?\s*(?:am|pm|h)?|noon|midday|midnight)\b"


def _time_window(text: str) -> tuple[TimeWindow, str] | None:
    m = re.search(rf"\bbetween\s+{_TIME}\s+(?:and|to|-)\s+{_TIME}", text)
    if m and (a := _hhmm(m[1])) and (b := _hhmm(m[2])):
        return TimeWindow(start=a, end=b), m[0]
    m = re.search(rf"\bfrom\s+{_TIME}\s+(?:to|until|till)\s+{_TIME}", text)
    if m and (a := _hhmm(m[1])) and (b := _hhmm(m[2])):
        return TimeWindow(start=a, end=b), m[0]
    m = re.search(rf"\bafter\s+{_TIME}(?!\s*(?:minutes?|mins?|hours?|seconds?))", text)
    if m and (a := _hhmm(m[1])):
        return TimeWindow(start=a, end="06:00" if a >= "18:00" else "23:59"), m[0]
    m = re.search(rf"\bbefore\s+{_TIME}(?!\s*(?:minutes?|mins?|hours?|seconds?))", text)
    if m and (b := _hhmm(m[1])):
        return TimeWindow(start="00:00", end=b), m[0]
    for phrase, (a, b) in _PARTS_OF_DAY.items():
        if phrase in text:
            return TimeWindow(start=a, end=b), phrase
    return None


def _minutes(amount: str, unit: str) -> float:
    """``10``, ``minutes`` → 10.0 (seconds, minutes, hours and days by their first letter)."""
    return float(amount) * {"s": 1 / 60, "m": 1.0, "h": 60.0, "d": 1440.0}[unit[0]]


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", text)


def compile_rule(text: str, names: Iterable[str] = (), cameras: Iterable[str] = (),
                 labels: Iterable[str] = ()) -> CompiledRule:
    """Compile ``text`` against the known ``names`` (entity names and aliases), ``cameras`` and detector ``labels``."""
    original = " ".join(text.split())
    low = re.sub(_LEAD_INS, "", original.lower()).strip(" .!?")
    used: list[str] = []  # matched phrases, removed before looking for leftovers
    understood: list[str] = []
    needs: list[str] = []
    cond: dict[str, object] = {}
    camera_ids: list[str] = []

    quoted = re.findall(_QUOTED, original)
    said = re.search(rf"\b(says?|said|saying|mentions?|talks? about|speaks? about|asks? for|shouts?)\s+{_QUOTED}",
                     original, flags=re.IGNORECASE)
    shown = re.search(rf"\b(shows?|displays?|reads?|reading|written|writes?|text|sign|screen says)\s+{_QUOTED}",
                      original, flags=re.IGNORECASE)
    if said:
        cond["said"] = [said[2].strip().lower()]
        understood.append(f"'{said[0]}' → speech containing \"{said[2].strip()}\"")
        used.append(said[0].lower())
    if shown:
        cond["text_read"] = [shown[2].strip().lower()]
        understood.append(f"'{shown[0]}' → text read on screen containing \"{shown[2].strip()}\"")
        used.append(shown[0].lower())
    if not said and not shown and not quoted:
        m = re.search(r"\b(says?|said|saying|mentions?)\s+(.+)$", low)
        if m:
            cond["said"] = [m[2].strip(" '\"")]
            understood.append(f"'{m[0]}' → speech containing \"{m[2].strip()}\"")
            used.append(m[0])
    rest = low
    for phrase in used:
        rest = rest.replace(phrase.lower(), " ")

    for camera in sorted(set(cameras), key=len, reverse=True):
        spoken = camera.lower().replace("_", " ").replace("-", " ")
        if spoken and re.search(rf"\b{re.escape(spoken)}\b", rest):
            camera_ids.append(camera)
            understood.append(f"'{spoken}' → camera {camera}")
            rest = re.sub(rf"\b{re.escape(spoken)}\b", " ", rest)

    absence = re.search(rf"({_NOBODY}|\b(hasn'?t|has not|isn'?t|is not|wasn'?t|was not|haven'?t|have not|not)\b)"
                        rf".*?\b(for|after|in|within|longer than|more than)\s+{_DURATION}", rest)
    if absence:
        rest = rest.replace(absence[0], " ")
    window = _time_window(rest)
    if window is not None:
        tw, phrase = window
        cond["time_window"] = tw
        understood.append(f"'{phrase}' → between {tw.start} and {tw.end} local time")
        rest = rest.replace(phrase, " ")

    people: list[str] = []
    for name in sorted({n for n in names if n.strip()}, key=len, reverse=True):
        if re.search(rf"\b{re.escape(name.lower())}\b", rest):
            people.append(name)
            understood.append(f"'{name}' → the known person {name}")
            rest = re.sub(rf"\b{re.escape(name.lower())}\b", " ", rest)

    if absence:
        minutes = _minutes(absence[absence.lastindex - 1], absence[absence.lastindex])  # type: ignore[operator]
        cond["absent_minutes"] = max(minutes, 1 / 60)
        who = people or ["*"]
        cond["entities"] = who
        understood.append(f"'{absence[0].strip()}' → nobody{'' if who == ['*'] else ' of ' + ', '.join(who)} "
                          f"seen for {minutes:g} minute(s)")
    elif re.search(_STRANGER, rest):
        m = re.search(_STRANGER, rest)
        assert m is not None
        cond["entities"] = ["*"]
        cond["unknown_people"] = True
        understood.append(f"'{m[0]}' → a person without a name (not a known entity)")
        rest = rest.replace(m[0], " ")
    elif people:
        cond["entities"] = people
    elif cond.get("said") and re.search(r"\b(someone|somebody|anyone|anybody)\b", rest):
        rest = re.sub(_ANYONE, " ", rest)  # the speaker: a voice is enough, no face needed
    elif m := re.search(_ANYONE, rest):
        cond["entities"] = ["*"]
        understood.append(f"'{m[0]}' → anyone (a face or a person detected)")
        rest = re.sub(_ANYONE, " ", rest)

    known = {label.lower() for label in labels}
    found: list[str] = []
    for word in _words(rest):
        label = OBJECT_WORDS.get(word)
        if label is None:
            continue
        # the detector's own class name wins ("cup" is a COCO class, "coffee cup" the SSD's)
        label = next((c for c in (word, word.rstrip("s")) if c in known), label)
        if label == "person":
            continue
        if label in known:
            if label not in found:
                found.append(label)
                understood.append(f"'{word}' → object class {label}")
        else:
            needs.append(f"'{word}' (the object detector has no '{label}' class)")
        rest = re.sub(rf"\b{re.escape(word)}\b", " ", rest)
    if found:
        cond["objects"] = found
        if len(found) > 1:
            cond["objects_mode"] = "all"

    leftover = [w for w in _words(rest) if w not in _FILLER and not w.isdigit() and len(w) > 2]
    if leftover:
        needs.append("'" + " ".join(leftover) + "'")
    conditions = RuleConditions.model_validate({**cond, "understood": understood, "needs_vlm": needs})
    return CompiledRule(conditions=conditions, understood=understood, needs_vlm=needs, cameras=camera_ids)


def rephrase_help(labels: Iterable[str] = ()) -> str:
    """How to phrase a rule the local compiler understands (for error messages and the README)."""
    known = {label for label in labels if label != "???"}
    common = [c for c in ("dog", "cat", "car", "bicycle", "box", "couch", "laptop", "chair") if c in known]
    shown = ", ".join([*common, *sorted(known - set(common))][:10]) or "the detector's classes"
    return ("rephrase it with parts the local compiler understands: people ('someone', 'anyone', a known "
            "person's name, 'a stranger'), objects the detector knows (" + shown + "), spoken words "
            "(\"when someone says 'dinner'\"), text on screen (\"when the screen shows 'error'\"), times ('at "
            "night', 'between 22:00 and 06:00'), camera names, absence ('if nobody is seen for 10 minutes') — "
            "or configure a `vlm:` in the manifest so the model judges the text")
