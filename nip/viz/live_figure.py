"""A plotly figure inside a widget, saved light.

Drawn into an ``ipywidgets.Output`` with the notebook's plotly renderer and redrawn whole on
change: a ``go.FigureWidget`` (plotly 6+, on anywidget) saves plotly's 5 MB bundle into every
figure's state (plotly/plotly.py#5056).
"""

from __future__ import annotations

from typing import Any

import ipywidgets
import plotly.graph_objects as go

__all__ = ["LiveFigure"]


class LiveFigure(ipywidgets.Output):
    """Shows ``figure``; after changing it (or assigning another) :meth:`draw` shows it again."""

    def __init__(self, figure: go.Figure, **kwargs: Any):
        super().__init__(**kwargs)
        self.figure = figure
        self._drawn: str | None = None

    def draw(self) -> None:
        """Display the figure as it is now (nothing when unchanged, or outside a kernel)."""
        from IPython import get_ipython

        state = self.figure.to_json()
        if state == self._drawn or get_ipython() is None:
            return
        self._drawn = state
        self.clear_output(wait=True)
        with self:
            self.figure.show()
