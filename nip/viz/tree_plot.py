"""A MALT response tree as a node-link figure, coloured by one agent's expected reward.

Traces, always in this order, each with its role as ``meta``: "edges", "pair_links",
"preferred", "non_preferred", "nodes" (``customdata``: node ids, for click handlers), one
"speaker" legend entry per speaker. :func:`plot_trees_summary` draws many trees at a glance: an
icicle with one branch per tree, sized by leaves.

The layout is tidy: one level per round, leaves at x = 0, 1, 2... depth-first, a parent centred
over its first and last child, so subtrees occupy disjoint x ranges and edges never cross.
"""

from __future__ import annotations

import html
import itertools
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

import plotly.graph_objects as go

from nip.protocols import Decision
from nip.training.algorithms.malt_tree import ResponseTree, TreeNode
from nip.viz import _style


@dataclass(frozen=True)
class NodePosition:
    """Where a node is drawn: ``x`` across, ``depth`` levels below the root."""

    x: float
    depth: int


def tree_layout(tree: ResponseTree) -> dict[str, NodePosition]:
    """Node id -> position of every node reachable from the root, depth-first (root first)."""
    positions: dict[str, NodePosition] = {}
    leaves = itertools.count()

    def place(node_id: str, depth: int) -> float:
        positions[node_id] = NodePosition(0.0, depth)  # its place in the order: before its children
        xs = [place(child, depth + 1) for child in tree.nodes[node_id].children]
        x = (xs[0] + xs[-1]) / 2 if xs else float(next(leaves))
        positions[node_id] = NodePosition(x, depth)
        return x

    place(tree.tree_id, 0)
    return positions


# ------------------------------------- text on the figures: labels, messages, hover
ROOT_LABEL = "start"


def speaker_label(node: TreeNode) -> str:
    """Who spoke in the node's round ("prover0+prover1" when several did; "start" at a root)."""
    if node.parent_id is None:
        return ROOT_LABEL
    return "+".join(dict.fromkeys(t.agent for t in node.turns)) or "nobody"


def shorten(text: str, max_chars: int) -> str:
    """``text`` cut to ``max_chars`` characters, with an ellipsis when cut."""
    return text if len(text) <= max_chars else text[: max_chars - 1].rstrip() + "…"


def wrap_html(text: str, width: int = 70) -> str:
    """``text`` HTML-escaped and wrapped at ``width`` characters with ``<br>`` (newlines kept)."""
    lines = [
        wrapped
        for paragraph in text.splitlines() or [""]
        for wrapped in (textwrap.wrap(paragraph, width, replace_whitespace=False) or [""])
    ]
    return "<br>".join(html.escape(line) for line in lines)


def label_name(y: int) -> str:
    return "correct" if y == 1 else "incorrect"


def format_rewards(rewards: dict[str, float], first: str | None = None) -> str:
    """``"verifier +0.33, prover +0.5"``, with ``first`` leading and in bold."""
    names = sorted(rewards, key=lambda a: (a != first, a))
    parts = [f"{a} {rewards[a]:+.3g}" for a in names]
    if first in rewards:
        parts[0] = f"<b>{parts[0]}</b>"
    return ", ".join(parts)


def node_hover(tree: ResponseTree, node: TreeNode, agent: str, max_chars: int) -> str:
    """Hover text of one node: speaker, round, message, decision, rewards and pair roles."""
    if node.parent_id is None:
        head = (
            f"<b>{ROOT_LABEL}</b> · datapoint {html.escape(tree.datapoint.id)} "
            f"({label_name(tree.datapoint.y)} solution)"
        )
        lines = [head]
    else:
        lines = [f"<b>{html.escape(speaker_label(node))}</b> · round {node.round}"]
        for turn in node.turns:
            text = shorten(turn.raw_text, max_chars) if turn.valid else "(invalid turn)"
            lines.append(wrap_html(f"[{turn.agent}] {text}"))
        if node.decision is not Decision.NONE:
            lines.append(f"decision: {Decision(node.decision).word}")
    lines.append(f"expected reward: {format_rewards(node.expected_reward, agent)}")
    if node.rewards:
        lines.append(f"reward this round: {format_rewards(node.rewards)}")
    lines.append(f"leaves below: {node.num_leaves}")
    for name, role in sorted(node.pair_role.items()):
        lines.append(f"{'preferred' if role == 'positive' else 'non-preferred'} for {name}")
    lines.append(f"<i>{html.escape(node.id)}</i>")
    return "<br>".join(lines)


# ------------------------------------------------------------------- the figure
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


# ------------------------------------------------------- many trees at a glance
#: The id of the icicle's top block, above every tree (no node id has a space).
ALL_TREES = "all trees"


def plot_trees_summary(
    trees: Sequence[ResponseTree],
    agent: str = "verifier",
    *,
    max_depth: int | None = None,
    reward_range: tuple[float, float] | None = None,
    max_chars: int = 200,
    title: str | None = None,
) -> go.Figure:
    """An icicle of ``trees``: a block per node, as wide as its leaves, coloured by reward.

    The top block holds every tree, below it each tree's root, then its rounds; ``ids`` and
    ``customdata`` are node ids. Click a block to zoom into it.

    ``max_depth`` levels show at once (all by default). ``ValueError`` when two trees share an
    id, or a tree lacks expected rewards for ``agent``.
    """
    tree_ids = [t.tree_id for t in trees]
    if len(set(tree_ids)) != len(tree_ids):
        raise ValueError(f"tree ids must be unique, got {tree_ids}")
    ids, parents, labels, values, colours, hover = [ALL_TREES], [""], [""], [0], [0.0], [""]
    for tree in trees:
        rewards = expected_rewards(tree, agent)
        for node_id in tree_layout(tree):
            node = tree.nodes[node_id]
            ids.append(node_id)
            parents.append(node.parent_id or ALL_TREES)
            labels.append(_block_label(tree, node_id))
            values.append(node.num_leaves)
            colours.append(rewards[node_id])
            hover.append(node_hover(tree, node, agent, max_chars))
    # The top block: every tree's leaves, and their mean expected reward.
    roots = [i for i, parent in enumerate(parents) if parent == ALL_TREES]
    values[0] = sum(values[i] for i in roots)
    colours[0] = sum(values[i] * colours[i] for i in roots) / values[0] if values[0] else 0.0
    labels[0] = f"{len(trees)} trees"
    hover[0] = f"<b>{labels[0]}</b><br>{agent}'s mean expected reward: {colours[0]:+.3g}"

    figure = go.Figure(
        go.Icicle(
            ids=ids,
            parents=parents,
            labels=labels,
            values=values,
            branchvalues="total",
            customdata=ids,
            hovertext=hover,
            hovertemplate="%{hovertext}<extra></extra>",
            maxdepth=-1 if max_depth is None else max_depth,
            tiling=dict(orientation="v"),
            sort=False,
            marker=dict(
                colors=colours,
                showscale=True,
                **reward_colours(agent, colours, reward_range),
            ),
        )
    )
    figure.update_layout(
        template=_style.TEMPLATE,
        title=dict(
            text=title
            or f"{len(trees)} MALT trees: {agent}'s expected reward<br><sup>block width = "
            "number of leaves below; click a block to zoom</sup>"
        ),
        height=560,
        margin=dict(l=20, r=20, t=80, b=20),
    )
    return figure


def _block_label(tree: ResponseTree, node_id: str) -> str:
    node = tree.nodes[node_id]
    if node.parent_id is None:
        return f"{tree.datapoint.id} ({label_name(tree.datapoint.y)})"
    text = " ".join(t.raw_text for t in node.turns).replace("\n", " ")
    return f"{speaker_label(node)}: {shorten(text, 30)}"
