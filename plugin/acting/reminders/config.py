"""The manifest's ``proactive:`` section: reminders spoken first, from memory, without a rule."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from perception.settings import Strict

__all__ = ["ProactiveConfig"]


class ProactiveConfig(Strict):
    """Proactive reminders: what is in view reaches what memory says is still to be done."""

    enabled: bool = Field(True, description="speak first: remind from memory when what it concerns is in view")
    cameras: dict[str, bool] = Field(default_factory=dict, max_length=256,
                                     description="per-camera switch, e.g. {door: false}; unlisted cameras follow "
                                     "`enabled`")
    min_score: float = Field(0.5, gt=0, le=1, description="gate: lowest score (match × open loop × recency) said")
    min_object_score: float = Field(0.4, ge=0, le=1, description="gate: weakest detection of an object that counts "
                                    "as in view")
    word_weight: float = Field(0.7, ge=0, le=1, description="gate: match weight of a word spoken or read (a person "
                               "or object in view weighs 1); 0 = words never remind")
    max_age_days: float | None = Field(None, gt=0, description="gate: memories older than this are stale; "
                                       "none = any age")
    cooldown_s: float = Field(600.0, ge=0, le=7 * 86400, description="at most one reminder per person or object "
                              "in view per this many seconds (per camera)")
    respeak_after_days: float | None = Field(None, gt=0, description="the same memory may be said again after "
                                             "this long; none = never (new evidence is said)")
    daily_budget: int = Field(20, ge=0, le=10_000, description="most reminders per camera per day")
    severity: Literal["info", "warning", "critical"] = Field("info", description="severity of reminders "
                                                             "(quiet hours hold back all but critical)")
    generator: Literal["auto", "template"] = Field(
        "auto", description="auto = the chat model (`vlm:`, else `qa:`) writes reminders when configured, with "
        "the local template as fallback; template = always the template")

    def on(self, camera: str) -> bool:
        """Whether reminders run on ``camera``."""
        return self.cameras.get(camera, self.enabled)
