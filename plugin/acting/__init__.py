"""The acting side: the rules service and notification resolver, delivery channels, MQTT, proactive reminders."""
