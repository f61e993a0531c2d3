"""A fine-tuning backend for tests whose jobs fail on purpose: once, then succeed, or always.

Put it behind ``nip serve``'s app (``create_server_app(config, fine_tune_backend=...)``) and
serve that on loopback: the trainer then meets failed jobs through the real HTTP API, as it
would with a GPU server whose training crashed.

Examples:
    >>> backend = ScriptedFineTuneBackend(fail_first=1)
    >>> backend.outcome_of(1), backend.outcome_of(2)
    ('failed', 'succeeded')
"""

from __future__ import annotations

import time

from nip.jobs import FineTuneEvent, FineTuneJob, FineTuneSpec

#: The error a scripted failure reports (what a crashed training process might say).
SCRIPTED_ERROR = "CUDA out of memory (scripted failure)"


class ScriptedFineTuneBackend:
    """Trains nothing; the n-th job created fails if ``n <= fail_first`` (or always).

    Args:
        fail_first: How many jobs fail before jobs start to succeed.
        always_fail: Every job fails (overrides ``fail_first``).
        error: The error failed jobs report.

    Attributes:
        specs: Every job's spec, by job id, in creation order.
    """

    name = "scripted"

    def __init__(self, fail_first: int = 0, *, always_fail: bool = False, error: str = ""):
        self.fail_first = fail_first
        self.always_fail = always_fail
        self.error = error or SCRIPTED_ERROR
        self.specs: dict[str, FineTuneSpec] = {}

    def outcome_of(self, number: int) -> str:
        """ "failed" or "succeeded": how the ``number``-th job (from 1) ends."""
        return "failed" if self.always_fail or number <= self.fail_first else "succeeded"

    async def create_job(self, spec: FineTuneSpec) -> str:
        job_id = f"scripted-{len(self.specs) + 1}"
        self.specs[job_id] = spec
        return job_id

    async def get_job(self, job_id: str) -> FineTuneJob:
        if job_id not in self.specs:
            return FineTuneJob(job_id, "not_found")
        number = list(self.specs).index(job_id) + 1
        if self.outcome_of(number) == "failed":
            return FineTuneJob(job_id, "failed", error=self.error)
        return FineTuneJob(job_id, "succeeded", fine_tuned_model=self.specs[job_id].job_name)

    async def cancel_job(self, job_id: str) -> None:
        return None

    async def list_events(self, job_id: str) -> list[FineTuneEvent]:
        job = await self.get_job(job_id)
        return [FineTuneEvent(time.time(), "info", f"The job {job.status} (scripted).")]

    def __repr__(self) -> str:
        return (
            f"ScriptedFineTuneBackend(fail_first={self.fail_first}, always_fail={self.always_fail})"
        )


__all__ = ["SCRIPTED_ERROR", "ScriptedFineTuneBackend"]
