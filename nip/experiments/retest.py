"""Testing a run's saved models again: more passes, another split, other iterations.

::

    retest("runs/nip-ei", iterations=[0, 7], passes=10)      # nip retest RUN_DIR ...

Each iteration is tested with the models of its training dialogues (the ``model`` of every turn
in ``rollouts/train_itNNNN.jsonl``), exactly as the run's test stage does: pass ``k`` plays and
is seeded as the run's test pass ``k``. Nothing of the run changes: results go to
``retest/<split>-<passes>x/``, itself a run directory that ``nip compare`` shows as its own
series (``nip (retest test-10x)``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from nip.analysis.metrics import priced_rollout_metrics
from nip.backends import AdapterHost, capability
from nip.errors import InvalidParameterError, require_count
from nip.jobs.local_lora import read_status
from nip.protocols import ProtocolHandler
from nip.rollouts.records import Transcript
from nip.runs.changes import saved_parameters
from nip.runs.ownership import owning
from nip.runs.plan_steps import TEST_ITERATION  # the run's own test passes' seeds
from nip.runs.run_dir import RunDirectory
from nip.session import Session
from nip.settings import ExperimentSettings
from nip.training.plan import test_plan
from nip.utils.sync import run_sync

__all__ = ["iteration_models", "retest", "retest_async"]


def iteration_models(run_dir: str | Path, iteration: int) -> dict[str, str]:
    """The model each agent generated with in ``iteration``'s training dialogues
    (:class:`InvalidParameterError` when the run has none)."""
    directory = RunDirectory(run_dir)
    if not directory.has_rollouts("train", iteration):
        raise InvalidParameterError(
            "--iterations", iteration, "an iteration whose training dialogues the run saved"
        )
    models: dict[str, str] = {}
    for transcript in directory.load_rollouts("train", iteration):
        for turn in transcript.turns:
            if turn.model and turn.agent not in models:
                models[turn.agent] = turn.model
    return models


async def retest_async(
    run_dir: str | Path,
    *,
    iterations: Iterable[int] | None = None,
    passes: int | None = None,
    split: str | None = None,
    settings: ExperimentSettings | None = None,
    protocol: type[ProtocolHandler] | None = None,
) -> Path:
    """Test the chosen iterations' models again; returns the retest's directory.

    Args:
        iterations: Which iterations (default: every iteration with training dialogues).
        passes: Test passes per iteration (default: the run's ``rl.num_test_iterations``).
        split: The dataset split (default: the run's ``text_rl.test_dataset_split``).
        settings: Runtime settings (cache, latency); ``run_dir`` is ignored.
        protocol: The class of your own protocol, which the run names.

    Raises:
        NotARunDirectoryError: ``run_dir`` is missing, a file, or holds no run.
        InvalidParameterError: An iteration without saved training dialogues, or ``passes`` < 1.
        DatasetSplitError: The dataset has no such split.
        DirectoryInUseError: Another retest with this split and passes is under way.
    """
    saved = saved_parameters(run_dir)
    if passes is not None:
        require_count("--passes", passes)
    passes = passes or saved.rl.num_test_iterations
    split = split or saved.text_rl.test_dataset_split
    params = saved.with_overrides(
        {"text_rl.test_dataset_split": split, "rl.num_test_iterations": passes}
    )
    directory = RunDirectory(run_dir)
    saved_iterations = [
        i for i in range(params.rl.num_iterations) if directory.has_rollouts("train", i)
    ]
    iterations = saved_iterations if iterations is None else list(iterations)
    for iteration in iterations:
        if iteration not in saved_iterations:
            raise InvalidParameterError(
                "--iterations",
                iteration,
                "an iteration whose training dialogues the run saved: "
                + (", ".join(map(str, saved_iterations)) or "none yet"),
            )
    settings = replace(settings or ExperimentSettings(), run_dir=None)
    session = Session(params, settings, protocol=protocol)
    try:
        step = test_plan(params, [str(item.id) for item in session.dataset(split)])
        passes_items = [
            session.datapoints_by_id(ids, split=split) for ids in step.test_pass_item_ids
        ]
        out = RunDirectory(Path(run_dir) / "retest" / f"{split}-{passes}x")
        with owning(out.path, "a retest"):  # the run itself is only read
            out.write_json("hyper_params.json", params.to_dict())
            for iteration in iterations:
                for agent, model in iteration_models(run_dir, iteration).items():
                    # A local LoRA job's adapter (its job in the run's jobs/), under its name.
                    host = capability(session.agents[agent].backend, AdapterHost)
                    status = read_status(Path(run_dir) / "jobs" / model) if host else None
                    if status and status.get("adapter_path"):
                        host.register_adapter(model, status["adapter_path"])
                    session.agents[agent].model_name = model
                transcripts: list[Transcript] = []
                for repeat, items in enumerate(passes_items):
                    batch = await session.rollouts_async(
                        items, iteration=TEST_ITERATION + repeat, description=f"retest {iteration}"
                    )
                    transcripts += batch.transcripts
                out.save_rollouts("test", iteration, transcripts)
                metrics = priced_rollout_metrics(transcripts, session.agents, settings)
                out.save_metrics("test", iteration, metrics)
    finally:
        await session.aclose()
    return out.path


def retest(run_dir: str | Path, **kwargs) -> Path:
    """Sync :func:`retest_async` (works in scripts and inside Jupyter)."""
    return run_sync(retest_async(run_dir, **kwargs))
