"""What a finished (or running) run holds: judgements of its dialogues, and their table."""

from __future__ import annotations

from typing import Any

from nip.runs.run_dir import RunDirectory
from nip.training.context import RunContext


async def analyse_run(
    run: RunContext, judge, logger: Any, *, analysers=None, split: str = "train"
) -> dict[str, float | None]:
    """Judge every saved dialogue of ``split`` with the ``judge`` model's parameters, store the
    judgements under ``analysis/`` and return the last iteration's share of "yes" per analyser and
    agent; each iteration's summary also goes to ``logger`` (W&B) as ``analysis_*``."""
    from nip.analysis.judges import ANALYSERS, analyse_async, summarise

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
        run.run_dir.write_jsonl(
            f"analysis/{split}_it{iteration:04d}.jsonl", [r.to_dict() for r in results]
        )
        iteration_summary = summarise(results)
        name = f"analysis/{split}_it{iteration:04d}_summary.json"
        run.run_dir.write_json(name, iteration_summary)
        # No step: a finished run's W&B steps are past these iterations, and W&B drops data
        # logged at an earlier step.
        prefix = "analysis_" if split == "train" else f"analysis_{split}_"
        logged = {f"{prefix}{k}": v for k, v in iteration_summary.items()}
        logger.log({"analysis_iteration": iteration, **logged}, step=None)
        summary = iteration_summary
    return summary


def analysis_dataframe(run_dir: RunDirectory, split: str = "train"):
    """Every stored judgement of ``split``, one row each."""
    import pandas as pd

    rows = []
    for path in sorted((run_dir.path / "analysis").glob(f"{split}_it*[0-9].jsonl")):
        rows += run_dir.read_jsonl(path.relative_to(run_dir.path).as_posix())
    return pd.DataFrame(rows)
