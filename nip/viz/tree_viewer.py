"""Browse a MALT tree in Jupyter: click a node to read its prompt and the dialogue so far.

Clicks reach Python through :class:`~nip.viz.plot_clicks.PlotClicks` when ``anywidget`` is
installed; nodes can always be chosen from the drop-down.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from importlib.util import find_spec
from typing import Any

import ipywidgets as widgets
import plotly.graph_objects as go

from nip.protocols import Decision
from nip.rollouts._transcript_html import chat_bubble, transcript_to_html
from nip.training.algorithms.malt_tree import ResponseTree
from nip.viz.live_figure import LiveFigure
from nip.viz.tree_plot import format_rewards, plot_tree, speaker_label, tree_agents


def clicks_available() -> bool:
    """Whether clicks on a figure can reach Python here (they need ``anywidget``)."""
    return find_spec("anywidget") is not None


class TreeViewer(widgets.VBox):
    """A tree figure, an agent chooser that recolours it, and a panel for the chosen node.

    Args:
        agents: The dialogue's agents by name (``session.agents``): the panel then shows the
            exact chat prompt behind each message.
        interactive: A click on a node picks it (needs ``anywidget``; the default if installed).
        plot_options: Passed on to :func:`~nip.viz.plot_tree`.
    """

    def __init__(
        self,
        tree: ResponseTree,
        agent: str = "verifier",
        *,
        agents: Mapping[str, Any] | None = None,
        interactive: bool | None = None,
        **plot_options: Any,
    ):
        self.tree = tree
        self.agents = dict(agents or {})
        self._plot_options = plot_options
        figure = plot_tree(tree, agent, **plot_options)
        self.interactive = clicks_available() if interactive is None else interactive
        self.agent_picker = widgets.Dropdown(
            options=tree_agents(tree), value=agent, description="colour by"
        )
        node_ids = figure.data[_index(figure, "nodes")].customdata
        self.node_picker = widgets.Dropdown(
            options=[(self._node_option(i), i) for i in node_ids],
            value=tree.tree_id,
            description="node",
            layout=widgets.Layout(width="32em"),
        )
        self.details = widgets.HTML()
        self.plot = LiveFigure(figure)
        self.plot.draw()
        children = [widgets.HBox([self.agent_picker, self.node_picker]), self.plot, self.details]
        self.clicks = None
        if self.interactive:
            from nip.viz.plot_clicks import PlotClicks

            self.clicks = PlotClicks()
            self.clicks.observe(self._on_click, names="clicked")
            children.insert(2, self.clicks)
        self.agent_picker.observe(self._on_agent, names="value")
        self.node_picker.observe(self._on_node, names="value")
        super().__init__(children)
        self.select(tree.tree_id)

    @property
    def figure(self) -> go.Figure:
        """The tree's figure as shown now."""
        return self.plot.figure

    # ---------------------------------------------------------------- actions
    @property
    def agent(self) -> str:
        return self.agent_picker.value

    @property
    def selected(self) -> str:
        """The id of the node shown in the panel."""
        return self.node_picker.value

    def select(self, node_id: str) -> None:
        """Show ``node_id`` in the panel (as a click on it does)."""
        if self.node_picker.value == node_id:
            self.details.value = self.node_html(node_id)
        else:
            self.node_picker.value = node_id  # its observer fills the panel

    def node_html(self, node_id: str) -> str:
        """The panel for ``node_id``: its messages in full, their prompts, the dialogue."""
        tree, node = self.tree, self.tree.nodes[node_id]
        roles = ", ".join(
            f"{'preferred' if role == 'positive' else 'non-preferred'} for {html.escape(a)}"
            for a, role in sorted(node.pair_role.items())
        )
        parts = [
            f"<h4 style='margin:4px 0'>{html.escape(speaker_label(node))} · "
            f"<code>{html.escape(node_id)}</code></h4>",
            f"<div>round {node.round} · decision: {Decision(node.decision).word} · leaves below: "
            f"{node.num_leaves}{' · ' + roles if roles else ''}</div>",
            f"<div>expected reward: {format_rewards(node.expected_reward, self.agent)}</div>",
        ]
        for turn in node.turns:
            text = turn.raw_text if turn.valid else f"(invalid turn) {turn.error}"
            parts.append(chat_bubble(f"{turn.agent} wrote", text, "#f6f8fa"))
            parts.append(self._prompt_html(node_id, turn.agent))
        if node.parent_id is not None and not self.agents:
            parts.append(
                "<p style='color:#777'>Pass <code>agents=session.agents</code> to see the exact "
                "prompts.</p>"
            )
        parts.append("<h5 style='margin:6px 0 2px'>The dialogue up to here</h5>")
        parts.append(transcript_to_html(tree.transcript_at(node_id)))
        return "".join(parts)

    # -------------------------------------------------------------- internals
    def _prompt_html(self, node_id: str, agent_name: str) -> str:
        agent = self.agents.get(agent_name)
        node = self.tree.nodes[node_id]
        if agent is None or node.parent_id is None:
            return ""
        try:
            prompt = agent.build_chat_prompt(self.tree.transcript_at(node.parent_id), node.round)
        except Exception as error:  # a widget callback must not fail silently into a log
            reason = html.escape(str(error))
            return f"<p style='color:#b00'>Could not rebuild the prompt: {reason}</p>"
        messages = "".join(
            chat_bubble(m["role"] + (f" ({m['name']})" if m.get("name") else ""), m["content"])
            for m in prompt
        )
        return (
            f"<details><summary>{html.escape(agent_name)}'s prompt ({len(prompt)} messages)"
            f"</summary>{messages}</details>"
        )

    def _node_option(self, node_id: str) -> str:
        node = self.tree.nodes[node_id]
        reward = node.expected_reward
        values = ", ".join(f"{a} {reward[a]:+.2f}" for a in tree_agents(self.tree) if a in reward)
        return f"{node_id} · {speaker_label(node)} · {values}"

    def _on_click(self, change: dict) -> None:
        point = change["new"] or {}
        if point.get("trace") == _index(self.figure, "nodes") and point.get("customdata"):
            self.select(point["customdata"])

    def _on_node(self, change: dict) -> None:
        self.details.value = self.node_html(change["new"])

    def _on_agent(self, change: dict) -> None:
        self.plot.figure = plot_tree(self.tree, change["new"], **self._plot_options)
        self.plot.draw()
        self.details.value = self.node_html(self.selected)

    def __repr__(self) -> str:
        return (
            f"TreeViewer(tree={self.tree.tree_id!r}, agent={self.agent!r}, "
            f"nodes={len(self.tree.nodes)}, selected={self.selected!r})"
        )


def _index(figure: go.Figure, role: str) -> int:
    return next(i for i, trace in enumerate(figure.data) if trace.meta == role)
