"""The comparison: the verifier's accuracy per protocol (or any label) and iteration, with
intervals, from runs, sweeps, or batches of dialogues.

::

    figure, table = compare_runs(["runs/nip-s1", "runs/nip-s2", "runs/debate-s1"])
    figure, table = compare_runs("runs/sweeps/paper-ei")          # a sweep stands for its cells
    figure, table = compare_runs({"before": sweep_a, "after": sweep_b}, pool_seeds=False)
    figure, table = compare_runs(run_protocols(params, ["nip", "debate"]), by_label=True)

Runs of one protocol (and trainer) with different seeds are **pooled** by default: the Wilson
interval of their pooled dialogues shows how precisely the accuracy is measured, not how it
varies between seeds (``runs`` says how many runs a point pools). ``pool_seeds=False`` draws each
run as its own series, ``over_seeds=True`` the seeds' mean with a Student-t interval. Several
iterations are drawn as lines; a single one (dialogues, or ``iteration=``) as bars.
:func:`run_protocols` plays the same items under each protocol, for the comparison.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import plotly.graph_objects as go

from nip.parameters import HyperParameters, PureTextAgentParameters
from nip.protocols import Decision, protocol_class
from nip.rollouts.records import Transcript
from nip.runs.run_dir import RunDirectory
from nip.runs.spend import RunSpend, read_spend, sum_known
from nip.runs.sweep_dir import is_sweep_dir, sweep_run_dirs
from nip.settings import ExperimentSettings
from nip.viz import _style
from nip.viz.intervals import seed_interval, wilson_interval
from nip.viz.results import RunResults, accuracy_trace, error_bars, frame_accuracy_figure

if TYPE_CHECKING:
    from nip.rollouts.engine import RolloutBatch

#: The item subsets of ``by_label``: all items, and each true label's.
SUBSETS = {"all items": (0, 1), "correct solutions": (1,), "incorrect solutions": (0,)}

#: A run directory, or a sweep directory (a :class:`~nip.sweeps.Sweep` is one).
RunSource = str | os.PathLike | RunDirectory | RunResults
#: What a label may stand for: a run or sweep, a list of them, or dialogues (a ``RolloutBatch``).
Source = RunSource | list[RunSource] | Iterable[Transcript]


def _is_run_source(source: Any) -> bool:
    return isinstance(source, str | os.PathLike | RunDirectory | RunResults)


def _path(source: RunSource) -> Path:
    return source.path if isinstance(source, RunResults | RunDirectory) else Path(source)


def _runs(source: RunSource) -> list[tuple[Path, bool]]:
    """A run directory, or a sweep's cells, each followed by its retests; with each, whether
    it is a sweep's cell. Raises ``NotARunDirectoryError`` for neither a sweep nor a run."""
    if is_sweep_dir(_path(source)):
        runs = [(run, True) for run in sweep_run_dirs(source)]
    else:
        runs = [(RunDirectory.of_run(_path(source)).path, False)]
    retest = "retest/*/hyper_params.json"
    return [
        (path, in_sweep and path == run)
        for run, in_sweep in runs
        for path in (run, *sorted(r.parent for r in run.glob(retest)))
    ]


def _unfinished(path: Path, in_sweep: bool, split: str, saved: bool) -> str | None:
    """How far a run that has not finished got (None: finished, or a retest)."""
    if path.parent.name == "retest":
        return None
    name = path.name if in_sweep else str(path)
    stage, iteration, iterations = RunDirectory(path).progress()
    if stage == "done":
        return None
    if stage == "not started":
        return f"{name} (not started)"
    shown = min(iteration + 1, iterations)
    none_yet = "" if saved else f", no {split} dialogues yet"
    return f"{name} ({stage}, iteration {shown}/{iterations}{none_yet})"


def _counts(transcripts: list[Transcript], **fields: Any) -> list[dict[str, Any]]:
    """One record per item subset: dialogues, correct decisions, no decisions, rounds."""
    records = []
    for items, labels in SUBSETS.items():
        chosen = [t for t in transcripts if t.datapoint.y in labels]
        records.append(
            {
                **fields,
                "items": items,
                "dialogues": len(chosen),
                "correct": sum(t.correct for t in chosen),
                "no_decision": sum(t.decision is Decision.NONE for t in chosen),
                "rounds": sum(t.num_rounds for t in chosen),
            }
        )
    return records


def _records(
    source: Source, label: str | None, split: str, iteration: int | None, incomplete: list[str]
) -> list:
    if isinstance(source, list | tuple) and all(map(_is_run_source, source)):
        return [r for one in source for r in _records(one, label, split, iteration, incomplete)]
    if not _is_run_source(source):
        transcripts = list(source)  # a RolloutBatch or any iterable of transcripts
        protocol = transcripts[0].protocol if transcripts else "?"
        fields = dict(protocol=protocol, trainer="-", seed=None, run=label, variant="", models="")
        return _counts(transcripts, label=label, iteration=None, **fields)
    records = []
    for path, in_sweep in _runs(source):
        found = len(records)
        if (path / "hyper_params.json").is_file():
            records += _run_records(path, label, split, iteration)
        if (unfinished := _unfinished(path, in_sweep, split, len(records) > found)) is not None:
            incomplete.append(unfinished)
    return records


def _run_records(path: Path, label: str | None, split: str, iteration: int | None) -> list:
    """The records of one saved run."""
    run = RunResults(path)
    hp = run.hyper_params
    agents = (hp.get("agents") or {}).values()
    fields = {
        "label": label,
        "protocol": hp.get("interaction_protocol", "?"),
        "trainer": hp.get("trainer", "?"),
        "seed": hp.get("seed"),
        # the agents' models (``gpt-4o-mini-2024-07-18``; several joined by ``+``)
        "models": "+".join(sorted({str(a.get("model_name", "?")) for a in agents})) or "?",
        "run": str(path),
        "variant": f" (retest {path.name})" if path.parent.name == "retest" else "",
    }
    return [
        record
        for saved_split, saved in run.rollout_files()
        if saved_split == split and iteration in (None, saved)
        for record in _counts(run.transcripts(split, saved), iteration=saved, **fields)
    ]


def _series(frame: pd.DataFrame, pool_seeds: bool) -> pd.Series:
    """Each record's series: its protocol (with trainer or models where runs mix them) or its
    label (with the protocol where a label covers several); with the seed when not pooled."""
    base = frame["protocol"].astype(str)
    if frame["trainer"].nunique() > 1:
        base += " (" + frame["trainer"].astype(str) + ")"
    if frame["models"].nunique() > 1:  # the same protocol on two models: two series
        base += " [" + frame["models"].astype(str) + "]"
    base += frame["variant"]
    labelled = frame["label"].notna()
    several = frame.groupby("label", dropna=False)["protocol"].transform("nunique") > 1
    series = base.where(~labelled, frame["label"].astype(str))
    series = series.where(~(labelled & several), frame["label"].astype(str) + ": " + base)
    if not pool_seeds:
        shared = frame.groupby([series, frame["seed"]], dropna=False)["run"].transform("nunique")
        each = frame["seed"].map(lambda s: "" if s is None else f" seed {s}")
        series += each.where(shared <= 1, " " + frame["run"].astype(str))
    return series


def comparison_table(
    sources: RunSource | Iterable[RunSource] | Mapping[str, Source],
    *,
    split: str = "test",
    iteration: int | None = None,
    by_label: bool = False,
    confidence: float = 0.95,
    pool_seeds: bool = True,
    over_seeds: bool = False,
) -> pd.DataFrame:
    """Accuracy per series and iteration, with intervals.

    Args:
        sources: Run or sweep directories, or labels (each a series) mapped to runs, sweeps or
            dialogues (a ``RolloutBatch``).
        split: Which rollouts of a run: ``test`` or ``train``.
        iteration: Only this iteration of each run (default: every saved one).
        by_label: Also each true label's items (``items``: correct or incorrect solutions).
        pool_seeds: Pool the runs of a protocol (and trainer); else one series per run.
        over_seeds: The mean of the pooled runs' accuracies with its Student-t interval
            (NaN for a single run).

    Returns:
        Columns series, protocol, trainer, split, iteration, runs, seeds, dialogues, correct,
        accuracy, ci_low, ci_high, no_decision_rate, mean_rounds, spent_usd, estimated_usd (and
        items with ``by_label``), sorted by series (a mapping's order, else by name) and
        iteration (None for dialogues outside a run). Unfinished runs count as far as they
        got; ``table.attrs["incomplete"]`` says how far.

    Raises:
        FileNotFoundError: A directory is not a run or a sweep
            (``NotARunDirectoryError``), or nothing saved ``split`` rollouts.
    """
    if isinstance(sources, Mapping):
        labelled = list(sources.items())
    elif _is_run_source(sources):
        labelled = [(None, sources)]
    else:
        labelled = [(None, source) for source in sources]
    incomplete: list[str] = []
    records = [r for label, s in labelled for r in _records(s, label, split, iteration, incomplete)]
    if not records:
        missing = f": {'; '.join(incomplete)}" if incomplete else ""
        raise FileNotFoundError(f"none of the runs saved {split!r} rollouts yet{missing}")
    frame = pd.DataFrame(records)
    frame["series"] = _series(frame, pool_seeds)
    spend = functools.cache(read_spend)
    rows = []
    keys = ["series", "iteration", "items"]
    for (series, step, items), group in frame.groupby(keys, sort=False, dropna=False):
        n, correct = int(group["dialogues"].sum()), int(group["correct"].sum())
        low, high = wilson_interval(correct, n, confidence)
        accuracy = correct / n if n else float("nan")
        if over_seeds:
            per_run = group.groupby("run")[["correct", "dialogues"]].sum()
            values = [c / d for c, d in per_run.itertuples(index=False) if d]
            accuracy, low, high = seed_interval(values, confidence)
        seeds = sorted({s for s in group["seed"] if s is not None})
        rows.append(
            {
                "series": series,
                "protocol": group["protocol"].iloc[0],
                "trainer": group["trainer"].iloc[0],
                "split": split,
                "iteration": None if pd.isna(step) else int(step),
                "runs": group["run"].nunique(),
                "seeds": ", ".join(map(str, seeds)),
                "dialogues": n,
                "correct": correct,
                "accuracy": accuracy,
                "ci_low": low,
                "ci_high": high,
                "no_decision_rate": group["no_decision"].sum() / n if n else float("nan"),
                "mean_rounds": group["rounds"].sum() / n if n else float("nan"),
                **_spent(group, step, spend),
                "items": items,
            }
        )
    table = pd.DataFrame(rows)
    order = list(dict.fromkeys(frame["series"]))
    if not isinstance(sources, Mapping):
        order.sort()
    rank = {"series": order, "items": list(SUBSETS)}
    table = table.sort_values(
        ["series", "iteration", "items"],
        key=lambda c: c.map(rank[c.name].index) if c.name in rank else c,
        kind="stable",
    )
    if not by_label:
        table = table[table["items"] == "all items"].drop(columns="items")
    table = table.reset_index(drop=True)
    table.attrs["incomplete"] = incomplete
    return table


def _spent(group: pd.DataFrame, step: Any, spend: Callable[[str], RunSpend]) -> dict[str, Any]:
    """What the group's runs spent in iteration ``step`` and their estimate of it, summed
    (None: one unknown; NaN for dialogues outside a run)."""
    runs = [r for r in group["run"].unique() if r is not None and Path(str(r)).is_dir()]
    if not runs or pd.isna(step):
        return {"spent_usd": float("nan"), "estimated_usd": float("nan")}
    at = int(step)
    return {
        "spent_usd": sum_known(spend(r).by_iteration.get(at, {}).get("total_usd") for r in runs),
        "estimated_usd": sum_known(
            spend(r).estimate.get("by_iteration", {}).get(str(at), {}).get("total_usd")
            for r in runs
        ),
    }


#: How far apart (in iterations) the series' points of one iteration are drawn.
_DODGE = 0.06


def compare_runs(
    sources: RunSource | Iterable[RunSource] | Mapping[str, Source],
    *,
    split: str = "test",
    iteration: int | None = None,
    by_label: bool = False,
    confidence: float = 0.95,
    pool_seeds: bool = True,
    over_seeds: bool = False,
    title: str | None = None,
) -> tuple[go.Figure, pd.DataFrame]:
    """The paper-style figure of the verifier's accuracy, and its table.

    Args: as :func:`comparison_table`, and ``title``, the figure's title.

    Returns:
        ``(figure, table)``: with several iterations a ``go.Scatter`` per series (drawn
        slightly apart); with one, a ``go.Bar`` per item subset. The table is
        :func:`comparison_table`'s.
    """
    table = comparison_table(
        sources,
        split=split,
        iteration=iteration,
        by_label=by_label,
        confidence=confidence,
        pool_seeds=pool_seeds,
        over_seeds=over_seeds,
    )
    subsets = table["items"] if by_label else pd.Series("all items", index=table.index)
    interval = "t intervals over seeds" if over_seeds else "Wilson intervals"
    view = "mean over seeds" if over_seeds else "seeds pooled" if pool_seeds else "each run"
    title = title or f"Verifier accuracy ({split}), {view} ({confidence:.0%} {interval})"
    legend = "protocol" if pool_seeds else "run"
    figure = go.Figure()
    if table["iteration"].nunique(dropna=False) > 1:
        lines = list(dict.fromkeys(zip(table["series"], subsets, strict=True)))
        for index, (name, items) in enumerate(lines):
            rows = table[(table["series"] == name) & (subsets == items)]
            label = name if items == "all items" else f"{name}, {items}"
            figure.add_trace(
                accuracy_trace(
                    rows,
                    name=label,
                    offset=_DODGE * (index - (len(lines) - 1) / 2),
                    line=dict(color=_style.series_colour(index)),
                    confidence=confidence,
                    dialogues_column="dialogues",
                    extra_hover=("runs", "runs"),
                )
            )
        return frame_accuracy_figure(figure, title=title, legend_title=legend), table
    for index, items in enumerate(dict.fromkeys(subsets)):
        rows = table[subsets == items]
        figure.add_trace(
            go.Bar(
                x=rows["series"],
                y=rows["accuracy"],
                name=items,
                marker_color=_style.series_colour(index),
                error_y=error_bars(rows),
                customdata=rows[["correct", "dialogues", "ci_low", "ci_high"]].to_numpy(),
                hovertemplate=(
                    f"<b>%{{x}}</b>, {items}<br>accuracy %{{y:.1%}} "
                    "(%{customdata[0]}/%{customdata[1]})<br>"
                    f"{confidence:.0%} CI %{{customdata[2]:.1%}} to %{{customdata[3]:.1%}}"
                    "<extra></extra>"
                ),
            )
        )
    frame_accuracy_figure(figure, title=title, legend_title="items")
    figure.update_layout(barmode="group", xaxis=dict(title=dict(text=legend), tickmode="auto"))
    return figure, table


# ----------------------------------------------------- the same items, each protocol
def _protocol_params(
    params: HyperParameters, protocol: str, default_agent: PureTextAgentParameters | None
) -> HyperParameters:
    names = protocol_class(protocol).agent_names
    provers = sorted(a for a in params.agents if a != "verifier")
    fallback = default_agent or (params.agents[provers[0]] if provers else None)
    sources = {name: params.agents.get(name, fallback) for name in names}
    agents = {name: source.to_dict() for name, source in sources.items() if source is not None}
    return HyperParameters.from_dict(
        {**params.to_dict(), "interaction_protocol": protocol, "agents": agents}
    )


async def run_protocols_async(
    params: HyperParameters,
    protocols: Sequence[str],
    *,
    items: Sequence[Any] | None = None,
    n: int | None = None,
    split: str = "test",
    settings: ExperimentSettings | None = None,
    default_agent: PureTextAgentParameters | None = None,
) -> dict[str, RolloutBatch]:
    """Run the same items under each protocol, with ``params`` otherwise unchanged.

    An agent ``params`` lacks (debate's provers for a nip config) gets ``default_agent``,
    or else ``params``' first prover's parameters.

    Args:
        items: The datapoints; by default ``n`` (``rl.rollouts_per_iteration``) of ``split``.

    Returns:
        Protocol -> ``RolloutBatch``, ready for :func:`~nip.viz.compare_runs`.
    """
    from nip.providers.pool import BackendPool
    from nip.session import Session

    settings = settings or ExperimentSettings(show_progress=False)
    pool = BackendPool(settings)
    batches = {}
    try:
        for protocol in protocols:
            session = Session(
                _protocol_params(params, protocol, default_agent), settings, backends=pool
            )
            if items is None:
                items = session.datapoints(n or params.rl.rollouts_per_iteration, split=split)
            batches[protocol] = await session.rollouts_async(items, description=protocol)
    finally:
        await pool.aclose()
    return batches


def run_protocols(
    params: HyperParameters, protocols: Sequence[str], **kwargs: Any
) -> dict[str, RolloutBatch]:
    """Sync :func:`run_protocols_async` (works in scripts and inside Jupyter)."""
    from nip.utils.sync import run_sync

    return run_sync(run_protocols_async(params, protocols, **kwargs))
