"""Identity records: entity-id allocation, gallery slots, identity and voice edits, forgetting and erasure."""
