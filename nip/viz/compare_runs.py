"""Several runs side by side: accuracy per protocol and iteration, with Wilson intervals.

::

    figure, table = compare_runs(["runs/nip-s1", "runs/nip-s2", "runs/debate-s1"])
    figure.write_html("compare.html")

Runs of the same protocol (and trainer) with different seeds are **pooled** by default: their
dialogues at an iteration are counted together and the interval is the Wilson interval of the
pooled proportion. It treats every dialogue as an independent draw, so it shows how precisely
the protocol's accuracy is measured, not how much it varies from seed to seed; the table's
``runs`` column says how many runs each point pools. ``pool_seeds=False`` draws every run as
its own series (labelled with its seed) to see that spread.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from nip.experiments.sweep_grid import is_sweep_dir, sweep_run_dirs
from nip.runs.run_dir import RunDirectory
from nip.viz import _style
from nip.viz._accuracy_plot import accuracy_trace, frame_accuracy_figure
from nip.viz.intervals import seed_interval, wilson_interval
from nip.viz.results import RunResults

#: The columns of :func:`runs_table`, in order.
RUNS_COLUMNS = [
    "series",
    "protocol",
    "trainer",
    "split",
    "iteration",
    "runs",
    "seeds",
    "dialogues",
    "correct",
    "accuracy",
    "ci_low",
    "ci_high",
]

RunSource = str | Path | RunDirectory | RunResults


def _counts(run: RunResults, split: str) -> list[dict[str, Any]]:
    """Dialogues and correct decisions per saved iteration of ``split``."""
    hp = run.hyper_params
    rows = []
    for saved_split, iteration in run.rollout_files():
        if saved_split != split:
            continue
        transcripts = run.transcripts(split, iteration)
        rows.append(
            {
                "protocol": hp.get("interaction_protocol", "?"),
                "trainer": hp.get("trainer", "?"),
                "seed": hp.get("seed"),
                "models": _models(hp),
                "run": str(run.path),
                "variant": _variant(Path(run.path)),
                "iteration": iteration,
                "dialogues": len(transcripts),
                "correct": sum(t.correct for t in transcripts),
            }
        )
    return rows


def _models(hyper_params: dict[str, Any]) -> str:
    """The run's agents' models (``gpt-4o-mini-2024-07-18``; several joined by ``+``)."""
    agents = (hyper_params.get("agents") or {}).values()
    return "+".join(sorted({str(agent.get("model_name", "?")) for agent in agents})) or "?"


def _expand_sweeps(sources: Iterable[RunSource]) -> list[tuple[RunSource, bool]]:
    """Each sweep directory (``nip sweep``) replaced by its cells' run directories, and each
    run followed by its retests (``nip retest``: ``retest/*/`` inside it); with each, whether
    it is a sweep's cell (which may not have started yet)."""
    expanded: list[tuple[RunSource, bool]] = []
    for source in sources:
        if isinstance(source, str | Path) and is_sweep_dir(source):
            expanded += [(cell, True) for cell in sweep_run_dirs(source)]
        else:
            expanded.append((source, False))
    with_retests: list[tuple[RunSource, bool]] = []
    for source, in_sweep in expanded:
        with_retests.append((source, in_sweep))
        path = source.path if isinstance(source, RunResults | RunDirectory) else Path(source)
        retests = sorted(p.parent for p in path.glob("retest/*/hyper_params.json"))
        with_retests += [(retest, False) for retest in retests]
    return with_retests


def _unfinished(run: RunResults, in_sweep: bool, split: str, rows: list) -> str | None:
    """How far a run that has not finished got (None: finished, or a retest)."""
    name = run.path.name if in_sweep else str(run.path)
    stage, iteration, iterations = run.run_dir.progress()
    if stage == "done" or _variant(run.path):
        return None
    if stage == "not started":
        return f"{name} (not started)"
    shown = min(iteration + 1, iterations)
    saved = "" if rows else f", no {split} dialogues yet"
    return f"{name} ({stage}, iteration {shown}/{iterations}{saved})"


def _variant(path: Path) -> str:
    """`` (retest test-10x)`` for a retest's directory, else empty."""
    return f" (retest {path.name})" if path.parent.name == "retest" else ""


def runs_table(
    run_dirs: Iterable[RunSource],
    *,
    split: str = "test",
    confidence: float = 0.95,
    pool_seeds: bool = True,
    over_seeds: bool = False,
) -> pd.DataFrame:
    """Accuracy per series (protocol, or run) and iteration, with Wilson intervals.

    Args:
        run_dirs: Run directories (or :class:`RunResults`), or sweep directories (each
            stands for its cells' runs).
        split: Which rollouts: ``test`` (the test passes the test scheme ran) or ``train``.
        confidence: The intervals' coverage.
        pool_seeds: Pool the runs of a protocol (and trainer); else one series per run.
        over_seeds: The accuracy is the mean of the pooled runs' (seeds') accuracies and the
            interval its Student-t interval: how much the result varies between seeds, not
            how precisely the dialogues measure it (NaN for a single run).

    Returns:
        Columns :data:`RUNS_COLUMNS`, sorted by series and iteration. A series is named
        after its protocol, with the trainer when the runs mix trainers, the agents' models
        when they mix models (``nip [gpt-4o-mini-2024-07-18]`` beside ``nip
        [Qwen/Qwen2.5-7B-Instruct]``), and with the seed (or the directory, for runs sharing
        a seed) when runs are not pooled. Runs that have not finished (a sweep's cells still
        running, or not started) count as far as they got; ``table.attrs["incomplete"]`` says
        how far each got.

    Raises:
        FileNotFoundError: A directory given is not a run or sweep, or no run saved
            ``split`` rollouts.
    """
    counts, incomplete = [], []
    for source, in_sweep in _expand_sweeps(run_dirs):
        run = source if isinstance(source, RunResults) else RunResults(source)
        if not in_sweep:
            RunDirectory.of_run(run.path)  # a folder given that holds no run
        rows = _counts(run, split) if run.run_dir.exists("hyper_params.json") else []
        if (unfinished := _unfinished(run, in_sweep, split, rows)) is not None:
            incomplete.append(unfinished)
        counts += rows
    if not counts:
        missing = f": {'; '.join(incomplete)}" if incomplete else ""
        raise FileNotFoundError(f"none of the runs saved {split!r} rollouts yet{missing}")
    frame = pd.DataFrame(counts)
    mixed_trainers = frame["trainer"].nunique() > 1
    frame["series"] = frame["protocol"]
    if mixed_trainers:
        frame["series"] += " (" + frame["trainer"] + ")"
    if frame["models"].nunique() > 1:  # the same protocol on two models: two series
        frame["series"] += " [" + frame["models"] + "]"
    frame["series"] += frame["variant"]
    if not pool_seeds:
        shared_seed = frame.groupby(["series", "seed"])["run"].transform("nunique") > 1
        frame["series"] += " " + frame["seed"].map(lambda s: f"seed {s}").where(
            ~shared_seed, frame["run"]
        )
    rows = []
    for (series, iteration), group in frame.groupby(["series", "iteration"], sort=True):
        n, correct = int(group["dialogues"].sum()), int(group["correct"].sum())
        low, high = wilson_interval(correct, n, confidence) if n else (float("nan"),) * 2
        accuracy = correct / n if n else float("nan")
        if over_seeds:
            per_run = group.groupby("run")[["correct", "dialogues"]].sum()
            values = [
                c / d for c, d in zip(per_run["correct"], per_run["dialogues"], strict=True) if d
            ]
            accuracy, low, high = seed_interval(values, confidence)
        rows.append(
            {
                "series": series,
                "protocol": group["protocol"].iloc[0],
                "trainer": group["trainer"].iloc[0],
                "split": split,
                "iteration": int(iteration),
                "runs": group["run"].nunique(),
                "seeds": ", ".join(str(s) for s in sorted(group["seed"].unique())),
                "dialogues": n,
                "correct": correct,
                "accuracy": accuracy,
                "ci_low": low,
                "ci_high": high,
            }
        )
    table = pd.DataFrame(rows, columns=RUNS_COLUMNS)
    table.attrs["incomplete"] = incomplete
    return table


#: How far apart (in iterations) the series' points of one iteration are drawn.
_DODGE = 0.06


def compare_runs(
    run_dirs: Iterable[RunSource],
    *,
    split: str = "test",
    confidence: float = 0.95,
    pool_seeds: bool = True,
    over_seeds: bool = False,
    title: str | None = None,
) -> tuple[go.Figure, pd.DataFrame]:
    """The paper-style figure: accuracy per protocol against iteration, with error bars.

    Args:
        run_dirs: Run directories (or :class:`RunResults`).
        split: ``test`` or ``train`` rollouts.
        confidence: The intervals' coverage.
        pool_seeds: Pool the runs of a protocol (see the module's docstring).
        over_seeds: Mean over seeds with a Student-t interval (see :func:`runs_table`).
        title: The figure's title.

    Returns:
        ``(figure, table)``: one ``go.Scatter`` per series (lines and markers, asymmetric
        Wilson error bars, drawn slightly apart so intervals at one iteration do not hide
        each other); the table from :func:`runs_table`.
    """
    table = runs_table(
        run_dirs,
        split=split,
        confidence=confidence,
        pool_seeds=pool_seeds,
        over_seeds=over_seeds,
    )
    figure = go.Figure()
    series = list(dict.fromkeys(table["series"]))
    for index, name in enumerate(series):
        rows = table[table["series"] == name]
        dodge = _DODGE * (index - (len(series) - 1) / 2)
        figure.add_trace(
            accuracy_trace(
                rows,
                name=name,
                offset=dodge,
                line=dict(color=_style.series_colour(index)),
                confidence=confidence,
                dialogues_column="dialogues",
                extra_hover=("runs", "run(s)"),
            )
        )
    frame_accuracy_figure(
        figure,
        title=title
        or f"Verifier accuracy ({split}) by protocol ({confidence:.0%} "
        + ("t intervals over seeds)" if over_seeds else "Wilson intervals)"),
        legend_title="protocol" if pool_seeds else "run",
    )
    return figure, table
