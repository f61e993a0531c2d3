"""What a run does when a group's fine-tuning job fails (``text_rl.on_fine_tune_failure``).

* ``retry`` (default): resubmit up to ``max_fine_tune_retries`` times, waiting
  ``fine_tune_retry_backoff_s`` (doubled each time); then keep the previous model.
* ``keep_previous``: no resubmission; the group keeps its previous model for this iteration.
* ``stop``: end the run with :class:`~nip.errors.FineTuneStoppedError`; ``nip resume``
  resubmits the job.

Every failure is saved in the group's state (``fine_tune_failures``) before anything else, so a
resume never waits on a job known to have failed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from nip.errors import FineTuneJobFailed, FineTuneStoppedError
from nip.parameters import TextRlParameters
from nip.training.groups import PureTextSharedModelGroup
from nip.utils.notices import warn

Settled = Literal["succeeded", "kept_previous"]


@dataclass(frozen=True)
class FailurePolicy:
    """The three failure settings of :class:`~nip.parameters.TextRlParameters`."""

    on_failure: Literal["retry", "keep_previous", "stop"] = "retry"
    max_retries: int = 3
    backoff_s: float = 30.0

    @classmethod
    def from_params(cls, text_rl: TextRlParameters) -> FailurePolicy:
        return cls(
            text_rl.on_fine_tune_failure,
            text_rl.max_fine_tune_retries,
            text_rl.fine_tune_retry_backoff_s,
        )

    def backoff_before(self, resubmission: int) -> float:
        """Seconds to wait before the ``resubmission``-th resubmission (1, 2, ...)."""
        return self.backoff_s * 2 ** (resubmission - 1)


async def settle_fine_tune_job(
    group: PureTextSharedModelGroup,
    iteration: int,
    policy: FailurePolicy,
    *,
    resubmit: Callable[[], Awaitable[object]],
    save: Callable[[], None],
    poll_interval_s: float = 2.0,
) -> Settled:
    """Wait for ``group``'s job of ``iteration`` to succeed, applying ``policy`` on failure;
    returns "succeeded" or "kept_previous". ``resubmit`` submits the dataset again; ``save``
    saves the run's state after each failure and resubmission.

    Raises:
        FineTuneStoppedError: The job failed under ``stop`` (not one that had failed before
            this call: resuming a stopped run resubmits).
    """
    given_back = False  # the backend answered a resubmission with the failed job
    while True:
        job_id = group.state.fine_tune_job_id or ""
        already_failed = group.known_failed(job_id)
        if not already_failed:
            try:
                await group.wait_for_fine_tune_job(poll_interval_s)
                return "succeeded"
            except FineTuneJobFailed as failure:
                group.record_failure(iteration, failure.job_id, failure.error)
                save()
                if policy.on_failure == "stop":
                    raise FineTuneStoppedError(
                        group.group_name, failure.job_id, failure.error
                    ) from None
        failures = group.failures_in(iteration)
        exhausted = policy.on_failure == "retry" and len(failures) > policy.max_retries
        if policy.on_failure == "keep_previous" or exhausted or given_back:
            group.keep_previous_model()
            save()
            tries = f" after {len(failures)} attempts" if len(failures) > 1 else ""
            why = f"; resubmitting gave back the failed job {job_id!r}, not a new one"
            why = why if given_back else ""
            # (A job given back may have failed in an earlier iteration.)
            error = (failures or group.state.fine_tune_failures)[-1]["error"]
            warn(
                f"group {group.group_name!r}: fine-tuning failed{tries} ({error}"
                f"{why}); it keeps its previous model {group.model_name!r} for iteration "
                f"{iteration} (text_rl.on_fine_tune_failure={policy.on_failure!r})"
            )
            return "kept_previous"
        await asyncio.sleep(policy.backoff_before(len(failures)))
        await resubmit()
        save()
        # A backend that answers with the job that failed (not a new attempt) would be
        # waited on for ever: no retry can help then.
        given_back = group.known_failed(group.state.fine_tune_job_id or "")


__all__ = ["FailurePolicy", "settle_fine_tune_job"]
