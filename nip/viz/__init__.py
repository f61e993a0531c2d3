"""Plotly figures of nip's results: MALT trees, accuracy with confidence intervals, protocols.

``import nip`` never loads plotly or pandas; importing ``nip.viz`` does, and the tree viewer
(ipywidgets) loads on first use. ``load_run("runs/exp1").plot_accuracy()``.
"""

from nip.extras import needs
from nip.utils.lazy import lazy_attributes

with needs("viz"):  # without pandas or plotly: one line naming the extra
    from nip.viz.compare_runs import (
        compare_runs,
        comparison_table,
        run_protocols,
        run_protocols_async,
    )
    from nip.viz.confusion import confusion_matrix, plot_confusion
    from nip.viz.intervals import wilson_interval
    from nip.viz.results import RunResults, accuracy_table, load_run, plot_accuracy, plot_rewards
    from nip.viz.tree_plot import NodePosition, plot_tree, plot_trees_summary, tree_layout

__all__ = [
    "NodePosition",
    "RunResults",
    "TreeViewer",
    "accuracy_table",
    "clicks_available",
    "compare_runs",
    "comparison_table",
    "confusion_matrix",
    "load_run",
    "plot_accuracy",
    "plot_confusion",
    "plot_rewards",
    "plot_tree",
    "plot_trees_summary",
    "run_protocols",
    "run_protocols_async",
    "tree_layout",
    "wilson_interval",
]

# The viewer needs ipywidgets (and anywidget for clicks): load it only when asked for.
__getattr__, __dir__ = lazy_attributes(
    __name__, {"TreeViewer": "nip.viz.tree_viewer", "clicks_available": "nip.viz.tree_viewer"}
)
