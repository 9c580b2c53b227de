"""The scheduler: one pure cycle over an immutable snapshot, with plugins by name."""
