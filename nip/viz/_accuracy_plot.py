"""Accuracy per iteration with Wilson intervals: the trace and the frame shared by a run's
accuracy plot (one series per split) and the comparison of runs (one per protocol)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from nip.viz import _style


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
