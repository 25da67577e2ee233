"""Words that name what is in view: detector classes (with plurals and a few safe synonyms) and people.

Reminders are retrieved by what a camera sees, not by a text query, so a memory must name the thing
in view *exactly*: a cup in view reaches "bring the cup back", never "buy coffee"; a cat never
reaches the dog's notes. Names are matched as written (capitalised), so the name "Kit" is not the
"first-aid kit".
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from functools import lru_cache

__all__ = ["OBJECT_WORDS", "label_pattern", "mentions_label", "mentions_name", "name_pattern", "words_of"]

#: COCO-80 class → the words that name it in plain text (singular and plural); only synonyms that
#: cannot name another class ("phone" is a cell phone, but "table" could be any table: only "dining table")
OBJECT_WORDS: dict[str, tuple[str, ...]] = {
    "bicycle": ("bicycle", "bicycles", "bike", "bikes"), "car": ("car", "cars"),
    "motorcycle": ("motorcycle", "motorcycles", "motorbike", "motorbikes"), "airplane": ("airplane", "airplanes",
                                                                                          "aeroplane", "plane"),
    "bus": ("bus", "buses"), "train": ("train", "trains"), "truck": ("truck", "trucks", "lorry"),
    "boat": ("boat", "boats"), "traffic light": ("traffic light", "traffic lights"),
    "fire hydrant": ("fire hydrant", "hydrant"), "stop sign": ("stop sign",), "parking meter": ("parking meter",),
    "bench": ("bench", "benches"), "bird": ("bird", "birds", "parrot", "budgie"), "cat": ("cat", "cats", "kitten"),
    "dog": ("dog", "dogs", "puppy"), "horse": ("horse", "horses", "pony"), "sheep": ("sheep",),
    "cow": ("cow", "cows"), "elephant": ("elephant", "elephants"), "bear": ("bear", "bears"),
    "zebra": ("zebra", "zebras"), "giraffe": ("giraffe", "giraffes"), "backpack": ("backpack", "backpacks",
                                                                                   "rucksack"),
    "umbrella": ("umbrella", "umbrellas"), "handbag": ("handbag", "handbags", "purse"), "tie": ("tie", "ties",
                                                                                                "necktie"),
    "suitcase": ("suitcase", "suitcases"), "frisbee": ("frisbee",), "skis": ("skis", "ski"),
    "snowboard": ("snowboard",), "sports ball": ("ball", "football", "soccer ball", "basketball"),
    "kite": ("kite", "kites"), "baseball bat": ("baseball bat",), "baseball glove": ("baseball glove",),
    "skateboard": ("skateboard",), "surfboard": ("surfboard",), "tennis racket": ("tennis racket", "racket"),
    "bottle": ("bottle", "bottles"), "wine glass": ("wine glass", "wine glasses"), "cup": ("cup", "cups", "mug",
                                                                                          "mugs"),
    "fork": ("fork", "forks"), "knife": ("knife", "knives"), "spoon": ("spoon", "spoons"),
    "bowl": ("bowl", "bowls"), "banana": ("banana", "bananas"), "apple": ("apple", "apples"),
    "sandwich": ("sandwich", "sandwiches"), "orange": ("orange", "oranges"), "broccoli": ("broccoli",),
    "carrot": ("carrot", "carrots"), "hot dog": ("hot dog", "hot dogs"), "pizza": ("pizza", "pizzas"),
    "donut": ("donut", "donuts", "doughnut", "doughnuts"), "cake": ("cake", "cakes"),
    "chair": ("chair", "chairs"), "couch": ("couch", "couches", "sofa", "sofas"),
    "potted plant": ("potted plant", "plant", "plants", "houseplant"), "bed": ("bed", "beds"),
    "dining table": ("dining table", "kitchen table"), "toilet": ("toilet", "toilets"),
    "tv": ("tv", "television", "telly"), "laptop": ("laptop", "laptops"), "mouse": ("computer mouse", "mouse"),
    "remote": ("remote", "remote control", "remotes"), "keyboard": ("keyboard", "keyboards"),
    "cell phone": ("cell phone", "phone", "phones", "mobile phone", "smartphone", "mobile"),
    "microwave": ("microwave",), "oven": ("oven",), "toaster": ("toaster",), "sink": ("sink",),
    "refrigerator": ("refrigerator", "fridge", "freezer"), "book": ("book", "books"), "clock": ("clock", "clocks"),
    "vase": ("vase", "vases"), "scissors": ("scissors",), "teddy bear": ("teddy bear", "teddy"),
    "hair drier": ("hair drier", "hair dryer", "hairdryer"), "toothbrush": ("toothbrush", "toothbrushes"),
}

#: classes whose words are also common verbs or adjectives: they count only after a determiner
#: ("the remote", "her tie"), so "bear in mind" or "remote work" name nothing
_NOUN_ONLY = frozenset({"tie", "bear", "train", "sink", "remote", "orange", "kite", "mouse", "bench", "bed",
                        "mobile", "plant", "plants"})
_DETERMINER = r"(?:the|a|an|my|your|his|her|our|their|its|this|that|these|those|some|new|old|\w+'s)\s+(?:\w+\s+)?"


@lru_cache(maxsize=256)
def label_pattern(label: str) -> re.Pattern[str]:
    """A case-insensitive pattern for the words naming ``label`` (the label itself when unknown)."""
    words = OBJECT_WORDS.get(label.lower(), (label.lower(), label.lower() + "s"))
    parts = []
    for word in sorted(words, key=len, reverse=True):
        body = r"\s+".join(re.escape(w) for w in word.split())
        parts.append(rf"\b{_DETERMINER}{body}\b" if word in _NOUN_ONLY else rf"\b{body}\b")
    return re.compile("|".join(parts), re.IGNORECASE)


def mentions_label(text: str, label: str) -> bool:
    """Whether ``text`` names the detector class ``label``."""
    return label_pattern(label).search(text) is not None


@lru_cache(maxsize=1024)
def name_pattern(name: str) -> re.Pattern[str] | None:
    """The pattern of a person's name as written in text (``Kit``, ``Kit's``); None for an unusable name.

    A capitalised name must be written capitalised; a name of more than one word also matches its
    first and last words of three letters or more ("Lin-Manuel Miranda" → "Lin-Manuel", "Miranda").
    """
    name = " ".join(name.split())
    if len(name) < 2:
        return None
    variants = {name}
    parts = name.split(" ")
    for part in (parts[0], parts[-1]) if len(parts) > 1 else ():
        if len(part) >= 3 and part[:1].isupper():
            variants.add(part)
    flags = 0 if name[:1].isupper() else re.IGNORECASE
    body = "|".join(re.escape(v) for v in sorted(variants, key=len, reverse=True))
    return re.compile(rf"(?<![\w-])(?:{body})(?![\w-])", flags)


def mentions_name(text: str, names: Iterable[str]) -> bool:
    """Whether ``text`` names anyone in ``names``."""
    for name in names:
        pattern = name_pattern(name)
        if pattern is not None and pattern.search(text):
            return True
    return False


_WORD = re.compile(r"[a-z][a-z'-]+")


def words_of(text: str, stop: Sequence[str] = ()) -> list[str]:
    """Lower-case words of ``text`` (letters, apostrophes, hyphens), without ``stop`` words."""
    skip = set(stop)
    return [w.strip("'-") for w in _WORD.findall(text.lower()) if w.strip("'-") not in skip]
