"""Proactive reminders: speak first, from memory, when what a memory concerns is in view.

``stage.focus`` (what a segment shows) → ``memory.search.focus`` (memories naming it) → :mod:`.gate`
(one open, unsaid, actionable item or silence) → :mod:`.generator` (one short grounded reminder) →
a notification. :class:`~plugin.acting.reminders.stage.ReminderStage` is the post-commit hook the
engine composes; the manifest's ``proactive:`` section is :class:`plugin.manifest_sections.ProactiveConfig`.
"""
