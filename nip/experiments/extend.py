"""More iterations for a finished run, from its last models and state (``nip extend``).

::

    print(extension_schedule("runs/nip-ei", 4))     # what will run, before anything does
    trainer = extend_run("runs/nip-ei", 4)          # rl.num_iterations 8 -> 12, then train()

A finished run stopped after its last test, without fine-tuning. Extending it raises
``rl.num_iterations`` in its saved parameters (the old file kept as
``hyper_params.before-N.json``) and moves its state back to that iteration's fine-tuning, so it
goes on as a run that had asked for the longer schedule would (one extra test kept).
``from_sampling=True`` is the original's ``force_more_iterations``: the next iteration samples
at once and the old last iteration is never fine-tuned on by itself. What the run executed stays
as it ran (``RunPlan.keeping_executed``).
"""

from __future__ import annotations

from pathlib import Path

from nip.errors import InvalidParameterError, require_count
from nip.runs.changes import change_saved_parameters, saved_parameters
from nip.runs.ownership import owning
from nip.runs.run_dir import RunDirectory
from nip.runs.state import TrainerState
from nip.settings import ExperimentSettings
from nip.training.algorithms import BY_NAME
from nip.training.plan import RunPlan, make_run_plan
from nip.training.trainer import PureTextEiTrainer

__all__ = ["extend_run", "extension_schedule"]


def _start(last: int, from_sampling: bool) -> TrainerState:
    """Where the extension starts: the old last iteration's fine-tuning, or (as the original's
    ``force_more_iterations``) the next iteration's sampling."""
    if from_sampling:
        return TrainerState(iteration=last + 1, stage="sample_rollouts")
    return TrainerState(iteration=last, stage="create_fine_tune_jobs")


def extension_schedule(run_dir: str | Path, iterations: int, *, from_sampling: bool = False) -> str:
    """What extending the run by ``iterations`` will do, one line per iteration of the extended
    run's plan (:class:`InvalidParameterError` for ``iterations`` < 1; NotARunDirectoryError)."""
    require_count("--iterations", iterations)
    before = saved_parameters(run_dir)
    old = before.rl.num_iterations
    plan = make_run_plan(before.with_overrides({"rl.num_iterations": old + iterations}))
    directory = RunDirectory(run_dir)
    if directory.exists("plan.json"):
        saved = RunPlan.from_dict(directory.read_json("plan.json"))
        plan = plan.keeping_executed(saved, _start(old - 1, from_sampling))
    rows = [f"extending {run_dir}: rl.num_iterations {old} -> {old + iterations}"]
    for step in plan.iterations[old - 1 :]:
        trained = ", ".join(g.group for g in step.groups if g.method) or "nothing (all frozen)"
        ran = step.iteration < old  # the old last iteration: sampled and tested already
        steps = [] if ran else [f"sample {step.items} {BY_NAME[step.algorithm].unit}"]
        steps += [f"test ({step.test_passes} pass(es))"] if step.tests and not ran else []
        steps += [f"fine-tune {trained}"] if step.fine_tunes else []
        done = " on its saved dialogues" if step.fine_tunes else "not fine-tuned on by itself"
        rows.append(f"  iteration {step.iteration}: " + ", ".join(steps) + (done if ran else ""))
    return "\n".join(rows)


def extend_run(
    run_dir: str | Path,
    iterations: int,
    settings: ExperimentSettings | None = None,
    *,
    from_sampling: bool = False,
    **kwargs,
) -> PureTextEiTrainer:
    """Extend a finished run by ``iterations`` and return its trainer, ready to ``train()``.

    ``from_sampling``: start at the next iteration's sampling with the models the run finished
    with (the original's ``force_more_iterations``); by default the old last iteration is
    fine-tuned on first. ``kwargs`` go to :meth:`PureTextEiTrainer.resume`.

    Raises:
        InvalidParameterError: ``iterations`` < 1, or the run is not finished (resume it).
        NotARunDirectoryError: ``run_dir`` is missing, a file, or holds no run.
        DirectoryInUseError: Another process is writing the run directory.
    """
    require_count("--iterations", iterations)
    directory = RunDirectory.of_run(run_dir)
    with owning(directory.path, "an extension"):
        state = directory.read_json("state.json") if directory.exists("state.json") else {}
        if state.get("stage") != "done":
            raise InvalidParameterError(
                "run_dir",
                str(run_dir),
                "a finished run",
                reason="the run is not finished: resume it (nip resume) before extending it",
            )
        old = saved_parameters(run_dir).rl.num_iterations
        change_saved_parameters(run_dir, {"rl.num_iterations": old + iterations}, accept=True)
        start = _start(old - 1, from_sampling)
        directory.write_json(
            "state.json", {**state, "iteration": start.iteration, "stage": start.stage}
        )
        # More iterations is a new plan by design (extension_schedule shows it first); what
        # ran stays in it as it ran.
        return PureTextEiTrainer.resume(run_dir, settings, accept_plan_change=True, **kwargs)
