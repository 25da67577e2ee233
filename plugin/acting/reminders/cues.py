"""Reading a memory's sentences: is something still to be done (an open loop), or is it done?

Deterministic and local. A memory is split into clauses; a clause is **open** when it carries a
cue of something to act on — a promise ("promised to", "I'll bring"), an obligation ("needs",
"has to", "must", "owes", "is due"), a plan with an action ("plans to return", "going to buy"), a
request ("can you feed"), an imperative ("Take the cup back"), a warning ("don't", "avoid",
"allergic", "broken", "ran out") — and **done** when it reports the loop closed ("returned",
"already bought", "no longer needs"). A clause with neither is a mere mention ("Kit watched a
match"): never a reminder.

The words a clause is about (its topic: "charger" in "Kit promised to bring back the charger")
decide whether a later "done" clause closes an earlier open one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

__all__ = ["ACTION_VERBS", "COMMON", "VERB_WORDS", "Clause", "clauses", "topic_words"]

#: verbs (and phrasal verbs) of something to do, base forms; a modal, promise or plan cue must lead to
#: one of them. Verbs that mostly tell of plans with nothing for anyone to act on (visit, meet, turn,
#: finish, wear, get) are left out.
ACTION_VERBS = (
    "bring", "buy", "take", "return", "give", "avoid", "fix", "charge", "recharge", "feed", "water", "pick up",
    "drop off", "pay", "call", "phone", "ring", "clean", "refill", "replace", "repair", "wash", "send", "post", "mail",
    "book", "renew", "cancel", "check", "lock", "unlock", "unplug", "plug in", "borrow", "lend", "collect", "deliver",
    "walk the", "bathe", "brush", "groom", "vaccinate", "restock", "order", "grab", "fetch", "sign", "prepare",
    "bake", "cook", "empty", "throw away", "throw out", "recycle", "switch off", "switch on", "turn off", "turn on",
    "pack", "remind", "store", "hide", "service", "top up", "install", "update", "swap", "refund", "sell", "ship",
    "hand in", "hand over", "hand back", "remove", "mend", "sew", "iron", "fill", "inflate", "pump", "tidy",
    "register", "apply", "schedule", "confirm", "reply", "settle", "repay", "reimburse", "vacuum", "mow", "trim",
    "medicate", "dose", "defrost", "look after", "take care", "keep away", "keep the", "put away", "put back",
)
_ACTION = "(?:" + "|".join(v.replace(" ", r"\s+") for v in ACTION_VERBS) + ")"
_ING = {"bring": "bringing", "buy": "buying", "take": "taking", "return": "returning", "give": "giving",
        "fix": "fixing", "pay": "paying", "pick up": "picking up", "drop off": "dropping off", "lend": "lending",
        "collect": "collecting", "deliver": "delivering", "send": "sending", "repair": "repairing",
        "replace": "replacing", "book": "booking", "order": "ordering", "bake": "baking", "cook": "cooking"}
#: a progressive with a time ahead: "Kit is bringing the cake on Saturday"
_PLANNED = re.compile(r"\b(?:is|are|am|'s|'re|'m)\s+(?:\w+\s+)?(?:" + "|".join(v.replace(" ", r"\s+") for v in _ING.values())
                      + r")\b.*\b(?:tomorrow|tonight|later|soon|next|on (?:monday|tuesday|wednesday|thursday|"
                      r"friday|saturday|sunday)|this (?:week|weekend|evening|afternoon|morning)|by (?:friday|monday|"
                      r"the end))\b")

#: a modal, promise, plan or request followed (within three words) by an action verb
_LEADS_TO_ACTION = re.compile(
    r"\b(?:will|'ll|shall|would|'d|must|should|ought to|has to|have to|needs? to|need to|got to|gotta|"
    r"going to|gonna|plans? to|planning to|planned to|intends? to|intended to|wants? to|"
    r"promised to|promises to|agreed to|agrees to|offered to|offers to|vowed to|swore to|committed to|"
    r"supposed to|expected to|asked (?:\w+ )?to|told (?:\w+ )?to|reminded (?:\w+ )?to|remember to|"
    r"don't forget to|do not forget to|not forget to|make sure to|make sure you|can you|could you|"
    r"would you|please|it's time to|time to|is to|are to|needs? someone to)"
    rf"\s+(?:\w+\s+){{0,3}}?{_ACTION}\b")
#: cues that are open loops by themselves (states, obligations, warnings)
_OPEN_ALONE = re.compile(
    r"\b(?:promised|promises|promise|swore|vowed|owes?|owed|is due|are due|due (?:back|on|by|today|tomorrow)|"
    r"overdue|needs?|must(?! have|'ve)|mustn't|must not|should not|shouldn't|don't forget|do not forget|"
    r"remember to|make sure|not allowed|(?:never|don't|do not) (?:let|allow)|never (?:give|leave|feed|put|touch|use)|"
    r"avoid|beware|be careful|careful (?:with|not)|"
    r"watch out|keep (?:it |them |him |her )?away|allergic|allergy|toxic|poisonous|"
    r"out of (?:stock|batter(?:y|ies)|food|milk|ink)|ran out|running (?:low|out)|low on|almost empty|"
    r"is empty|are empty|broken|is leaking|leaks|cracked|flat (?:tyre|tire|battery)|battery is (?:low|dead)|"
    r"batteries (?:are )?(?:low|dead)|expires?|expired|expiring|reminder|remind me|"
    r"to-do|todo|on loan|lent|borrowed|(?:took|taken|kept|keeps|grabbed|packed|has|have) (?:your|my|our) "
    r"(?!advice|word|time|sense|breath|seat|turn|side|place|point|attention|number|photo|picture|hand)\w+|"
    r"(?:said|says|told(?: \w+)?|asked(?: \w+)?) not to|"
    r"asked (?:if|whether|for)|wants? (?:\w+ ){0,3}back|needs? (?:\w+ ){0,3}back|"
    r"still (?:has|have|owes?|hasn't|haven't|needs?)|(?:has to|have to|needs? to|must|should|ought to) go|"
    r"forgot (?:his|her|their|the|a|an|my|your)|left (?:his|her|their|my|your) \w+(?: \w+)? (?:here|behind|at|in|with))\b")
#: a completion denied: "hasn't returned the drill yet" is still open
_NOT_DONE = re.compile(r"\b(?:hasn't|haven't|hadn't|has not|have not|didn't|did not|never|not yet|yet to|still not)\s+"
                       r"(?:\w+\s+){0,2}?(?:been\s+)?(?:returned|given|brought|paid|fixed|repaired|replaced|charged|fed|"
                       r"bought|picked|collected|sent|cleaned|return|give|bring|pay|fix|repair|replace|charge|feed|buy|"
                       r"pick|collect|send|clean)\b|\bnot yet\b|\byet to\b")
#: verbs that make an imperative at the start of a clause, beside the action verbs ("Ask him for it back")
IMPERATIVE_VERBS = ("ask", "tell", "get", "put", "wrap", "show", "leave", "move", "keep", "change", "make", "find",
                    "write", "text", "email", "invite", "thank", "congratulate", "wish", "give")
#: a clause that opens with an action verb (an imperative: "Take the cup back", "Please feed the cat")
_IMPERATIVE = re.compile(rf"^(?:(?:ok|okay|oh|and|so|but|also|then)\W+)?(?:please\s+)?(?:don't\s+|do not\s+|"
                         rf"never\s+)?(?:{_ACTION}|{'|'.join(IMPERATIVE_VERBS)})\b")
#: the loop is closed: done, or no longer needed
_DONE = re.compile(
    r"\b(?:already|no longer|not any ?more|doesn't need|don't need|didn't need|no need|never mind|"
    r"returned|gave (?:\w+ )?back|given back|brought (?:\w+ )?back|paid (?:\w+ )?back|repaid|paid|fixed|"
    r"repaired|mended|replaced|recharged|fully charged|bought|purchased|picked up|dropped off|cleaned|"
    r"refilled|restocked|collected|cancelled|canceled|renewed|delivered|took care|taken care|sorted out|"
    r"dealt with|handled|finished|completed|done|resolved|settled|got (?:it|them) back|has (?:been )?fed|"
    r"was fed|were fed|fed (?:the|her|his|it|them)|watered|walked (?:the|her|his)|vaccinated|called off|"
    r"sent (?:it|them|the)|posted|mailed|booked|locked (?:the|it|up)|unplugged)\b")
#: the need is gone ("no need to buy milk", "Kit won't bring it")
_NEGATED = re.compile(r"\b(?:don't|doesn't|didn't|do not|does not|no) need\b|\bneeds? no\b|\bno longer\b|\bnever mind\b|"
                      r"\bnot (?:going|planning|supposed) to\b|\bwon't\b|\bwill not\b|\bnot any ?more\b")
_SPLIT = re.compile(r"(?<=[.!?;])\s+|\s*[;:]\s+|,\s+(?:and|but|so|then|while|although|though)\s+|"
                    r"\s+(?:but|and then|although|though|whereas)\s+|\s+and\s+(?=(?:he|she|they|i|we|you)\b)|"
                    r"\s*\(\s*|\s*\)\s*|\s+-+\s+|\s+\u2014\s+", re.IGNORECASE)
#: words that never make a topic (function words, cue words, time words)
_NOT_TOPIC = frozenset("""
a an the and or but so then to of in on at by for with from into onto over under up down out off about as is
are was were be been being am it its it's this that these those there here he she they him her them his hers
their theirs i me my mine we us our you your yours who whom whose which what when where why how not no yes
do does did done doing have has had having will would shall should must can could may might ought need needs
needed to-do todo please also just still again already soon later today tonight tomorrow yesterday morning
evening afternoon night week weekend month year next last before after time times day days monday tuesday
wednesday thursday friday saturday sunday promised promise promises said says say told tell asked ask agreed
going gonna plan plans planned want wants wanted remember forget don't doesn't didn't won't can't isn't
aren't wasn't weren't ll 'll some any more most very really back new old one two three own sure make
let lets get got give gave take took bring brought buy bought return returned
""".split())


#: words that are capitalised only at the start of a sentence or as days and months (not names)
COMMON = _NOT_TOPIC | frozenset("""
january february march april may june july august september october november december note remember
""".split())


@dataclass(frozen=True)
class Clause:
    """One clause of a memory: its words as written, whether it is an open loop or closes one."""

    text: str
    open: bool
    done: bool
    strength: float  # how clearly it asks for action: 1.0 promise/request/imperative, 0.9 a state or need


@lru_cache(maxsize=65536)
def clauses(text: str) -> tuple[Clause, ...]:
    """The clauses of ``text`` with their open/done reading.

    A modal, promise or plan leading to an action verb makes a clause open whatever else it says;
    otherwise a completion ("returned", "already", "no longer needs") makes it done, and a cue that
    opens a loop by itself (a need, a warning, an imperative) makes it open.
    """
    out = []
    for part in _SPLIT.split(text.replace("\u2019", "'")):
        part = (part or "").strip(" \"'\u201c\u201d,.-")
        if not part:
            continue
        lower = part.lower()
        negated = _NEGATED.search(lower) is not None
        pending = _NOT_DONE.search(lower) is not None
        led = not negated and (pending or _LEADS_TO_ACTION.search(lower) is not None or _PLANNED.search(lower) is not None)
        closed = negated or (not led and _DONE.search(lower) is not None)
        imperative = _IMPERATIVE.search(lower) is not None
        alone = _OPEN_ALONE.search(lower) is not None
        opened = led or (not closed and (imperative or alone))
        out.append(Clause(text=part, open=opened, done=closed,
                          strength=1.0 if led or imperative else 0.9 if opened else 0.0))
    return tuple(out)


@lru_cache(maxsize=65536)
def topic_words(clause: str) -> frozenset[str]:
    """Content words of a clause as written (lightly stemmed): what it is about.

    Capitalised words (names) are left out: "Kit returned the book" does not close "Kit promised to
    bring back the charger".
    """
    out = set()
    for w in re.findall(r"[A-Za-z][A-Za-z'-]{2,}", clause.replace("\u2019", "'")):
        w = w.strip("'-").split("'")[0]  # "he'd" → he, "charger's" → charger
        if not w or w[0].isupper():
            continue
        w = w.lower()
        if w in _NOT_TOPIC or w in VERB_WORDS or len(w) < 3:
            continue
        out.add(_stem(w))
    return frozenset(out)


VERB_WORDS = frozenset(w for v in ACTION_VERBS for w in v.split() if w not in ("the",)) | frozenset(_ING.values())


def _stem(w: str) -> str:
    if w.endswith("ies") and len(w) > 4:
        return w[:-3] + "y"
    if w.endswith(("ches", "shes", "xes", "sses")):
        return w[:-2]
    if w.endswith("s") and not w.endswith(("ss", "us", "is")) and len(w) > 3:
        return w[:-1]
    return w
