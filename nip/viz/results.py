"""A run's results from its directory: accuracy with confidence intervals, reward curves.

``run = load_run("runs/exp1")`` shows a summary table in Jupyter; ``run.plot_accuracy()``,
``run.plot_rewards()`` and ``run.plot_confusion("test")`` draw it.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from nip.analysis.metrics import rollout_metrics
from nip.rollouts.records import Transcript
from nip.runs.run_dir import RunDirectory
from nip.training.algorithms.malt_tree import ResponseTree
from nip.viz import _style
from nip.viz.confusion import plot_confusion
from nip.viz.intervals import wilson_interval

#: Metrics columns the accuracy table keeps, in order.
ACCURACY_COLUMNS = [
    "split",
    "iteration",
    "num_dialogues",
    "correct",
    "accuracy",
    "ci_low",
    "ci_high",
]


class RunResults:
    """The results saved in one run directory, read when asked (so a live run stays current)."""

    def __init__(self, run_dir: str | Path | RunDirectory):
        self.run_dir = run_dir if isinstance(run_dir, RunDirectory) else RunDirectory(run_dir)

    @property
    def path(self) -> Path:
        return self.run_dir.path

    @property
    def hyper_params(self) -> dict[str, Any]:
        """The saved parameters, as a plain dict ({} when not saved)."""
        exists = self.run_dir.exists("hyper_params.json")
        return self.run_dir.read_json("hyper_params.json") if exists else {}

    def rollout_files(self) -> list[tuple[str, int]]:
        """Every saved ``(split, iteration)`` of rollouts, sorted."""
        stems = (p.stem.rpartition("_it") for p in (self.path / "rollouts").glob("*_it*.jsonl"))
        return sorted((split, int(number)) for split, _, number in stems)

    def transcripts(self, split: str = "test", iteration: int | None = None) -> list[Transcript]:
        """The transcripts of ``split`` at ``iteration`` (default: the latest saved).

        Raises ``FileNotFoundError`` when none were saved."""
        saved = [i for s, i in self.rollout_files() if s == split]
        if iteration is None and saved:
            iteration = saved[-1]
        if iteration not in saved:
            raise FileNotFoundError(
                f"{self.path} has no {split!r} rollouts"
                + (f" for iteration {iteration}" if iteration is not None else "")
                + f"; saved: {self.rollout_files() or 'none'}"
            )
        return self.run_dir.load_rollouts(split, iteration)

    def trees(self, iteration: int) -> list[ResponseTree]:
        """The MALT trees of ``iteration``."""
        rows = self.run_dir.read_jsonl(f"malt/trees_it{iteration:04d}.jsonl")
        return [ResponseTree.from_dict(row) for row in rows]

    def metrics_dataframe(self) -> pd.DataFrame:
        """One row per (split, iteration), ``num_dialogues`` completed from the rollouts."""
        rows = {(r["split"], r["iteration"]): r for r in self.run_dir.metrics_records()}
        for split, iteration in self.rollout_files():
            row = rows.get((split, iteration))
            if row is None:
                transcripts = self.run_dir.load_rollouts(split, iteration)
                row = {"split": split, "iteration": iteration, **rollout_metrics(transcripts)}
                rows[(split, iteration)] = row
            elif row.get("num_dialogues") is None:
                row["num_dialogues"] = len(self.run_dir.load_rollouts(split, iteration))
        return pd.DataFrame([rows[key] for key in sorted(rows)])

    def accuracy_table(self, confidence: float = 0.95) -> pd.DataFrame:
        """Accuracy per (split, iteration) with counts and a Wilson interval."""
        return accuracy_table(self.metrics_dataframe(), confidence)

    def plot_accuracy(self, **kwargs: Any) -> go.Figure:
        return plot_accuracy(self, **kwargs)

    def plot_rewards(self, **kwargs: Any) -> go.Figure:
        return plot_rewards(self, **kwargs)

    def plot_confusion(self, split: str = "test", iteration: int | None = None) -> go.Figure:
        """The verifier's decisions against the true labels, for one saved batch."""
        transcripts = self.transcripts(split, iteration)
        iteration = transcripts[0].iteration if iteration is None and transcripts else iteration
        label = f"{split}, iteration {iteration}" if iteration is not None else split
        return plot_confusion(transcripts, title=f"Verifier decisions ({label})")

    # ------------------------------------------------------------------ display
    def _headline(self) -> str:
        hp = self.hyper_params
        table = self.accuracy_table()
        parts = [
            f"protocol={hp.get('interaction_protocol', '?')}",
            f"trainer={hp.get('trainer', '?')}",
        ]
        for split in ("train", "test"):
            rows = table[table["split"] == split]
            if len(rows):
                last = rows.iloc[-1]
                parts.append(
                    f"{split} accuracy={last['accuracy']:.3f} "
                    f"(n={int(last['num_dialogues'])}, it {int(last['iteration'])})"
                )
        return ", ".join(parts)

    def __repr__(self) -> str:
        return f"RunResults({str(self.path)!r}, {self._headline()})"

    def _repr_html_(self) -> str:
        table = self.accuracy_table()
        body = table.to_html(index=False, float_format=lambda v: f"{v:.3f}", na_rep="–")
        return (
            f"<div><b>RunResults</b> <code>{html.escape(str(self.path))}</code><br>"
            f"{html.escape(self._headline())}{body}</div>"
        )


def load_run(run_dir: str | Path | RunDirectory) -> RunResults:
    """The results of the run saved in ``run_dir`` (see :class:`RunResults`)."""
    return RunResults(run_dir)


def _metrics(source: RunResults | str | Path | RunDirectory | pd.DataFrame) -> pd.DataFrame:
    if isinstance(source, pd.DataFrame):
        return source
    results = source if isinstance(source, RunResults) else RunResults(source)
    return results.metrics_dataframe()


def accuracy_table(
    source: RunResults | str | Path | RunDirectory | pd.DataFrame, confidence: float = 0.95
) -> pd.DataFrame:
    """Accuracy per (split, iteration), the count of correct dialogues and a Wilson interval.

    Args:
        source: A run (directory or :class:`RunResults`) or a metrics DataFrame with
            ``split``, ``iteration``, ``accuracy`` and ``num_dialogues`` (else ``ValueError``).

    Returns:
        Columns :data:`ACCURACY_COLUMNS`.
    """
    frame = _metrics(source)
    if frame.empty:
        return pd.DataFrame(columns=ACCURACY_COLUMNS)
    missing = {"split", "iteration", "accuracy", "num_dialogues"} - set(frame.columns)
    if missing:
        raise ValueError(
            f"accuracy needs the columns {sorted(missing)}; pass the run directory to count "
            "dialogues from its saved rollouts"
        )
    n = frame["num_dialogues"].astype(int)
    accuracy = frame["accuracy"].astype(float)  # None: NaN
    correct = (accuracy * n).round().fillna(0).astype(int)
    table = pd.DataFrame(
        {"split": frame["split"], "iteration": frame["iteration"].astype(int)}
        | {"num_dialogues": n, "correct": correct, "accuracy": accuracy}
    )
    intervals = [wilson_interval(c, k, confidence) for c, k in zip(correct, n, strict=True)]
    table["ci_low"], table["ci_high"] = zip(*intervals, strict=True)
    return table.sort_values(["split", "iteration"], kind="stable").reset_index(drop=True)


# ------------------- accuracy with Wilson intervals (here and in the comparison of runs)
def error_bars(rows: pd.DataFrame, **style: Any) -> dict[str, Any]:
    """Asymmetric error bars from ``accuracy`` to ``ci_low`` and ``ci_high``."""
    return dict(
        type="data",
        symmetric=False,
        array=rows["ci_high"] - rows["accuracy"],
        arrayminus=rows["accuracy"] - rows["ci_low"],
        thickness=1.5,
        **style,
    )


def accuracy_trace(
    rows: pd.DataFrame,
    *,
    name: str,
    offset: float,
    line: dict[str, Any],
    confidence: float,
    dialogues_column: str,
    extra_hover: tuple[str, str] | None = None,
) -> go.Scatter:
    """One series: accuracy per iteration with Wilson error bars, drawn ``offset`` aside.

    ``rows`` has ``iteration``, ``accuracy``, ``ci_low``, ``ci_high``, ``correct`` and
    ``dialogues_column``; ``extra_hover`` is a ``(column, text)`` added to the count.
    """
    columns = ["correct", dialogues_column, "ci_low", "ci_high", "iteration"]
    count = "(%{customdata[0]}/%{customdata[1]})"
    if extra_hover is not None:
        columns.append(extra_hover[0])
        count = f"(%{{customdata[0]}}/%{{customdata[1]}}, %{{customdata[5]}} {extra_hover[1]})"
    return go.Scatter(
        x=rows["iteration"] + offset,
        y=rows["accuracy"],
        mode="lines+markers",
        name=name,
        line=line,
        error_y=error_bars(rows, width=5),
        customdata=rows[columns].to_numpy(),
        hovertemplate=(
            f"<b>{name}</b>, iteration %{{customdata[4]}}<br>accuracy %{{y:.1%}} {count}<br>"
            f"{confidence:.0%} CI %{{customdata[2]:.1%}} to %{{customdata[3]:.1%}}"
            "<extra></extra>"
        ),
    )


def frame_accuracy_figure(
    figure: go.Figure, *, title: str, legend_title: str, iterations: Iterable[float] = ()
) -> go.Figure:
    """The chance line, axes (accuracy in %, the ``iterations``' axis), title and legend."""
    figure.add_hline(
        y=0.5,
        line=dict(color=_style.CHANCE_COLOUR, dash="dot", width=1),
        annotation_text="chance",
        annotation_position="bottom right",
    )
    figure.update_layout(
        template=_style.TEMPLATE,
        title=dict(text=title),
        xaxis=_style.iteration_axis(iterations),
        yaxis=dict(title=dict(text="accuracy"), range=[0, 1.04], tickformat=".0%"),
        legend=dict(title=dict(text=legend_title)),
        hovermode="closest",
    )
    return figure


#: How far apart (in iterations) the splits' points of one iteration are drawn.
_DODGE = 0.08


def plot_accuracy(
    source: RunResults | str | Path | RunDirectory | pd.DataFrame,
    *,
    confidence: float = 0.95,
    title: str | None = None,
) -> go.Figure:
    """The verifier's accuracy per iteration, one line per split, with Wilson intervals.

    No decision counts as wrong; the dotted line is chance. ``source`` as in
    :func:`accuracy_table`. One ``go.Scatter`` per split, drawn slightly apart so splits
    measured at one iteration do not hide each other.
    """
    table = accuracy_table(source, confidence)
    figure = go.Figure()
    splits = table.groupby("split", sort=True)
    for index, (split, rows) in enumerate(splits):
        dodge = _DODGE * (index - (len(splits) - 1) / 2)
        figure.add_trace(
            accuracy_trace(
                rows,
                name=split,
                offset=dodge,
                line=_line(index, split),
                confidence=confidence,
                dialogues_column="num_dialogues",
            )
        )
    frame_accuracy_figure(
        figure,
        title=title or f"Verifier accuracy per iteration ({confidence:.0%} Wilson intervals)",
        legend_title="split",
        iterations=table["iteration"],
    )
    return figure


def plot_rewards(
    source: RunResults | str | Path | RunDirectory | pd.DataFrame,
    *,
    agents: list[str] | None = None,
    title: str | None = None,
) -> go.Figure:
    """Each agent's mean episode reward per iteration; colour per agent, dash per split.

    Error bars are ±1.96 standard errors where ``std_episode_reward`` is saved; one
    ``go.Scatter`` per (agent, split), named ``"<agent> (<split>)"``.

    Args:
        source: A run or a metrics DataFrame with ``<agent>.mean_episode_reward`` columns.
        agents: Which agents (default: every agent with a reward column, verifier first).
    """
    frame = _metrics(source)
    suffix = ".mean_episode_reward"
    found = [c[: -len(suffix)] for c in frame.columns if c.endswith(suffix)]
    agents = agents or sorted(found, key=lambda a: (a != "verifier", a))
    frame = frame.sort_values(["split", "iteration"], kind="stable")
    figure = go.Figure()
    for index, agent in enumerate(agents):
        for split, rows in frame.groupby("split", sort=True):
            mean = rows[f"{agent}{suffix}"].astype(float)
            error = None
            if f"{agent}.std_episode_reward" in rows and "num_dialogues" in rows:
                # The saved std is the population std: the standard error is std / sqrt(n - 1).
                n = rows["num_dialogues"].astype(float)
                std = rows[f"{agent}.std_episode_reward"].astype(float)
                error = (std / (n - 1).clip(lower=1) ** 0.5).where(n > 1, 0.0)
            figure.add_trace(
                go.Scatter(
                    x=rows["iteration"],
                    y=mean,
                    mode="lines+markers",
                    name=f"{agent} ({split})",
                    legendgroup=agent,
                    line=_line(index, split),
                    error_y=None if error is None else dict(type="data", array=1.96 * error),
                    hovertemplate=f"<b>{agent}</b> ({split}), iteration %{{x}}<br>"
                    "mean episode reward %{y:.3f}<extra></extra>",
                )
            )
    figure.update_layout(
        template=_style.TEMPLATE,
        title=dict(text=title or "Mean episode reward per iteration"),
        xaxis=_style.iteration_axis(frame["iteration"]),
        yaxis=dict(title=dict(text="mean episode reward")),
        legend=dict(title=dict(text="agent (split)")),
        hovermode="closest",
    )
    return figure


def _line(index: int, split: str) -> dict[str, str]:
    return dict(color=_style.series_colour(index), dash=_style.SPLIT_DASHES.get(split, "solid"))
