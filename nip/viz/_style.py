"""The look shared by every nip figure: template, colours, marker symbols, iteration axis."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

TEMPLATE = "plotly_white"

#: Low expected reward red, high blue; the middle is pale, so nodes get a dark outline.
REWARD_COLORSCALE = "RdBu"
NODE_OUTLINE = "#424242"
EDGE_COLOUR = "#bdbdbd"
PAIR_LINK_COLOUR = "#616161"
PREFERRED_COLOUR = "#1b7837"
NON_PREFERRED_COLOUR = "#c51b7d"
CHANCE_COLOUR = "#9e9e9e"

#: One colour per series (splits, agents, item subsets), in a fixed order.
SERIES_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#17becf")
SPLIT_DASHES = {"train": "solid", "test": "dash"}

ROOT_SYMBOL = "hexagram"
SPEAKER_SYMBOLS = ("circle", "square", "diamond", "triangle-up", "pentagon", "hexagon", "cross")


def series_colour(index: int) -> str:
    """The ``index``-th series colour (cycling)."""
    return SERIES_COLOURS[index % len(SERIES_COLOURS)]


def speaker_symbols(speakers: list[str]) -> dict[str, str]:
    """A marker symbol per speaker label: the verifier first, then the others by name."""
    ordered = sorted(set(speakers), key=lambda s: (s != "verifier", s))
    return {s: SPEAKER_SYMBOLS[i % len(SPEAKER_SYMBOLS)] for i, s in enumerate(ordered)}


def iteration_axis(iterations: Iterable[float]) -> dict[str, Any]:
    """An x axis of whole iterations; with one iteration, its number the one tick."""
    found = {int(i) for i in iterations if i == i}  # NaN (no iteration) left out
    if len(found) == 1:
        (only,) = found
        return dict(title=dict(text="iteration"), tickvals=[only], range=[only - 0.5, only + 0.5])
    return dict(title=dict(text="iteration"), tickmode="linear", dtick=1)
