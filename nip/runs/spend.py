"""What a run spent, beside what its dry run said it would: read from its directory.

Inference is each split's ``cost_usd`` (and ``{agent}.cost_usd``) in ``metrics/``, priced as the
run went; fine-tuning is :func:`job_spend`'s ``{group}.trained_tokens`` (as the provider reports
them) times the training price, or a ``nip serve`` job's ``{group}.gpu_hours`` times
``ExperimentSettings.gpu_hour_usd``, in ``{group}.training_cost_usd`` and ``training_cost_usd``. The
estimate is ``cost_estimate.json``, saved when the run started
(:class:`~nip.training.callbacks.EstimateCallback`); :func:`sweep_spend` reads each cell of a sweep.
An unknown cost is None ("unknown") and makes every sum it is in unknown: never counted as 0.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nip.jobs import FineTuneJob
from nip.parameters import PureTextAgentParameters
from nip.providers import prices_for
from nip.providers.openai import price_key
from nip.runs.control import read_status, reported_status
from nip.runs.ownership import current_owner
from nip.runs.run_dir import RunDirectory
from nip.runs.sweep_dir import cell_run_dir, sweep_run_dirs, sweep_status
from nip.utils.files import read_json_object

__all__ = [
    "ESTIMATE_FILE",
    "RunSpend",
    "SweepSpend",
    "difference_pct",
    "job_spend",
    "pct",
    "read_spend",
    "sum_known",
    "sweep_spend",
    "sweep_status_text",
    "totals",
    "training_usd",
    "usd",
    "with_training_total",
]

#: The dry run's estimate of a run, saved in its directory when it starts.
ESTIMATE_FILE = "cost_estimate.json"


def sum_known(values: Iterable[float | None]) -> float | None:
    """The sum, or None when one of the values is unknown (None)."""
    values = list(values)
    return None if any(v is None for v in values) else float(sum(values))  # type: ignore[arg-type]


def totals(inference: float | None, training: float | None) -> dict[str, float | None]:
    """``inference_usd``, ``training_usd`` and their ``total_usd`` (unknown if one is)."""
    return {
        "inference_usd": inference,
        "training_usd": training,
        "total_usd": sum_known([inference, training]),
    }


def usd(value: float | None) -> str:
    """A cost in words: ``$0.0123``, or ``unknown``."""
    return "unknown" if value is None else f"${value:,.4f}"


def difference_pct(spent: float | None, estimate: float | None) -> float | None:
    """``spent`` above ``estimate`` in percent of it (None: either unknown, or no estimate)."""
    return None if spent is None or not estimate else (spent - estimate) / estimate * 100


def pct(difference: float | None) -> str:
    """A difference in words, `` (+12%)``, or nothing when unknown."""
    return "" if difference is None else f" ({difference:+.0f}%)"


def job_spend(
    group: str,
    job: FineTuneJob | None,
    params: PureTextAgentParameters,
    method: str | None,
    gpu_hour_usd: float | None = None,
) -> dict[str, Any]:
    """A group's ended job's ``{group}.trained_tokens`` and ``{group}.training_cost_usd`` (0
    where the provider bills no tokens; None where the tokens or the price are unknown); a
    ``nip serve`` job's cost is its ``{group}.gpu_hours`` at ``gpu_hour_usd`` (None without)."""
    tokens = job.trained_tokens if job is not None else None
    spent: dict[str, Any] = {f"{group}.trained_tokens": tokens}
    if params.served_by == "SelfHosted":
        running_s = job.running_s if job is not None else None
        hours = None if running_s is None else running_s / 3600
        cost = None if hours is None or gpu_hour_usd is None else hours * gpu_hour_usd
        return spent | {f"{group}.gpu_hours": hours, f"{group}.training_cost_usd": cost}
    return spent | {
        f"{group}.training_cost_usd": training_usd(params, tokens, method or "supervised")
    }


def training_usd(
    params: PureTextAgentParameters, tokens: int | None, method: str, price: float | None = None
) -> float | None:
    """What training ``tokens`` of the agent's base model costs (0 where its provider bills
    no tokens; None where the tokens or the price, ``price`` per 1M or the provider's, are
    unknown): the one training price lookup of the dry run and the run's spend."""
    prices = prices_for(params)
    if prices is None:
        return 0.0
    model = price_key(params.model_name).removeprefix("ft:")
    price = price or prices.training(model, method, params.use_lora)
    return None if price is None or tokens is None else tokens * price / 1e6


def with_training_total(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """``metrics`` with ``training_cost_usd``: the sum of its groups' (unknown if one is)."""
    costs = [v for k, v in metrics.items() if k.endswith(".training_cost_usd")]
    return {**metrics, "training_cost_usd": sum_known(costs)}


@dataclass(frozen=True)
class RunSpend:
    """What a run spent so far (None: unknown), and its dry run's ``estimate`` of the whole
    plan (empty when none was saved); ``by_agent`` holds agents' dialogues and groups' jobs,
    ``gpu_hours`` the GPU time of each group's ``nip serve`` jobs."""

    inference_usd: float | None = 0.0
    training_usd: float | None = 0.0
    by_iteration: dict[int, dict[str, float | None]] = field(default_factory=dict)
    by_agent: dict[str, float | None] = field(default_factory=dict)
    trained_tokens: dict[str, int | None] = field(default_factory=dict)
    gpu_hours: dict[str, float | None] = field(default_factory=dict)
    estimate: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_records(
        cls, records: Iterable[Mapping[str, Any]], estimate: Mapping[str, Any] | None = None
    ) -> RunSpend:
        """From a run's metrics rows (``RunDirectory.metrics_records``) and saved estimate."""
        iterations: dict[int, dict[str, list]] = {}
        named: dict[str, dict[str, list]] = {}  # by what: by agent or group: its values
        for row in records:
            spent = iterations.setdefault(int(row["iteration"]), {"inference": [], "training": []})
            spent["inference"].append(row.get("cost_usd"))
            for key, value in row.items():
                name, _, what = key.rpartition(".")
                if what == "training_cost_usd" and name:  # a group's jobs: training, its spend
                    spent["training"].append(value)
                    what = "cost_usd"
                if name and what in ("cost_usd", "trained_tokens", "gpu_hours"):
                    named.setdefault(what, {}).setdefault(name, []).append(value)
        by_iteration = {
            number: totals(sum_known(spent["inference"]), sum_known(spent["training"]))
            for number, spent in sorted(iterations.items())
        }

        def summed(what: str, total: Callable = sum_known) -> dict[str, Any]:
            return {name: total(v) for name, v in sorted(named.get(what, {}).items())}

        return cls(
            inference_usd=sum_known(i["inference_usd"] for i in by_iteration.values()),
            training_usd=sum_known(i["training_usd"] for i in by_iteration.values()),
            by_iteration=by_iteration,
            by_agent=summed("cost_usd"),
            trained_tokens=summed("trained_tokens", lambda v: None if None in v else sum(v)),
            gpu_hours=summed("gpu_hours"),
            estimate=dict(estimate or {}),
        )

    @property
    def total_usd(self) -> float | None:
        return sum_known([self.inference_usd, self.training_usd])

    @property
    def estimate_usd(self) -> float | None:
        """The dry run's total for the whole plan (None: none saved, or unknown)."""
        return self.estimate.get("total_usd")

    @property
    def difference_pct(self) -> float | None:
        """How far the spend is from the estimate, in percent of it (None: unknown or 0)."""
        return difference_pct(self.total_usd, self.estimate_usd)

    def to_metrics(self) -> dict[str, float | None]:
        """Flat totals, for W&B and tables."""
        return {
            "spent_usd": self.total_usd,
            "spent_inference_usd": self.inference_usd,
            "spent_training_usd": self.training_usd,
            "estimated_usd": self.estimate_usd,
            "spent_vs_estimate_pct": self.difference_pct,
        }

    def describe(self) -> str:
        """``spent $0.0123 (inference $0.0100, training $0.0023) · estimated $0.0150 (-18%)``."""
        hours = sum_known(self.gpu_hours.values()) if self.gpu_hours else None
        gpu = "" if hours is None else f", {hours:.2f} GPU-hours"
        line = (
            f"spent {usd(self.total_usd)} (inference {usd(self.inference_usd)}, "
            f"training {usd(self.training_usd)}{gpu})"
        )
        if not self.estimate:
            return line + " · no estimate saved"
        return line + f" · estimated {usd(self.estimate_usd)}{pct(self.difference_pct)}"


def read_spend(run_dir: str | Path, records: Iterable[Mapping[str, Any]] | None = None) -> RunSpend:
    """What the run in ``run_dir`` spent so far, beside its saved estimate (``records``: its
    metrics rows when already read)."""
    directory = RunDirectory(run_dir)
    if records is None:
        records = directory.metrics_records() if (directory.path / "metrics").is_dir() else []
    return RunSpend.from_records(records, read_json_object(directory.path / ESTIMATE_FILE))


@dataclass(frozen=True)
class SweepSpend:
    """Each cell's :class:`RunSpend` by name, and the sweep's sums."""

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
            f" · {len(self.cells)} cells"
        )


def sweep_spend(sweep_dir: str | Path) -> SweepSpend:
    """What every cell of the sweep in ``sweep_dir`` spent, beside its estimate."""
    return SweepSpend({path.name: read_spend(path) for path in sweep_run_dirs(sweep_dir)})


def sweep_status_text(sweep_dir: str | Path) -> str:
    """What ``nip sweep status DIR`` prints: whether the sweep runs, then each cell's reported
    status (:func:`~nip.runs.control.reported_status`), progress and spend beside its estimate,
    and the sweep's total once a cell started.

    Raises:
        NotASweepDirectoryError: ``sweep_dir`` holds no sweep.
    """
    cells = sweep_status(sweep_dir)  # first: refuses a folder that holds no sweep
    owner = current_owner(sweep_dir)
    lines = [f"{sweep_dir}: " + (f"running ({owner})" if owner else "not running")]
    spends = sweep_spend(sweep_dir)
    for cell in cells:
        cell_dir = cell_run_dir(sweep_dir, cell.name)
        reported, spend = read_status(cell_dir), spends.cells.get(cell.name, RunSpend())
        if cell.error:
            lines.append(f"{cell.name:<32}{'failed':<12}{cell.error}")
            continue
        if cell.stage == "not started":
            lines.append(f"{cell.name:<32}not started")
            continue
        done = cell.stage == "done"
        status = "finished" if done else reported_status(cell_dir, reported) or cell.stage
        where = f"iteration {cell.progress}"
        stages = reported.get("stages_total")
        stages = f"{reported['stages_completed']}/{stages} stages" if stages else ""
        cost = usd(spend.total_usd) + pct(spend.difference_pct)
        lines.append(f"{cell.name:<32}{status:<12}{where:<18}{stages:<14}{cost}")
    if any(cell.stage != "not started" for cell in cells):
        lines.append(spends.describe())
    return "\n".join(lines)
