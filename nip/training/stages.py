"""The fine-tuning stages of the training loop: submit each group's job as the run plan says,
wait for the jobs (a failed one is handled by ``text_rl.on_fine_tune_failure``), switch the
groups to their new models. Mixed into the trainer (:mod:`nip.training.trainer`)."""

from __future__ import annotations

import asyncio
from typing import Any

from nip.runs.plan_steps import GroupStep
from nip.runs.spend import job_spend, with_training_total
from nip.training.failure_policy import FailurePolicy, settle_fine_tune_job
from nip.training.groups import PureTextSharedModelGroup
from nip.training.plan import job_name


class FineTuneStages:
    """``create_fine_tune_jobs``, ``await_fine_tune_jobs`` and ``switch_models``."""

    async def _stage_create_fine_tune_jobs(self) -> None:
        algorithm, steps = self.algorithm, self.context.step.groups
        trained = [step for step in steps if step.method]
        data = algorithm.training_data(self.context, trained[0].data_iterations) if trained else []
        for step in steps:
            name, group = step.group, self.groups[step.group]
            if self._job_submitted_this_iteration(name, group):
                continue
            if step.skip is not None:  # configured so: recorded, not warned about
                group.skip(step.skip)  # type: ignore[arg-type]
                continue
            # Built once: saved, then sent.
            examples = algorithm.dataset(self.context, group.agent_wholes, data)
            self.run_dir.write_jsonl(self._fine_tune_name(name), examples)
            job_id = await self._submit(step, examples)
            self._record_submission(name, group)
            if job_id is not None:
                await self._call("on_job_submitted", name, job_id)

    async def _submit(self, step: GroupStep, examples: list[dict[str, Any]]) -> str | None:
        """Submit a group's job as the plan's step says (method, name, starting point)."""
        return await self.groups[step.group].submit_fine_tune_job(
            step.method, examples, job_name(step.group, self._iteration), continues=step.continues
        )

    def _job_submitted_this_iteration(self, name: str, group: PureTextSharedModelGroup) -> bool:
        """Whether the group's job of this iteration was submitted before a restart."""
        return (
            group.state.last_job_outcome == "submitted"
            and self.state.job_iterations.get(name) == self._iteration
        )

    def _record_submission(self, name: str, group: PureTextSharedModelGroup) -> None:
        """Save the state as soon as a job is submitted: a run killed before the stage ends
        then finds the job on resume instead of paying for a second one."""
        if group.state.last_job_outcome == "submitted":
            self.state.job_iterations[name] = self._iteration
            self._save_state()

    async def _stage_await_fine_tune_jobs(self) -> None:
        """Wait for each submitted job; a failed one is handled by
        ``text_rl.on_fine_tune_failure`` (:mod:`nip.training.failure_policy`)."""
        policy = FailurePolicy.from_params(self.hyper_params.text_rl)
        names = list(self.context.submitted())
        settled = await asyncio.gather(
            *(
                settle_fine_tune_job(
                    self.groups[name],
                    self._iteration,
                    policy,
                    resubmit=lambda name=name: self._resubmit(name),
                    save=self._save_state,
                    poll_interval_s=self.poll_interval_s,
                )
                for name in names
            ),
            return_exceptions=True,
        )
        spent: dict[str, Any] = {}
        for name, outcome in zip(names, settled, strict=True):
            if outcome == "succeeded":  # what its training cost (nip.runs.spend)
                group = self.groups[name]
                job, method = await group.fine_tune_job(), self.context.step.group(name).method
                spent |= job_spend(name, job, group.params, method)
            if outcome == "kept_previous":
                failures = len(self.groups[name].failures_in(self._iteration))
                self._add_train_metrics(
                    {f"{name}.fine_tune_failed": 1, f"{name}.fine_tune_failures": failures}
                )
        if spent:  # with the sum over every group's job of the iteration
            total = with_training_total(self._train_metrics() | spent)["training_cost_usd"]
            self._add_train_metrics(spent | {"training_cost_usd": total})
        errors = [e for e in settled if isinstance(e, BaseException)]
        if errors:
            raise errors[0]

    async def _resubmit(self, name: str) -> None:
        """Submit the group's dataset of this iteration again, exactly as it was saved."""
        step = self.context.step.group(name)
        await self._submit(step, self.run_dir.read_jsonl(self._fine_tune_name(name)))

    def _fine_tune_name(self, group: str) -> str:
        return f"fine_tune/it{self._iteration:04d}_{group}.jsonl"

    def _train_metrics(self) -> dict[str, Any]:
        name = f"metrics/train_it{self._iteration:04d}.json"
        return self.run_dir.read_json(name) if self.run_dir.exists(name) else {}

    def _add_train_metrics(self, metrics: dict[str, Any]) -> None:
        """Add ``metrics`` to this iteration's training metrics (file and logger)."""
        self.run_dir.save_metrics("train", self._iteration, self._train_metrics() | metrics)
        self._log(metrics)

    async def _stage_switch_models(self) -> None:
        for group in map(self.groups.get, self.context.submitted()):
            job = await group.fine_tune_job()  # fetched once; the switch takes it as fetched
            # A run killed after switching, before saving, finds the model already in use.
            if job is not None and group.state.model_history[-1:] != [job.fine_tuned_model]:
                await group.switch_to_next_model(job)
            group.end_iteration()
