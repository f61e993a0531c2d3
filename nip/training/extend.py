"""More iterations for a finished run, from its last models and state (``nip extend``).

::

    print(extension_schedule("runs/nip-ei", 4))     # what will run, before anything does
    trainer = extend_run("runs/nip-ei", 4)          # rl.num_iterations 8 -> 12, then train()

A finished run stopped after its last iteration's test, without fine-tuning (the last
iteration submits no job). Extending it raises ``rl.num_iterations`` in its saved parameters
(the old file kept as ``hyper_params.before-N.json``) and moves its state back to that
iteration's fine-tuning stage; training then goes on exactly as a run that had asked for the
longer schedule from the start would have: same dialogues, same fine-tuning datasets, same
models (with deterministic backends). The one difference is a test of the old last iteration
that the longer run's test scheme may not have made; it is kept.
"""

from __future__ import annotations

from pathlib import Path

from nip.errors import InvalidParameterError
from nip.settings import ExperimentSettings
from nip.training.plan import tests_in
from nip.training.run_changes import change_saved_parameters, saved_parameters
from nip.training.run_dir import RunDirectory
from nip.training.trainer import PureTextEiTrainer

__all__ = ["extend_run", "extension_schedule"]


def extension_schedule(run_dir: str | Path, iterations: int) -> str:
    """What extending the run by ``iterations`` will do, one line per iteration."""
    before = saved_parameters(run_dir)
    old = before.rl.num_iterations
    after = before.with_overrides({"rl.num_iterations": old + iterations})
    trained = [name for name, agent in after.agents.items() if not agent.freeze_agent]
    rows = [
        f"extending {run_dir}: rl.num_iterations {old} -> {old + iterations}",
        f"  iteration {old - 1}: fine-tune {', '.join(trained) or 'nothing (all frozen)'} "
        "on its saved dialogues",
    ]
    for iteration in range(old, old + iterations):
        steps = [f"sample {after.rl.rollouts_per_iteration} dialogues"]
        if tests_in(after, iteration):
            steps.append(f"test ({after.rl.num_test_iterations} pass(es))")
        if iteration < old + iterations - 1:
            steps.append("fine-tune")
        rows.append(f"  iteration {iteration}: " + ", ".join(steps))
    return "\n".join(rows)


def extend_run(
    run_dir: str | Path, iterations: int, settings: ExperimentSettings | None = None, **kwargs
) -> PureTextEiTrainer:
    """Extend a finished run by ``iterations`` and return its trainer, ready to ``train()``.

    ``kwargs`` go to :meth:`PureTextEiTrainer.resume` (``fine_tune_backends``, ``protocol``).

    Raises:
        InvalidParameterError: ``iterations`` < 1, or the run is not finished (resume it).
    """
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
        raise InvalidParameterError("--iterations", iterations, "an integer >= 1")
    directory = RunDirectory(run_dir)
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
    # The old last iteration went from test to done; its fine-tuning comes next.
    directory.write_json("state.json", {**state, "stage": "create_fine_tune_jobs"})
    # More iterations is a new plan by design (extension_schedule shows it first).
    return PureTextEiTrainer.resume(run_dir, settings, accept_plan_change=True, **kwargs)
