"""A tidy layout of a response tree: one level per round, leaves side by side.

Leaves take x = 0, 1, 2... depth-first, a parent centred over its first and last child, so
subtrees occupy disjoint x ranges and edges never cross.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from nip.training.algorithms.malt_tree import ResponseTree


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
