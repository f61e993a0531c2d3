"""A tidy layout of a response tree: one level per round, leaves side by side.

Leaves take consecutive x positions (0, 1, 2, ...) in depth-first order, following each
node's children in sampling order; a parent sits centred over its first and last child.
Subtrees therefore occupy disjoint x ranges, so nodes on the same level are at least one
unit apart and edges never cross.
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
    """Position every node reachable from the root.

    Args:
        tree: The tree to lay out.

    Returns:
        Node id -> position, in depth-first order (the root first).
    """
    depth: dict[str, int] = {}
    order: list[str] = []
    stack = [(tree.tree_id, 0)]
    while stack:
        node_id, level = stack.pop()
        depth[node_id] = level
        order.append(node_id)
        children = tree.nodes[node_id].children
        stack.extend((child, level + 1) for child in reversed(children))

    x: dict[str, float] = {}
    next_leaf = 0
    for node_id in order:
        if not tree.nodes[node_id].children:
            x[node_id] = float(next_leaf)
            next_leaf += 1
    for node_id in reversed(order):  # every child comes after its parent in `order`
        children = tree.nodes[node_id].children
        if children:
            x[node_id] = (x[children[0]] + x[children[-1]]) / 2
    return {node_id: NodePosition(x[node_id], depth[node_id]) for node_id in order}
