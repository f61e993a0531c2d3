"""A tidy layout of a response tree: one level per round, leaves side by side.

Leaves take x = 0, 1, 2... depth-first, a parent centred over its first and last child, so
subtrees occupy disjoint x ranges and edges never cross.
"""

from __future__ import annotations

from dataclasses import dataclass

from nip.training.algorithms.malt_tree import ResponseTree


@dataclass(frozen=True)
class NodePosition:
    """Where a node is drawn: ``x`` across, ``depth`` levels below the root."""

    x: float
    depth: int


def tree_layout(tree: ResponseTree) -> dict[str, NodePosition]:
    """Node id -> position of every node reachable from the root, depth-first (root first)."""
    depth: dict[str, int] = {}
    order: list[str] = []
    stack = [(tree.tree_id, 0)]
    while stack:
        node_id, level = stack.pop()
        depth[node_id] = level
        order.append(node_id)
        children = tree.nodes[node_id].children
        stack.extend((child, level + 1) for child in reversed(children))

    leaves = [node_id for node_id in order if not tree.nodes[node_id].children]
    x = {node_id: float(k) for k, node_id in enumerate(leaves)}
    for node_id in reversed(order):  # every child comes after its parent in `order`
        children = tree.nodes[node_id].children
        if children:
            x[node_id] = (x[children[0]] + x[children[-1]]) / 2
    return {node_id: NodePosition(x[node_id], depth[node_id]) for node_id in order}
