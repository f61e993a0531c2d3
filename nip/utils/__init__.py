"""Small utilities: seeding, running coroutines from sync code, and :func:`counted`."""


def counted(count: int, noun: str) -> str:
    """``count`` and ``noun``, plural unless it is one: "1 example", "3 examples"."""
    return f"{count} {noun}{'s' * (count != 1)}"
