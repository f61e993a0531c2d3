"""GPU time of self-hosted agents, priced before it is spent (``--dry-run``).

::

    table = ThroughputTable.load()                     # nip/configs/gpu/throughput.yaml
    time = gpu_time(hyper_params, estimate_cost(hyper_params), table, gpu="H100-80GB")
    time.total_h, time.usd(2.5)
    print(GpuTimeReport([("run", time)], gpu_hour_usd=2.5))

Each ``SelfHosted`` agent's dry-run tokens over a throughput table per GPU and model size:
prompt tokens over the prefill rate plus completion tokens over the decode rate, and training
tokens over the LoRA rate plus a fixed time per job. Each figure says whether it was measured
(``bench/gpu_check.py --throughput-out``) or assumed, and the report says which it used.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import Field

from nip.errors import ConfigFileError, InvalidParameterError, NipError, UnknownKeyError
from nip.parameters import HyperParameters
from nip.parameters._base import BaseParameters
from nip.training.cost_report import CostEstimate, text_table

__all__ = [
    "DEFAULT_GPU",
    "GpuTime",
    "GpuTimeReport",
    "Throughput",
    "ThroughputTable",
    "gpu_time",
    "model_params_b",
]

#: The GPU priced unless another is named (``--gpu``).
DEFAULT_GPU = "H100-80GB"

_SIZE = re.compile(r"(?<![A-Za-z0-9.])(\d+(?:\.\d+)?)\s*([BbMm])(?![A-Za-z])")


class Throughput(BaseParameters):
    """What ``nip serve`` does per second on one GPU with a model of one size: a row of a
    throughput file, its fields checked as any parameters' are."""

    gpu: str = Field(description="The GPU (H100-80GB).")
    params_b: float = Field(description="The model's size, in billions of parameters.", gt=0)
    prefill_tokens_per_s: float = Field(
        description="vLLM's prompt tokens per second under many concurrent dialogues.", gt=0
    )
    decode_tokens_per_s: float = Field(
        description="vLLM's completion tokens per second under many concurrent dialogues.", gt=0
    )
    train_tokens_per_s: float = Field(description="LoRA training tokens per second.", gt=0)
    job_overhead_s: float = Field(
        description="Seconds each fine-tuning job spends besides training.",
        ge=0,
    )
    source: Literal["measured", "assumed"] = Field(description="Measured, or assumed.")
    how: str = Field("", description="How the figures were found.")
    date: str | dt.date = Field("", description="When (YAML reads an unquoted date as a date).")

    def label(self) -> str:
        """``H100-80GB 7.6B: assumed (2026-11-27)``."""
        date = f", {self.date}" if self.date else ""
        return f"{self.gpu} {self.params_b:g}B: {self.source}{date}"


@dataclass
class ThroughputTable:
    """Throughput rows by GPU and model size (see ``nip/configs/gpu/throughput.yaml``)."""

    rows: list[Throughput] = field(default_factory=list)

    @classmethod
    def load(cls, path: str | Path | None = None) -> ThroughputTable:
        """The shipped table, updated by the rows of ``path`` (a YAML with ``rows:``; a bad file
        raises :class:`ConfigFileError`)."""
        from importlib import resources

        shipped = resources.files("nip.configs").joinpath("gpu", "throughput.yaml")
        rows = _rows(shipped.read_text(encoding="utf-8"), "nip/configs/gpu/throughput.yaml")
        if path is not None:
            path = Path(path)
            if not path.is_file():
                raise ConfigFileError(f"--throughput: no such file {str(path)!r}", path=path)
            own = _rows(path.read_text(encoding="utf-8"), str(path))
            mine = {(r.gpu, r.params_b) for r in own}
            rows = [r for r in rows if (r.gpu, r.params_b) not in mine] + own
        return cls(rows)

    def gpus(self) -> list[str]:
        return sorted({row.gpu for row in self.rows})

    def check_gpu(self, gpu: str) -> str:
        """``gpu`` if the table has rows for it (else :class:`InvalidParameterError`)."""
        if gpu not in self.gpus():
            raise InvalidParameterError("--gpu", gpu, f"one of {', '.join(self.gpus())}")
        return gpu

    def for_model(self, gpu: str, params_b: float) -> tuple[Throughput, float]:
        """The row of ``gpu`` nearest ``params_b`` and its size over the model's."""
        candidates = [row for row in self.rows if row.gpu == self.check_gpu(gpu)]
        row = min(candidates, key=lambda r: abs(math.log(r.params_b / params_b)))
        return row, row.params_b / params_b


def _rows(text: str, where: str) -> list[Throughput]:
    import yaml

    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as error:
        raise ConfigFileError(f"{where}: not valid YAML: {error}") from None
    if not isinstance(data, Mapping) or not isinstance(data.get("rows"), list):
        raise ConfigFileError(f"{where}: a throughput file is a mapping with a list of rows")
    rows = []
    for i, row in enumerate(data["rows"]):
        try:
            rows.append(Throughput.from_dict(row))
        except UnknownKeyError as error:
            unknown = ", ".join(error.keys)
            raise ConfigFileError(f"{where}, row {i + 1}: unknown field(s) {unknown}") from None
        except NipError as error:  # a bad or missing value
            raise ConfigFileError(f"{where}, row {i + 1}: {error}") from None
    return rows


def model_params_b(model: str) -> float | None:
    """A model's size in billions of parameters, read from its name (``Qwen2.5-7B-Instruct``
    -> 7, ``SmolLM2-135M-Instruct`` -> 0.135); None when the name says none."""
    found = _SIZE.findall(Path(model).name)
    if not found:
        return None
    number, unit = found[-1]
    return float(number) / (1000 if unit in "Mm" else 1)


@dataclass
class GpuTime:
    """The GPU time of one run's self-hosted agents on ``gpu``, in GPU-seconds, with the table
    ``rows`` used by model (scaled) and the models of ``unsized`` names."""

    gpu: str
    generation_s: float = 0.0
    training_s: float = 0.0
    jobs: int = 0
    rows: dict[str, tuple[Throughput, float]] = field(default_factory=dict)
    unsized: list[str] = field(default_factory=list)

    @property
    def total_s(self) -> float:
        return self.generation_s + self.training_s

    @property
    def total_h(self) -> float:
        return self.total_s / 3600

    def usd(self, gpu_hour_usd: float | None) -> float | None:
        return None if gpu_hour_usd is None else self.total_h * gpu_hour_usd


def gpu_time(
    hyper_params: HyperParameters,
    estimate: CostEstimate,
    table: ThroughputTable,
    gpu: str = DEFAULT_GPU,
) -> GpuTime | None:
    """The GPU time of a run's ``SelfHosted`` agents from its dry run; None when it has none
    (:class:`InvalidParameterError` when ``gpu`` is not in the table)."""
    table.check_gpu(gpu)
    hosted = {
        name: agent.model_name
        for name, agent in hyper_params.agents.items()
        if agent.served_by == "SelfHosted"
    }
    if not hosted:
        return None
    result = GpuTime(gpu)
    for model in sorted(set(hosted.values())):
        size = model_params_b(model)
        if size is None:
            result.unsized.append(model)
        else:
            result.rows[model] = table.for_model(gpu, size)
    jobs = set()
    for line in estimate.lines:
        model = hosted.get(line.agent)
        if model is None or model not in result.rows:
            continue
        row, scale = result.rows[model]
        if line.stage == "fine-tune":
            result.training_s += line.training_tokens / (row.train_tokens_per_s * scale)
            group = hyper_params.agents[line.agent].shared_model_group or line.agent
            if (line.iteration, group) not in jobs:
                jobs.add((line.iteration, group))
                result.training_s += row.job_overhead_s
        else:
            result.generation_s += line.prompt_tokens / (row.prefill_tokens_per_s * scale)
            result.generation_s += line.completion_tokens / (row.decode_tokens_per_s * scale)
    result.jobs = len(jobs)
    return result


@dataclass
class GpuTimeReport:
    """GPU time per run (a sweep's cells) and in all, as ``--dry-run`` prints it."""

    runs: Sequence[tuple[str, GpuTime]]
    gpu_hour_usd: float | None = None

    @property
    def total_h(self) -> float:
        return sum(time.total_h for _, time in self.runs)

    def __str__(self) -> str:
        if not self.runs:
            return "GPU time: no SelfHosted agent, nothing to price"
        gpu = self.runs[0][1].gpu
        usd = self.gpu_hour_usd is not None
        head = ["run", "generation h", "training h", "jobs", "total h", *(["USD"] if usd else [])]

        def row(name: str, times: Sequence[GpuTime]) -> list[str]:
            hours = sum(t.total_h for t in times)
            return [
                name,
                f"{sum(t.generation_s for t in times) / 3600:,.2f}",
                f"{sum(t.training_s for t in times) / 3600:,.2f}",
                f"{sum(t.jobs for t in times):,}",
                f"{hours:,.2f}",
                *([f"{hours * self.gpu_hour_usd:,.2f}"] if usd else []),
            ]

        body = [row(name, [time]) for name, time in self.runs]
        if len(self.runs) > 1:
            body.append(row("total", [time for _, time in self.runs]))
        price = (
            f", about ${self.total_h * self.gpu_hour_usd:,.2f} at ${self.gpu_hour_usd:g}/GPU-hour"
            if usd
            else " (--gpu-hour-usd prices it)"
        )
        return "\n".join(
            [
                f"GPU time of the SelfHosted agents on one {gpu}: {self.total_h:,.1f} GPU-hours"
                + price,
                "",
                text_table(head, body, labels=1),
                "",
                *self._sources(),
            ]
        )

    def _sources(self) -> list[str]:
        used: dict[str, tuple[Throughput, float]] = {}
        unsized: set[str] = set()
        for _, time in self.runs:
            used.update(time.rows)
            unsized.update(time.unsized)
        lines = ["throughput figures used (bench/gpu_check.py --throughput-out measures yours):"]
        for model, (row, scale) in sorted(used.items()):
            scaled = "" if scale == 1 else f", rates x{scale:.2g} for its size"
            lines.append(f"  - {model}: {row.label()}{scaled} ({row.how})")
            if row.source == "assumed":
                lines[-1] += " -- ASSUMED, not measured"
        lines += [
            "assumes: every prompt token is prefilled (no prefix-cache hit) and every dialogue "
            "runs to its last round (the dry run's upper bounds); one GPU serves and trains "
            "(generation and training add up); a model between table sizes runs at the "
            "nearest size's rates scaled by the size ratio",
        ]
        if unsized:
            lines.append(f"not priced (no size in the model name): {', '.join(sorted(unsized))}")
        return lines


def report_rows(
    runs: Iterable[tuple[str, HyperParameters, CostEstimate]],
    table: ThroughputTable,
    gpu: str = DEFAULT_GPU,
) -> list[tuple[str, GpuTime]]:
    """The GPU time of each ``(name, parameters, dry run)`` with self-hosted agents."""
    times = [(name, gpu_time(params, estimate, table, gpu)) for name, params, estimate in runs]
    return [(name, time) for name, time in times if time is not None]
