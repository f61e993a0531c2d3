"""The stages of the training loop: :data:`STAGES` maps each stage the run plan lists to its
coroutine. A stage sees the :class:`~nip.training.context.RunContext`, never the trainer, and can
be repeated safely: what it already did is found on disk, so a killed run resumes cleanly."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from nip.analysis.metrics import priced_rollout_metrics
from nip.rollouts.records import Transcript
from nip.runs.plan_steps import TEST_ITERATION, GroupStep
from nip.runs.spend import job_spend, with_training_total
from nip.runs.state import Stage
from nip.training.algorithms import BY_NAME, TrainingAlgorithm
from nip.training.callbacks import Callbacks
from nip.training.context import RunContext
from nip.training.failure_policy import FailurePolicy, settle_fine_tune_job
from nip.training.plan import job_name


def algorithm_of(run: RunContext) -> TrainingAlgorithm:
    """The algorithm the plan runs in the current iteration."""
    return BY_NAME[run.step.algorithm]


async def sample_rollouts(run: RunContext, callbacks: Callbacks) -> None:
    if run.run_dir.has_rollouts("train", run.iteration):
        return  # sampled before a restart
    items = run.session.datapoints_by_id(run.step.item_ids, split=run.plan.train_split)
    await algorithm_of(run).collect(run, items, callbacks.progress(run, "sample_rollouts"))


async def log_stats(run: RunContext, callbacks: Callbacks) -> None:
    transcripts = run.run_dir.load_rollouts("train", run.iteration)
    metrics = priced_rollout_metrics(transcripts, run.session.agents, run.settings)
    metrics |= algorithm_of(run).metrics(run, run.iteration)
    run.run_dir.save_metrics("train", run.iteration, metrics)
    callbacks.log(run, metrics)


async def test(run: RunContext, callbacks: Callbacks) -> None:
    step = run.step
    if not step.tests or run.run_dir.has_rollouts("test", run.iteration):
        return
    transcripts: list[Transcript] = []
    for repeat, ids in enumerate(step.test_pass_item_ids):
        batch = await run.session.rollouts_async(
            run.session.datapoints_by_id(ids, split=run.plan.test_split),
            iteration=TEST_ITERATION + repeat,
            description=f"test {run.iteration}",
            on_progress=callbacks.progress(run, "test", offset=len(transcripts)),
        )
        transcripts += batch.transcripts
    run.run_dir.save_rollouts("test", run.iteration, transcripts)
    metrics = priced_rollout_metrics(transcripts, run.session.agents, run.settings)
    run.run_dir.save_metrics("test", run.iteration, metrics)
    callbacks.log(run, metrics, prefix="test_")


async def create_fine_tune_jobs(run: RunContext, callbacks: Callbacks) -> None:
    """Submit each group's job as the plan says (a skipped group is recorded as such)."""
    algorithm, steps = algorithm_of(run), run.step.groups
    trained = [step for step in steps if step.method]
    data = algorithm.training_data(run, trained[0].data_iterations) if trained else []
    for step in steps:
        name, group = step.group, run.groups[step.group]
        if group.state.last_job_outcome == "submitted" and (
            run.state.job_iterations.get(name) == run.iteration
        ):
            continue  # submitted before a restart
        if step.skip is not None:  # configured so: recorded, not warned about
            group.skip(step.skip)
            continue
        # Built once: saved, then sent.
        examples = algorithm.dataset(run, group.agent_wholes, data)
        run.run_dir.write_jsonl(_dataset_file(run, name), examples)
        job_id = await _submit(run, step, examples)
        if group.state.last_job_outcome == "submitted":
            # Saved at once: a run killed before the stage ends then finds the job on resume
            # instead of paying for a second one.
            run.state.job_iterations[name] = run.iteration
            run.save_state()
        if job_id is not None:
            await callbacks.call("on_job_submitted", run, name, job_id)


async def await_fine_tune_jobs(run: RunContext, callbacks: Callbacks) -> None:
    """Wait for each submitted job; a failed one is handled by
    ``text_rl.on_fine_tune_failure`` (:mod:`nip.training.failure_policy`)."""
    policy = FailurePolicy.from_params(run.hyper_params.text_rl)

    async def resubmit(name: str) -> None:  # this iteration's dataset again, as it was saved
        examples = run.run_dir.read_jsonl(_dataset_file(run, name))
        await _submit(run, run.step.group(name), examples)

    names = list(run.submitted())
    settled = await asyncio.gather(
        *(
            settle_fine_tune_job(
                run.groups[name],
                run.iteration,
                policy,
                resubmit=lambda name=name: resubmit(name),
                save=run.save_state,
                poll_interval_s=run.poll_interval_s,
            )
            for name in names
        ),
        return_exceptions=True,
    )
    spent: dict[str, Any] = {}
    for name, outcome in zip(names, settled, strict=True):
        if outcome == "succeeded":  # what its training cost (nip.runs.spend)
            group = run.groups[name]
            job, method = await group.fine_tune_job(), run.step.group(name).method
            spent |= job_spend(name, job, group.params, method, run.settings.gpu_hour_usd)
        if outcome == "kept_previous":
            failures = len(run.groups[name].failures_in(run.iteration))
            _add_train_metrics(
                run,
                callbacks,
                {f"{name}.fine_tune_failed": 1, f"{name}.fine_tune_failures": failures},
            )
    if spent:  # with the sum over every group's job of the iteration
        total = with_training_total(_train_metrics(run) | spent)["training_cost_usd"]
        _add_train_metrics(run, callbacks, spent | {"training_cost_usd": total})
    errors = [e for e in settled if isinstance(e, BaseException)]
    if errors:
        raise errors[0]


async def switch_models(run: RunContext, callbacks: Callbacks) -> None:
    for group in map(run.groups.get, run.submitted()):
        job = await group.fine_tune_job()  # fetched once; the switch takes it as fetched
        # A run killed after switching, before saving, finds the model already in use.
        if job is not None and group.state.model_history[-1:] != [job.fine_tuned_model]:
            await group.switch_to_next_model(job)
        group.end_iteration()


async def _submit(run: RunContext, step: GroupStep, examples: list[dict[str, Any]]) -> str | None:
    """Submit a group's job as the plan's step says (method, name, starting point)."""
    return await run.groups[step.group].submit_fine_tune_job(
        step.method, examples, job_name(step.group, run.iteration), continues=step.continues
    )


def _train_metrics(run: RunContext) -> dict[str, Any]:
    name = f"metrics/train_it{run.iteration:04d}.json"
    return run.run_dir.read_json(name) if run.run_dir.exists(name) else {}


def _add_train_metrics(run: RunContext, callbacks: Callbacks, metrics: dict[str, Any]) -> None:
    """Add ``metrics`` to this iteration's training metrics (file and loggers)."""
    run.run_dir.save_metrics("train", run.iteration, _train_metrics(run) | metrics)
    callbacks.log(run, metrics)


def _dataset_file(run: RunContext, group: str) -> str:
    return f"fine_tune/it{run.iteration:04d}_{group}.jsonl"


#: Each stage's coroutine, by the name the run plan lists it under.
STAGES: dict[Stage, Callable[[RunContext, Callbacks], Awaitable[None]]] = {
    "sample_rollouts": sample_rollouts,
    "log_stats": log_stats,
    "test": test,
    "create_fine_tune_jobs": create_fine_tune_jobs,
    "await_fine_tune_jobs": await_fine_tune_jobs,
    "switch_models": switch_models,
}
