"""Proactive reminders: speak first, from memory, when what a memory concerns is in view.

``focus`` (what a segment shows) → ``memory.focus`` (memories naming it) → :mod:`.gate` (one open,
unsaid, actionable item or silence) → :mod:`.generator` (one short grounded reminder) → a
notification. :class:`~plugin.acting.reminders.stage.ReminderStage` is the post-commit hook the
engine composes.
"""

from .config import ProactiveConfig
from .stage import PROACTIVE_RULE_ID, ReminderStage

__all__ = ["PROACTIVE_RULE_ID", "ProactiveConfig", "ReminderStage"]
