"""Which requests the test server makes fail, and how: a fault plan answers "what happens to
the k-th chat request?" from a schedule and/or seeded probabilities, from the plan and k only.

Examples:
    >>> FaultPlan.first("rate_limit", 2).fault_for(2)
    'rate_limit'
    >>> FaultPlan(schedule={3: "drop"}).fault_for(1) is None
    True
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from nip.errors import InvalidParameterError
from nip.utils.html import fields_table

FaultKind = Literal[
    "rate_limit",
    "server_error",
    "timeout",
    "drop",
    "malformed",
    "content_filter",
    "length",
    "insufficient_credits",
]
"""What an injected fault does: 429 with ``Retry-After``, 500, a held request (``timeout``,
until the client hangs up or ``timeout_hold_s``), headers then a closed connection (``drop``),
a truncated JSON body, completions filtered or cut short, 402."""

FAULT_KINDS: tuple[FaultKind, ...] = get_args(FaultKind)

#: Faults a client is expected to retry through (the kinds ``--fault-rate`` spreads over).
TRANSIENT_FAULTS: tuple[FaultKind, ...] = ("rate_limit", "server_error", "drop", "malformed")

#: The HTTP status of each kind that is an error response (408 only when in the body).
ERROR_CODES: dict[FaultKind, int] = {
    "rate_limit": 429,
    "server_error": 500,
    "timeout": 408,
    "insufficient_credits": 402,
}

#: A truncated JSON body, what the ``malformed`` fault sends.
MALFORMED_BODY = b'{"id": "chatcmpl-broken", "choices": [{"ind'


@dataclass(frozen=True)
class FaultPlan:
    """Which chat requests (numbered from 1 since start or reset) the test server makes fail.

    Attributes:
        schedule: ``{request number: kind}``; a scheduled request always gets that fault.
        probabilities: ``{kind: p}`` (sum at most 1) for any other request, drawn from ``seed``.
        retry_after_s: The ``Retry-After`` sent with a 429.
        timeout_hold_s: The longest a ``timeout`` fault holds a request.
        in_body_errors: Report error faults as OpenRouter does: HTTP 200 with an ``error``
            object (``code`` 429/500/408/402) in the body.
    """

    schedule: Mapping[int, FaultKind] = field(default_factory=dict)
    probabilities: Mapping[FaultKind, float] = field(default_factory=dict)
    seed: int = 0
    retry_after_s: float = 1.0
    timeout_hold_s: float = 30.0
    in_body_errors: bool = False

    def __post_init__(self) -> None:
        allowed = ", ".join(FAULT_KINDS)
        for number, kind in self.schedule.items():
            if kind not in FAULT_KINDS:
                raise InvalidParameterError(f"schedule[{number}]", kind, allowed)
            if number < 1:
                raise InvalidParameterError("schedule", number, "request numbers from 1")
        for kind, p in self.probabilities.items():
            if kind not in FAULT_KINDS:
                raise InvalidParameterError("probabilities", kind, allowed)
            if not 0.0 <= p <= 1.0:
                raise InvalidParameterError(f"probabilities[{kind}]", p, "0 <= p <= 1")
        total = sum(self.probabilities.values())
        if total > 1.0 + 1e-9:
            raise InvalidParameterError("probabilities", total, "a total of at most 1")
        if self.retry_after_s < 0 or self.timeout_hold_s < 0:
            raise InvalidParameterError(
                "retry_after_s/timeout_hold_s", (self.retry_after_s, self.timeout_hold_s), ">= 0"
            )

    @classmethod
    def first(cls, kind: FaultKind, count: int = 1, **options: Any) -> FaultPlan:
        """The first ``count`` requests fail with ``kind`` (``options``: other fields)."""
        return cls(schedule=dict.fromkeys(range(1, count + 1), kind), **options)

    @classmethod
    def always(cls, kind: FaultKind, **options: Any) -> FaultPlan:
        """Every request fails with ``kind`` (``options`` as in :meth:`first`)."""
        return cls(probabilities={kind: 1.0}, **options)

    @classmethod
    def random(
        cls,
        rate: float,
        kinds: tuple[FaultKind, ...] = TRANSIENT_FAULTS,
        seed: int = 0,
        **options: Any,
    ) -> FaultPlan:
        """A fraction ``rate`` of requests fail, spread evenly over ``kinds`` (``options`` as
        in :meth:`first`)."""
        return cls(probabilities=dict.fromkeys(kinds, rate / len(kinds)), seed=seed, **options)

    def fault_for(self, request_number: int) -> FaultKind | None:
        """The fault of request ``request_number`` (1-based), or None if it succeeds."""
        if request_number in self.schedule:
            return self.schedule[request_number]
        if not self.probabilities:
            return None
        draw = random.Random(f"{self.seed}:{request_number}").random()
        for kind, p in self.probabilities.items():
            if draw < p:
                return kind
            draw -= p
        return None

    _repr_html_ = fields_table
