"""The verifier's decisions against the true labels: a confusion matrix with counts."""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd
import plotly.graph_objects as go

from nip.protocols import Decision
from nip.rollouts.records import Transcript
from nip.viz import _style

LABELS = {1: "correct solution", 0: "incorrect solution"}
#: The columns, in order.
DECISIONS = (Decision.ACCEPT, Decision.REJECT, Decision.NONE)


def confusion_matrix(transcripts: Iterable[Transcript]) -> pd.DataFrame:
    """Counts of the verifier's decisions (columns, "neither" when chosen) per true label."""
    transcripts = list(transcripts)
    columns = [d.word for d in DECISIONS]
    if any(t.decision is Decision.NEITHER for t in transcripts):
        columns.append(Decision.NEITHER.word)
    index = pd.Index(list(LABELS.values()), name="true label")
    counts = pd.DataFrame(0, index, pd.Index(columns, name="verifier decision"), dtype=int)
    for transcript in transcripts:
        counts.loc[LABELS[transcript.datapoint.y], Decision(transcript.decision).word] += 1
    return counts


def plot_confusion(transcripts: Iterable[Transcript], *, title: str | None = None) -> go.Figure:
    """A heatmap of :func:`confusion_matrix`, each cell showing its count and row share.

    One ``go.Heatmap`` whose ``z`` holds the counts; "no decision" counts as wrong.
    """
    counts = confusion_matrix(transcripts)
    totals = counts.sum(axis=1)
    text = [
        [
            f"{count}<br>({count / totals[label]:.0%})" if totals[label] else "0"
            for count in counts.loc[label]
        ]
        for label in counts.index
    ]
    figure = go.Figure(
        go.Heatmap(
            z=counts.to_numpy().tolist(),
            x=list(counts.columns),
            y=list(counts.index),
            text=text,
            texttemplate="%{text}",
            textfont=dict(size=15),
            colorscale="Blues",
            showscale=False,
            xgap=2,
            ygap=2,
            hovertemplate="true label: %{y}<br>verifier: %{x}<br>%{z} dialogues<extra></extra>",
        )
    )
    figure.update_layout(
        template=_style.TEMPLATE,
        title=dict(text=title or f"Verifier decisions ({int(totals.sum())} dialogues)"),
        xaxis=dict(title=dict(text="verifier decision"), side="bottom"),
        yaxis=dict(title=dict(text="true label"), autorange="reversed"),
        width=560,
        height=380,
    )
    return figure
