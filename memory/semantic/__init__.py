"""Semantic memory: fact consolidation (the rules consolidator), chapters, camera context."""
