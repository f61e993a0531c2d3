"""Protocols side by side: accuracy with confidence intervals, overall and per true label.

::

    batches = run_protocols(params, ["nip", "debate", "solo_verifier"], n=32)
    figure, table = compare_protocols(batches)
    figure, table = compare_protocols({"nip": "runs/nip", "debate": "runs/debate"})
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import plotly.graph_objects as go

from nip.parameters import HyperParameters, PureTextAgentParameters
from nip.protocols import Decision, protocol_class
from nip.rollouts.records import Transcript
from nip.runs.run_dir import RunDirectory
from nip.settings import ExperimentSettings
from nip.viz import _style
from nip.viz.intervals import wilson_interval
from nip.viz.results import RunResults

if TYPE_CHECKING:
    from nip.rollouts.engine import RolloutBatch

#: The item subsets compared, each a group of bars.
SUBSETS = {"all items": (0, 1), "correct solutions": (1,), "incorrect solutions": (0,)}

ProtocolResult = RunResults | str | Path | RunDirectory | Iterable[Transcript]


def _transcripts(result: ProtocolResult, split: str, iteration: int | None) -> list[Transcript]:
    if isinstance(result, str | Path | RunDirectory):
        result = RunResults(result)
    if isinstance(result, RunResults):
        return result.transcripts(split, iteration)
    return list(result)  # a RolloutBatch or any iterable of transcripts


def comparison_table(
    results: Mapping[str, ProtocolResult],
    *,
    split: str = "test",
    iteration: int | None = None,
    confidence: float = 0.95,
) -> pd.DataFrame:
    """Accuracy of each protocol on all items, on correct and on incorrect solutions.

    Args:
        results: Protocol (or any label) -> a run directory / :class:`RunResults` (its
            ``split`` rollouts at ``iteration``, the latest by default), a ``RolloutBatch``
            or a list of transcripts.
        split: Which rollouts of a run directory.
        iteration: Which iteration of a run directory (default: the latest saved).
        confidence: The intervals' coverage.

    Returns:
        One row per (protocol, items): ``dialogues, correct, accuracy, ci_low, ci_high,
        no_decision_rate, mean_rounds``.
    """
    rows = []
    for protocol, result in results.items():
        transcripts = _transcripts(result, split, iteration)
        for subset, labels in SUBSETS.items():
            chosen = [t for t in transcripts if t.datapoint.y in labels]
            n, correct = len(chosen), sum(t.correct for t in chosen)
            low, high = wilson_interval(correct, n, confidence) if n else (float("nan"),) * 2
            rows.append(
                {
                    "protocol": protocol,
                    "items": subset,
                    "dialogues": n,
                    "correct": correct,
                    "accuracy": correct / n if n else float("nan"),
                    "ci_low": low,
                    "ci_high": high,
                    "no_decision_rate": (
                        sum(t.decision is Decision.NONE for t in chosen) / n if n else float("nan")
                    ),
                    "mean_rounds": (
                        statistics.fmean(t.num_rounds for t in chosen) if n else float("nan")
                    ),
                }
            )
    return pd.DataFrame(rows)


def compare_protocols(
    results: Mapping[str, ProtocolResult],
    *,
    split: str = "test",
    iteration: int | None = None,
    confidence: float = 0.95,
    title: str | None = None,
) -> tuple[go.Figure, pd.DataFrame]:
    """A grouped bar chart of accuracy per protocol, with Wilson intervals, and its table.

    Args:
        results: As for :func:`comparison_table`.
        split: Which rollouts of a run directory.
        iteration: Which iteration of a run directory (default: the latest saved).
        confidence: The intervals' coverage.
        title: The figure's title.

    Returns:
        ``(figure, table)``: one ``go.Bar`` per item subset, protocols along x; the table
        from :func:`comparison_table`.
    """
    table = comparison_table(results, split=split, iteration=iteration, confidence=confidence)
    figure = go.Figure()
    for index, subset in enumerate(SUBSETS):
        rows = table[table["items"] == subset]
        figure.add_trace(
            go.Bar(
                x=rows["protocol"],
                y=rows["accuracy"],
                name=subset,
                marker_color=_style.series_colour(index),
                error_y=dict(
                    type="data",
                    symmetric=False,
                    array=rows["ci_high"] - rows["accuracy"],
                    arrayminus=rows["accuracy"] - rows["ci_low"],
                    thickness=1.5,
                ),
                customdata=rows[["correct", "dialogues", "ci_low", "ci_high"]].to_numpy(),
                hovertemplate=(
                    f"<b>%{{x}}</b>, {subset}<br>accuracy %{{y:.1%}} "
                    "(%{customdata[0]}/%{customdata[1]})<br>"
                    f"{confidence:.0%} CI %{{customdata[2]:.1%}} to %{{customdata[3]:.1%}}"
                    "<extra></extra>"
                ),
            )
        )
    figure.add_hline(y=0.5, line=dict(color=_style.CHANCE_COLOUR, dash="dot", width=1))
    figure.update_layout(
        template=_style.TEMPLATE,
        barmode="group",
        title=dict(
            text=title or f"Verifier accuracy by protocol ({confidence:.0%} Wilson intervals)"
        ),
        xaxis=dict(title=dict(text="protocol")),
        yaxis=dict(title=dict(text="accuracy"), range=[0, 1.04], tickformat=".0%"),
        legend=dict(title=dict(text="items")),
    )
    return figure, table


def _protocol_params(
    params: HyperParameters, protocol: str, default_agent: PureTextAgentParameters | None
) -> HyperParameters:
    names = protocol_class(protocol).agent_names
    provers = sorted(a for a in params.agents if a != "verifier")
    fallback = default_agent or (params.agents[provers[0]] if provers else None)
    agents = {}
    for name in names:
        source = params.agents.get(name, fallback)
        if source is not None:
            agents[name] = source.to_dict()
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

    Agents keep their parameters where the protocol has them; an agent ``params`` lacks
    (``prover0`` and ``prover1`` of debate when ``params`` is for nip) gets
    ``default_agent``, or else the parameters of ``params``' first prover.

    Args:
        params: The base experiment.
        protocols: Protocol names.
        items: The datapoints; by default ``n`` items of ``split``.
        n: How many items when ``items`` is omitted (default ``rl.rollouts_per_iteration``).
        split: Which split to draw items from.
        settings: Runtime settings (backends are shared by all protocols' sessions).
        default_agent: Parameters for agents that ``params`` does not configure.

    Returns:
        Protocol -> ``RolloutBatch``, ready for :func:`compare_protocols`.
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
