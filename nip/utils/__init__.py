"""Small utilities: seeding and running coroutines from sync code."""
