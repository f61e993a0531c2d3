"""A fine-tuning backend that trains nothing: every job succeeds at once.

Used with ``use_dummy_api=True``. It keeps no state: a job id encodes the new model's name,
so a resumed run finds its jobs again.
"""

from __future__ import annotations

import time

from nip.jobs._types import FineTuneEvent, FineTuneJob, FineTuneSpec

_PREFIX = "dummy-ft:"


class DummyFineTuneBackend:
    """Every job succeeds immediately; the new model is ``<base>:ft-<job name>``."""

    name = "dummy"

    async def create_job(self, spec: FineTuneSpec) -> str:
        if not spec.examples:
            from nip.errors import FineTuneError

            raise FineTuneError("a fine-tuning job needs at least one example")
        suffix = spec.job_name or "job"
        return f"{_PREFIX}{spec.base_model.split(':ft-')[0]}:ft-{suffix}"

    async def get_job(self, job_id: str) -> FineTuneJob:
        if not job_id.startswith(_PREFIX):
            return FineTuneJob(id=job_id, status="not_found")
        return FineTuneJob(id=job_id, status="succeeded", fine_tuned_model=job_id[len(_PREFIX) :])

    async def cancel_job(self, job_id: str) -> None:
        return None

    async def list_events(self, job_id: str) -> list[FineTuneEvent]:
        return [FineTuneEvent(time.time(), "info", "The job succeeded (dummy backend).")]

    def __repr__(self) -> str:
        return "DummyFineTuneBackend()"
