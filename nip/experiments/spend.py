"""A run's dry-run estimate saved when it starts, and a sweep's spend beside its estimate.

The training layer sits below the dry run, so :class:`EstimateCallback` prices a run's plan once
when it starts (``nip run``, every sweep cell, or ``callbacks=[EstimateCallback()]`` in a
notebook) and saves ``cost_estimate.json``; :func:`nip.runs.spend.read_spend` reads it beside what
the run spent, and :func:`sweep_spend` does so for each cell of a sweep.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nip.experiments.cost_estimate import estimate_cost
from nip.experiments.cost_report import CostEstimate
from nip.parameters import HyperParameters
from nip.protocols import PROTOCOLS, ProtocolHandler
from nip.runs.spend import (
    ESTIMATE_FILE,
    RunSpend,
    difference_pct,
    pct,
    read_spend,
    sum_known,
    usd,
)
from nip.runs.sweep_dir import sweep_run_dirs
from nip.settings import ExperimentSettings
from nip.training.callbacks import TrainerCallback
from nip.training.context import RunContext
from nip.utils.files import atomic_write_text
from nip.utils.notices import warn

__all__ = [
    "EstimateCallback",
    "SweepSpend",
    "estimate_summary",
    "save_estimate",
    "sweep_spend",
    "sweep_status_text",
]


def estimate_summary(estimate: CostEstimate) -> dict[str, Any]:
    """What ``cost_estimate.json`` holds: the estimate's totals, per iteration and per agent."""

    def split(lines: list) -> dict[str, float | None]:
        inference = sum_known(x.usd for x in lines if x.stage != "fine-tune")
        training = sum_known(x.usd for x in lines if x.stage == "fine-tune")
        return {
            "inference_usd": inference,
            "training_usd": training,
            "total_usd": sum_known([inference, training]),
        }

    iterations = sorted({x.iteration for x in estimate.lines})
    agents = sorted({x.agent for x in estimate.lines})
    return {
        **split(estimate.lines),
        "by_iteration": {
            str(i): split([x for x in estimate.lines if x.iteration == i]) for i in iterations
        },
        "by_agent": {a: sum_known(x.usd for x in estimate.lines if x.agent == a) for a in agents},
        "training_tokens": sum(x.training_tokens for x in estimate.lines),
        "unpriced": estimate.unpriced,
    }


def save_estimate(
    run_dir: str | Path,
    hyper_params: HyperParameters,
    settings: ExperimentSettings,
    protocol: type[ProtocolHandler] | None = None,
) -> Path:
    """Price the plan of ``hyper_params`` as the dry run does and save it in ``run_dir``
    (``protocol``: the class of a protocol of one's own code)."""
    estimate = estimate_cost(hyper_params, settings, protocol=protocol)
    path = Path(run_dir) / ESTIMATE_FILE
    atomic_write_text(path, json.dumps(estimate_summary(estimate), indent=2) + "\n")
    return path


class EstimateCallback(TrainerCallback):
    """Saves the dry run's estimate of the run's plan when it first starts (a plan it cannot
    price is warned about, and the run goes on without one)."""

    async def on_train_begin(self, run: RunContext) -> None:
        if (run.run_dir.path / ESTIMATE_FILE).exists() or run.state.stage == "done":
            return
        settings = ExperimentSettings(
            show_progress=False, prices_usd_per_1m=dict(run.settings.prices_usd_per_1m)
        )
        shipped = run.hyper_params.interaction_protocol in PROTOCOLS
        protocol = None if shipped else type(run.session.handler)
        try:
            await asyncio.to_thread(
                save_estimate, run.run_dir.path, run.hyper_params, settings, protocol
            )
        except Exception as error:  # the estimate is a comparison, never a reason to stop
            warn(f"the run's cost could not be estimated ({error}); it goes on without one")


@dataclass(frozen=True)
class SweepSpend:
    """Each cell's :class:`~nip.runs.spend.RunSpend` by name, and the sweep's sums."""

    cells: dict[str, RunSpend]

    @property
    def total_usd(self) -> float | None:
        return sum_known(c.total_usd for c in self.cells.values())

    @property
    def estimate_usd(self) -> float | None:
        """The sum of the cells' estimates (None: a cell has none, or an unknown one)."""
        return sum_known(c.estimate_usd for c in self.cells.values())

    @property
    def difference_pct(self) -> float | None:
        return difference_pct(self.total_usd, self.estimate_usd)

    def describe(self) -> str:
        shown = pct(self.difference_pct)
        return (
            f"sweep spent {usd(self.total_usd)} · estimated {usd(self.estimate_usd)}{shown}"
            f" ({len(self.cells)} cells)"
        )


def sweep_spend(sweep_dir: str | Path) -> SweepSpend:
    """What every cell of the sweep in ``sweep_dir`` spent, beside its estimate."""
    return SweepSpend({path.name: read_spend(path) for path in sweep_run_dirs(sweep_dir)})


def sweep_status_text(sweep_dir: str | Path) -> str:
    """What ``nip sweep status DIR`` prints: whether the sweep runs, then each cell's reported
    status ("interrupted": reported running, owned by nobody), progress and spend beside its
    estimate, and the sweep's total once a cell started.

    Raises:
        NotASweepDirectoryError: ``sweep_dir`` holds no sweep.
    """
    from nip.runs.control import read_status
    from nip.runs.ownership import current_owner
    from nip.runs.sweep_dir import sweep_status

    cells = sweep_status(sweep_dir)  # first: refuses a folder that holds no sweep
    owner = current_owner(sweep_dir)
    lines = [f"{sweep_dir}: " + (f"running ({owner})" if owner else "not running")]
    spends = sweep_spend(sweep_dir)
    for cell in cells:
        cell_dir = Path(sweep_dir) / "cells" / cell.name
        reported, spend = read_status(cell_dir), spends.cells.get(cell.name, RunSpend())
        if cell.error:
            lines.append(f"{cell.name:<32}{'failed':<12}{cell.error}")
            continue
        if cell.stage == "not started":
            lines.append(f"{cell.name:<32}not started")
            continue
        status = "finished" if cell.stage == "done" else reported.get("status", cell.stage)
        if status == "running" and current_owner(cell_dir) is None:
            status = "interrupted"  # reported running, but no process owns it: killed
        where = f"iteration {cell.progress}"
        stages = reported.get("stages_total")
        stages = f"{reported['stages_completed']}/{stages} stages" if stages else ""
        cost = usd(spend.total_usd) + pct(spend.difference_pct)
        lines.append(f"{cell.name:<32}{status:<12}{where:<18}{stages:<14}{cost}")
    if any(cell.stage != "not started" for cell in cells):
        lines.append(spends.describe())
    return "\n".join(lines)
