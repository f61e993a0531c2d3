"""A MALT response tree as a node-link figure, coloured by one agent's expected reward.

Traces, always in this order, each with its role as ``meta``: "edges", "pair_links",
"preferred", "non_preferred", "nodes" (``customdata``: node ids, for click handlers), one
"speaker" legend entry per speaker.
"""

from __future__ import annotations

import plotly.graph_objects as go

from nip.training.algorithms.malt_tree import ResponseTree
from nip.viz import _style
from nip.viz._text import ROOT_LABEL, label_name, node_hover, speaker_label
from nip.viz.tree_layout import NodePosition, tree_layout

NODE_SIZE = 15
RING_SIZE = 27
LEGEND_OUTLINE = dict(color=_style.NODE_OUTLINE, width=1.5)


def tree_agents(tree: ResponseTree) -> list[str]:
    """The agents the tree has expected rewards for, the verifier first."""
    names = {a for node in tree.nodes.values() for a in node.expected_reward}
    return sorted(names, key=lambda a: (a != "verifier", a))


def expected_rewards(tree: ResponseTree, agent: str) -> dict[str, float]:
    """Each node's expected reward for ``agent`` (``ValueError`` if the tree has none)."""
    available = tree_agents(tree)
    if agent not in available:
        hint = (
            f"it has them for: {', '.join(available)}"
            if available
            else "call tree.compute_expected_rewards(agent_names) first"
        )
        raise ValueError(f"tree {tree.tree_id!r} has no expected rewards for {agent!r}; {hint}")
    return {node_id: node.expected_reward.get(agent, 0.0) for node_id, node in tree.nodes.items()}


def reward_colours(
    agent: str, values: list[float], reward_range: tuple[float, float] | None
) -> dict:
    """A marker's colours: ``values`` on the reward scale, from ``reward_range`` (default: the
    values' range, widened when they are all equal), with its colour bar."""
    low, high = reward_range or (min(values), max(values))
    return dict(
        cmin=low - 0.5 * (low == high),
        cmax=high + 0.5 * (low == high),
        colorscale=_style.REWARD_COLORSCALE,
        colorbar=dict(title=dict(text=f"{agent}<br>expected<br>reward"), thickness=14),
    )


def plot_tree(
    tree: ResponseTree,
    agent: str = "verifier",
    *,
    reward_range: tuple[float, float] | None = None,
    max_chars: int = 300,
    title: str | None = None,
) -> go.Figure:
    """Draw ``tree`` level by level, nodes coloured by ``agent``'s expected reward.

    Symbols show who spoke; ``agent``'s preference pairs are ringed (green preferred, magenta
    not) and joined by a dashed line; hover shows a node's message, decision and rewards.

    Args:
        agent: Whose expected reward colours the nodes and whose pairs are marked.
        reward_range: The colour scale's ends; by default the range of this tree's values.
        max_chars: Longest message shown on hover.
    """
    rewards = expected_rewards(tree, agent)
    layout = tree_layout(tree)
    ids = list(layout)
    speakers = [speaker_label(tree.nodes[i]) for i in ids]
    symbols = {ROOT_LABEL: _style.ROOT_SYMBOL}
    symbols.update(_style.speaker_symbols([s for s in speakers if s != ROOT_LABEL]))
    colours = [rewards[i] for i in ids]

    pairs = [p for p in tree.pairs if p.agent == agent]
    traces = [
        _segments(
            [(layout[tree.nodes[i].parent_id], layout[i]) for i in ids[1:]],  # root first
            meta="edges",
            name="edges",
            showlegend=False,
            line=dict(color=_style.EDGE_COLOUR, width=1.5),
        ),
        _segments(
            [(layout[p.chosen_id], layout[p.rejected_id]) for p in pairs],
            meta="pair_links",
            name=f"preference pair ({agent})",
            legendgroup="pairs",
            showlegend=bool(pairs),
            line=dict(color=_style.PAIR_LINK_COLOUR, width=1.5, dash="dash"),
        ),
        _rings([p.chosen_id for p in pairs], layout, "preferred", agent),
        _rings([p.rejected_id for p in pairs], layout, "non_preferred", agent),
        go.Scatter(
            x=[layout[i].x for i in ids],
            y=[layout[i].depth for i in ids],
            mode="markers",
            meta="nodes",
            name="nodes",
            showlegend=False,
            customdata=ids,
            hovertext=[node_hover(tree, tree.nodes[i], agent, max_chars) for i in ids],
            hovertemplate="%{hovertext}<extra></extra>",
            marker=dict(
                size=NODE_SIZE,
                color=colours,
                symbol=[symbols[s] for s in speakers],
                line=dict(color=_style.NODE_OUTLINE, width=1),
                **reward_colours(agent, colours, reward_range),
            ),
        ),
    ]
    traces += [
        go.Scatter(
            x=[None],
            y=[None],
            mode="markers",
            meta="speaker",
            name=ROOT_LABEL if speaker == ROOT_LABEL else f"{speaker} spoke",
            legendgroup="speakers",
            marker=dict(symbol=symbol, size=11, color="#ffffff", line=LEGEND_OUTLINE),
        )
        for speaker, symbol in symbols.items()
        if speaker in speakers
    ]
    figure = go.Figure(traces)
    depths = sorted({p.depth for p in layout.values()})
    round_at = {layout[i].depth: tree.nodes[i].round for i in ids}
    figure.update_layout(
        template=_style.TEMPLATE,
        title=dict(
            text=title
            or f"MALT tree {tree.tree_id}: {agent}'s expected reward<br><sup>{tree.protocol} · "
            f"datapoint {tree.datapoint.id} ({label_name(tree.datapoint.y)} solution) · "
            f"{len(tree.leaves())} leaves · {len(tree.pairs)} preference pairs</sup>"
        ),
        height=220 + 80 * len(depths),
        hovermode="closest",
        hoverlabel=dict(align="left"),
        legend=dict(orientation="h", yanchor="top", y=-0.02, xanchor="left", x=0),
        xaxis=dict(visible=False),
        yaxis=dict(
            title=dict(text="round"),
            autorange="reversed",
            tickmode="array",
            tickvals=depths,
            ticktext=[ROOT_LABEL if d == 0 else f"round {round_at[d]}" for d in depths],
            showgrid=False,
            zeroline=False,
        ),
        margin=dict(l=70, r=30, t=80, b=60),
    )
    return figure


def _segments(ends: list[tuple[NodePosition, NodePosition]], **options) -> go.Scatter:
    """One line trace of the segments between each pair of positions."""
    x = [v for a, b in ends for v in (a.x, b.x, None)]
    y = [v for a, b in ends for v in (a.depth, b.depth, None)]
    return go.Scatter(x=x, y=y, mode="lines", hoverinfo="skip", **options)


def _rings(node_ids: list[str], layout: dict[str, NodePosition], role: str, agent: str):
    preferred = role == "preferred"
    return go.Scatter(
        x=[layout[i].x for i in node_ids],
        y=[layout[i].depth for i in node_ids],
        mode="markers",
        meta=role,
        name=f"{'preferred' if preferred else 'non-preferred'} ({agent})",
        legendgroup="pairs",
        showlegend=bool(node_ids),
        customdata=node_ids,
        hoverinfo="skip",  # hovering or clicking reaches the node underneath
        marker=dict(
            symbol="circle-open",
            size=RING_SIZE,
            color=_style.PREFERRED_COLOUR if preferred else _style.NON_PREFERRED_COLOUR,
            line=dict(width=3),
        ),
    )
