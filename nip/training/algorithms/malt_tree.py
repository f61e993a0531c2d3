"""MALT response trees as plain records: nodes, expected rewards and preference pairs.

A root is a dialogue before its first round; each child is one sample of the next round. A node
stores only its own round, so memory is linear in nodes; a node's transcript is rebuilt from
the path from the root.

Expected reward (``pure_text_malt.expected_reward_estimator``), per agent and node:

* ``recursive_mean`` (default): the expected return under the sampling policy,
  ``V(node) = r(node) + mean of V(child)``, ``V(leaf) = r(leaf)``.
* ``leaf_mean``: the original's mean, over the leaves below, of the return from the node to
  the leaf, ``(r(node) * leaves(node) + sum of children's totals) / leaves(node)``; it
  over-weights longer, more branched children. Use it to reproduce the original's runs.

The two agree whenever every child of a node has the same number of leaves below it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, get_args

from nip.parameters.trainers import ExpectedRewardEstimator
from nip.protocols import Decision
from nip.rollouts.records import AgentTurn, ChannelMessage, Datapoint, Transcript


@dataclass
class TreeNode:
    """One node: the state after a round. The root (``round == -1``) has played nothing."""

    id: str
    parent_id: str | None
    tree_id: str
    round: int
    turns: tuple[AgentTurn, ...] = ()
    messages: tuple[ChannelMessage, ...] = ()
    rewards: dict[str, float] = field(default_factory=dict)
    done: bool = False
    terminated: bool = False
    decision: Decision = Decision.NONE
    #: The verifier's continuous score when it decided in this node's round.
    score: float | None = None
    children: list[str] = field(default_factory=list)
    num_leaves: int = 1
    expected_reward: dict[str, float] = field(default_factory=dict)
    #: Per agent: "positive" or "negative" when this node is half of a preference pair.
    pair_role: dict[str, str] = field(default_factory=dict)

    @property
    def is_leaf(self) -> bool:
        return not self.children

    def acted(self, agent: str) -> bool:
        """Whether ``agent`` wrote a valid turn in this node's round."""
        return any(t.agent == agent and t.valid for t in self.turns)

    def turn_of(self, agent: str) -> AgentTurn | None:
        return next((t for t in self.turns if t.agent == agent), None)


@dataclass(frozen=True)
class PreferencePair:
    """Two sibling nodes where ``agent`` acted: the preferred and the non-preferred one."""

    tree_id: str
    agent: str
    parent_id: str
    chosen_id: str
    rejected_id: str
    chosen_reward: float
    rejected_reward: float


@dataclass
class ResponseTree:
    """All sampled continuations of one dialogue."""

    tree_id: str
    protocol: str
    datapoint: Datapoint
    seed: int
    stances: dict[str, int]
    iteration: int = 0
    nodes: dict[str, TreeNode] = field(default_factory=dict)
    pairs: list[PreferencePair] = field(default_factory=list)

    @classmethod
    def new(
        cls,
        tree_id: str,
        protocol: str,
        datapoint: Datapoint,
        seed: int,
        stances: dict[str, int],
        iteration: int = 0,
    ) -> ResponseTree:
        tree = cls(tree_id, protocol, datapoint, seed, dict(stances), iteration)
        tree.nodes[tree_id] = TreeNode(id=tree_id, parent_id=None, tree_id=tree_id, round=-1)
        return tree

    @property
    def root(self) -> TreeNode:
        return self.nodes[self.tree_id]

    def add_child(self, parent: TreeNode, index: int, **fields: Any) -> TreeNode:
        """Attach a child; its id extends the parent's (unique across trees and iterations)."""
        node = TreeNode(
            id=f"{parent.id}.{index}", parent_id=parent.id, tree_id=self.tree_id, **fields
        )
        self.nodes[node.id] = node
        parent.children.append(node.id)
        return node

    def path(self, node_id: str) -> list[TreeNode]:
        """The nodes from the root's first child down to ``node_id``."""
        path = []
        node = self.nodes[node_id]
        while node.parent_id is not None:
            path.append(node)
            node = self.nodes[node.parent_id]
        return path[::-1]

    def transcript_at(self, node_id: str) -> Transcript:
        """The dialogue as it stands at ``node_id``."""
        transcript = Transcript(
            protocol=self.protocol,
            datapoint=self.datapoint,
            seed=self.seed,
            stances=dict(self.stances),
            iteration=self.iteration,
            id=node_id,
        )
        for node in self.path(node_id):
            transcript.turns.extend(node.turns)
            transcript.messages.extend(node.messages)
            transcript.rewards.append(dict(node.rewards))
            transcript.done, transcript.terminated = node.done, node.terminated
            transcript.decision, transcript.score = node.decision, node.score
        return transcript

    def leaves(self) -> list[TreeNode]:
        return [n for n in self.nodes.values() if n.is_leaf and n.parent_id is not None]

    # -------------------------------------------------------------------- rewards
    def compute_expected_rewards(
        self,
        agents: tuple[str, ...],
        estimator: ExpectedRewardEstimator = "recursive_mean",
    ) -> None:
        """Fill ``num_leaves`` and ``expected_reward`` for every node (leaves first), for
        ``agents``, by ``estimator``: ``recursive_mean`` (default) or ``leaf_mean`` (see the module
        docstring)."""
        if estimator not in get_args(ExpectedRewardEstimator):
            raise ValueError(f"unknown expected-reward estimator {estimator!r}")
        totals: dict[str, dict[str, float]] = {}
        for node in sorted(self.nodes.values(), key=lambda n: n.id.count("."), reverse=True):
            own = {a: node.rewards.get(a, 0.0) for a in agents}
            children = [self.nodes[c] for c in node.children]
            node.num_leaves = sum(c.num_leaves for c in children) if children else 1
            if not children:
                totals[node.id] = own
            elif estimator == "recursive_mean":
                totals[node.id] = {
                    a: own[a] + sum(c.expected_reward[a] for c in children) / len(children)
                    for a in agents
                }
            else:
                totals[node.id] = {
                    a: own[a] * node.num_leaves + sum(totals[c.id][a] for c in children)
                    for a in agents
                }
            divisor = node.num_leaves if estimator == "leaf_mean" else 1
            node.expected_reward = {a: totals[node.id][a] / divisor for a in agents}

    # -------------------------------------------------------------------- exports
    def to_records(self) -> list[dict[str, Any]]:
        """One flat row per node (for DataFrames and the tree viewer)."""
        rows = []
        for node in self.nodes.values():
            row: dict[str, Any] = {
                "tree_id": self.tree_id,
                "node_id": node.id,
                "parent_id": node.parent_id,
                "depth": node.id.count(".") - self.tree_id.count("."),
                "round": node.round,
                "agents": ",".join(t.agent for t in node.turns),
                "text": "\n\n".join(f"[{t.agent}] {t.raw_text}" for t in node.turns),
                "decision": Decision(node.decision).word,
                "done": node.done,
                "num_leaves": node.num_leaves,
                "y": self.datapoint.y,
            }
            for agent, value in node.expected_reward.items():
                row[f"{agent}.expected_reward"] = value
            for agent, value in node.rewards.items():
                row[f"{agent}.reward"] = value
            for agent, role in node.pair_role.items():
                row[f"{agent}.pair"] = role
            rows.append(row)
        return rows

    def to_dict(self) -> dict[str, Any]:
        return {
            "tree_id": self.tree_id,
            "protocol": self.protocol,
            "datapoint": asdict(self.datapoint),
            "seed": self.seed,
            "stances": self.stances,
            "iteration": self.iteration,
            "nodes": [
                {
                    **{k: v for k, v in asdict(n).items() if k not in ("turns", "messages")},
                    "decision": int(n.decision),
                    "turns": [t.to_dict() for t in n.turns],
                    "messages": [asdict(m) for m in n.messages],
                }
                for n in self.nodes.values()
            ],
            "pairs": [asdict(p) for p in self.pairs],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ResponseTree:
        pairs = [PreferencePair(**p) for p in data.get("pairs", [])]
        tree = cls(
            **{**data, "datapoint": Datapoint(**data["datapoint"]), "nodes": {}, "pairs": pairs}
        )
        for raw in data["nodes"]:
            node = TreeNode(
                **{
                    **raw,
                    "decision": Decision(raw["decision"]),
                    "turns": tuple(AgentTurn.from_dict(t) for t in raw["turns"]),
                    "messages": tuple(ChannelMessage(**m) for m in raw["messages"]),
                }
            )
            tree.nodes[node.id] = node
        return tree

    def __repr__(self) -> str:
        return (
            f"ResponseTree({self.tree_id!r}, {self.protocol}, nodes={len(self.nodes)}, "
            f"leaves={len(self.leaves())}, pairs={len(self.pairs)})"
        )
