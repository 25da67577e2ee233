"""Acting on what memory holds: rules and notifications, their delivery channels, proactive reminders."""
