"""Many MALT trees at a glance: an icicle with one branch per tree, sized by leaves."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from nip.training.algorithms.malt_tree import ResponseTree
from nip.viz import _style
from nip.viz._text import label_name, node_hover, shorten, speaker_label
from nip.viz.tree_layout import tree_layout
from nip.viz.tree_plot import expected_rewards, reward_colours

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
    ids, parents, labels, values, colours, hover = [ALL_TREES], [""], [], [], [], []
    total_leaves = 0
    weighted_reward = 0.0
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
        total_leaves += tree.root.num_leaves
        weighted_reward += rewards[tree.tree_id] * tree.root.num_leaves
    overall = weighted_reward / total_leaves if total_leaves else 0.0
    labels.insert(0, f"{len(trees)} trees")
    values.insert(0, total_leaves)
    colours.insert(0, overall)
    hover.insert(0, f"<b>{len(trees)} trees</b><br>{agent}'s mean expected reward: {overall:+.3g}")

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
