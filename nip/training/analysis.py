"""Judging a run's saved dialogues (``Trainer.analyse``): judgements under ``analysis/``, their
summary per iteration, and the summary in the run's W&B logger as ``analysis_*``."""

from __future__ import annotations

from typing import Any

from nip.analysis.judges import ANALYSERS, analyse_async, summarise
from nip.training.context import RunContext


async def analyse_run_async(
    run: RunContext, judge, logger: Any, *, analysers=None, split: str = "train"
) -> dict[str, float | None]:
    """Judge every saved dialogue of ``split`` with the ``judge`` model's parameters; returns the
    last iteration's share of "yes" per analyser and agent."""
    backend = run.session.backends.backend_for(judge)
    summary: dict[str, float | None] = {}
    for iteration in range(run.state.iteration + 1):
        if not run.run_dir.has_rollouts(split, iteration):
            continue
        results = await analyse_async(
            run.run_dir.load_rollouts(split, iteration),
            run.session.handler,
            backend,
            model=judge.model_name,
            analysers=tuple(analysers or ANALYSERS),
            seed=run.hyper_params.seed,
        )
        name = f"analysis/{split}_it{iteration:04d}"
        run.run_dir.write_jsonl(f"{name}.jsonl", [r.to_dict() for r in results])
        summary = summarise(results)
        run.run_dir.write_json(f"{name}_summary.json", summary)
        # No step: a finished run's W&B steps are past these iterations, and W&B drops data
        # logged at an earlier step.
        prefix = "analysis_" if split == "train" else f"analysis_{split}_"
        logged = {f"{prefix}{k}": v for k, v in summary.items()}
        logger.log({"analysis_iteration": iteration, **logged}, step=None)
    return summary


def analysis_dataframe(run: RunContext, split: str = "train"):
    """Every stored judgement of ``split``, one row each."""
    import pandas as pd

    files = sorted((run.run_dir.path / "analysis").glob(f"{split}_it*[0-9].jsonl"))
    return pd.DataFrame(
        [row for f in files for row in run.run_dir.read_jsonl(f"analysis/{f.name}")]
    )
