"""MALT: grow response trees, score their nodes, pick preference pairs, and the DPO dataset.

All trees grow together: each open node asks, per agent acting next, for
``num_responses_per_timestep`` samples in one ``n``-sampled request as soon as its parent is
sampled, so all independent requests are in flight at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nip.agents import PureTextWholeAgent
from nip.analysis.metrics import malt_metrics
from nip.backends import ChatMessage
from nip.jobs import FineTuneMethod
from nip.parameters import HyperParameters, PureTextMaltParameters
from nip.protocols import ProtocolHandler
from nip.rollouts.dialogue import Dialogue
from nip.rollouts.records import Datapoint
from nip.runs.run_dir import RunDirectory
from nip.training.algorithms.malt_tree import PreferencePair, ResponseTree, TreeNode
from nip.training.context import Progress, RunContext
from nip.utils.seeding import derive_seed


@dataclass(frozen=True)
class DpoExample:
    """One preference pair as training data: the agent's chat ``prompt`` at the branch point, and
    the preferred (``chosen``) and non-preferred (``rejected``) assistant messages."""

    prompt: tuple[ChatMessage, ...]
    chosen: str
    rejected: str

    def to_trl(self) -> dict:
        """TRL's conversational preference format."""
        return {
            "prompt": list(self.prompt),
            "chosen": [{"role": "assistant", "content": self.chosen}],
            "rejected": [{"role": "assistant", "content": self.rejected}],
        }

    def to_openai(self) -> dict:
        """The OpenAI fine-tuning API's DPO line format."""
        return {
            "input": {"messages": list(self.prompt)},
            "preferred_output": [{"role": "assistant", "content": self.chosen}],
            "non_preferred_output": [{"role": "assistant", "content": self.rejected}],
        }


async def _expand(
    tree: ResponseTree,
    node: TreeNode,
    handler: ProtocolHandler,
    agents: dict[str, PureTextWholeAgent],
    malt: PureTextMaltParameters,
    frozen: frozenset[str],
) -> list[TreeNode]:
    transcript = tree.transcript_at(node.id)
    round_id = transcript.num_rounds
    speakers = handler.active_agents(round_id, tree.seed)
    k = malt.children_per_node(speakers, frozen)
    samples = await asyncio.gather(
        *(agents[s].generate_samples(transcript, round_id, k) for s in speakers)
    )
    children = []
    for i in range(k):
        turns = [per_agent[i][0] for per_agent in samples]
        messages = [m for per_agent in samples for m in per_agent[i][1]]
        dialogue = Dialogue(handler, agents, transcript.truncated(round_id))
        dialogue.apply_round(turns, messages)
        played = dialogue.transcript
        children.append(
            tree.add_child(
                node,
                i,
                round=round_id,
                turns=tuple(turns),
                messages=tuple(messages),
                rewards=dict(played.rewards[-1]),
                done=played.done,
                terminated=played.terminated,
                decision=played.decision,
                score=played.score,
            )
        )
    return children


def tree_seed(seed: int, iteration: int, index: int) -> int:
    """The seed of the ``index``-th tree of ``iteration`` (its turn schedule and samples)."""
    return derive_seed(seed, "malt-tree", iteration, index)


async def build_trees_async(
    handler: ProtocolHandler,
    agents: dict[str, PureTextWholeAgent],
    datapoints: Sequence[Datapoint],
    *,
    malt: PureTextMaltParameters,
    seed: int,
    iteration: int = 0,
    frozen_agents: frozenset[str] = frozenset(),
) -> list[ResponseTree]:
    """Grow one response tree per datapoint, score every node and select pairs."""
    trees = []
    for index, datapoint in enumerate(datapoints):
        stances = {p: handler.prover_stance(p, datapoint.stance) for p in handler.prover_names}
        trees.append(
            ResponseTree.new(
                f"it{iteration}-t{index:05d}",
                handler.name,
                datapoint,
                tree_seed(seed, iteration, index),
                stances,
                iteration,
            )
        )
    await _grow(trees, handler, agents, malt, frozen_agents)
    for tree in trees:
        tree.compute_expected_rewards(handler.agent_names, malt.expected_reward_estimator)
        select_pairs(tree, handler, malt, seed=seed)
    return trees


async def _grow(
    trees: list[ResponseTree],
    handler: ProtocolHandler,
    agents: dict[str, PureTextWholeAgent],
    malt: PureTextMaltParameters,
    frozen: frozenset[str],
) -> None:
    """Expand every open node as soon as its parent's samples arrive (no per-level barrier);
    nodes are then put back in breadth-first order, so saved trees do not depend on timing."""

    async def expand(tree: ResponseTree, node: TreeNode) -> None:
        for child in await _expand(tree, node, handler, agents, malt, frozen):
            if not child.done:
                group.create_task(expand(tree, child))

    try:
        async with asyncio.TaskGroup() as group:
            for tree in trees:
                group.create_task(expand(tree, tree.root))
    except BaseExceptionGroup as failures:
        raise failures.exceptions[0] from None  # the error itself, as the rollout engine does
    for tree in trees:
        tree.nodes = dict(sorted(tree.nodes.items(), key=lambda item: _bfs_key(tree, item[0])))


def _bfs_key(tree: ResponseTree, node_id: str) -> tuple[int, tuple[int, ...]]:
    path = tuple(int(i) for i in node_id[len(tree.tree_id) + 1 :].split(".") if i)
    return len(path), path


def select_pairs(
    tree: ResponseTree, handler: ProtocolHandler, malt: PureTextMaltParameters, *, seed: int
) -> list[PreferencePair]:
    """Choose, for each node and agent, at most one preference pair among the children it acted in,
    at random: ``positive_negative``, one at or above the agent's reward mid-point against one
    below; ``interval``, two whose expected rewards differ by more than
    ``interval_threshold_proportion`` of its reward range. Pairs are stored on the tree and their
    nodes marked (``pair_role``)."""
    import numpy as np

    tree.pairs = []
    for node in tree.nodes.values():
        if len(node.children) < 2:
            continue
        children = [tree.nodes[c] for c in node.children]
        for agent in handler.agent_names:
            acting = [c for c in children if c.acted(agent)]
            if len(acting) < 2:
                continue
            rng = np.random.default_rng(derive_seed(seed, "malt-pair", node.id, agent))
            pair = _pick_pair(acting, agent, handler, malt, rng)
            if pair is None:
                continue
            chosen, rejected = pair
            chosen.pair_role[agent] = "positive"
            rejected.pair_role[agent] = "negative"
            tree.pairs.append(
                PreferencePair(
                    tree_id=tree.tree_id,
                    agent=agent,
                    parent_id=node.id,
                    chosen_id=chosen.id,
                    rejected_id=rejected.id,
                    chosen_reward=chosen.expected_reward[agent],
                    rejected_reward=rejected.expected_reward[agent],
                )
            )
    return tree.pairs


def _pick_pair(acting, agent, handler, malt, rng) -> tuple[TreeNode, TreeNode] | None:
    if malt.pair_selection_method == "positive_negative":
        mid = handler.reward_mid_point(agent)
        positive = [c for c in acting if c.expected_reward[agent] >= mid]
        negative = [c for c in acting if c.expected_reward[agent] < mid]
        if not positive or not negative:
            return None
        return positive[rng.integers(len(positive))], negative[rng.integers(len(negative))]
    span = handler.max_reward(agent) - handler.min_reward(agent)
    threshold = malt.interval_threshold_proportion * span
    candidates = [
        (a, b)
        for i, a in enumerate(acting)
        for b in acting[i + 1 :]
        if abs(a.expected_reward[agent] - b.expected_reward[agent]) > threshold
    ]
    if not candidates:
        return None
    a, b = candidates[rng.integers(len(candidates))]
    return (a, b) if a.expected_reward[agent] > b.expected_reward[agent] else (b, a)


def dpo_examples(trees: Sequence[ResponseTree], agent: PureTextWholeAgent) -> list[DpoExample]:
    """The preference pairs of ``agent`` as DPO examples (prompt = its view at the branch)."""
    examples = []
    for tree in trees:
        for pair in tree.pairs:
            if pair.agent != agent.agent_name:
                continue
            chosen = tree.nodes[pair.chosen_id]
            rejected = tree.nodes[pair.rejected_id]
            parent_transcript = tree.transcript_at(pair.parent_id)
            prompt = agent.build_chat_prompt(
                parent_transcript, chosen.round, include_supervisor=False
            )
            examples.append(
                DpoExample(
                    prompt=tuple(prompt),
                    chosen=chosen.turn_of(agent.agent_name).raw_text,
                    rejected=rejected.turn_of(agent.agent_name).raw_text,
                )
            )
    return examples


def dpo_dataset(
    trees: Sequence[ResponseTree], agents: Mapping[str, PureTextWholeAgent]
) -> list[dict]:
    """The DPO lines of a group: each member's preference pairs, members in order, in the
    OpenAI fine-tuning API's format (:meth:`DpoExample.to_openai`)."""
    return [pair.to_openai() for agent in agents.values() for pair in dpo_examples(trees, agent)]


def build_trees(*args, **kwargs) -> list[ResponseTree]:
    """Sync :func:`build_trees_async`."""
    from nip.utils.sync import run_sync

    return run_sync(build_trees_async(*args, **kwargs))


def trees_name(iteration: int) -> str:
    """Where the MALT trees of ``iteration`` are saved in the run directory."""
    return f"malt/trees_it{iteration:04d}.jsonl"


def load_trees(run_dir: RunDirectory, iteration: int) -> list[ResponseTree]:
    """The MALT trees saved for ``iteration``."""
    return [ResponseTree.from_dict(row) for row in run_dir.read_jsonl(trees_name(iteration))]


class Malt:
    """Grow response trees, pick sibling preference pairs, fine-tune with DPO; MALT's
    trainer runs Expert Iteration for its first ``num_initial_ei_iterations``."""

    name = "malt"
    label = "MALT"
    unit = "trees"
    method: FineTuneMethod = "dpo"

    def first_iteration(self, hyper_params: HyperParameters) -> int:
        return hyper_params.pure_text_malt.num_initial_ei_iterations

    async def collect(
        self, run: RunContext, items: Sequence[Datapoint], on_progress: Progress
    ) -> None:
        trees = await build_trees_async(
            run.session.handler,
            run.session.agents,
            items,
            malt=run.hyper_params.pure_text_malt,
            seed=run.hyper_params.seed,
            iteration=run.iteration,
            frozen_agents=frozenset(run.step.frozen_agents),
        )
        run.run_dir.write_jsonl(trees_name(run.iteration), [t.to_dict() for t in trees])
        leaves = [t.transcript_at(leaf.id) for t in trees for leaf in t.leaves()]
        run.run_dir.save_rollouts("train", run.iteration, leaves)

    def training_data(self, run: RunContext, iterations: Sequence[int]) -> Any:
        """The trees of ``iterations`` (the plan's: with ``fine_tune_on_all_previous_rollouts``
        every MALT iteration so far, kept even when the models changed since, as the
        original concatenated them)."""
        return [tree for i in iterations for tree in load_trees(run.run_dir, i)]

    def dataset(
        self, run: RunContext, agents: Mapping[str, PureTextWholeAgent], data: Any
    ) -> list[dict[str, Any]]:
        return dpo_dataset(data, agents)

    def metrics(self, run: RunContext, iteration: int) -> dict[str, Any]:
        if not run.run_dir.exists(trees_name(iteration)):
            return {}
        return malt_metrics(load_trees(run.run_dir, iteration))

    def estimate(self, sizer, step, items) -> tuple[Mapping, int]:
        seeds = [
            tree_seed(sizer.session.hyper_params.seed, step.iteration, i) for i in range(len(items))
        ]
        malt = sizer.session.hyper_params.pure_text_malt
        return sizer.malt_pass(items, seeds, malt, set(step.frozen_agents))

    def assumptions(self, hyper_params: HyperParameters) -> list[str]:
        k = hyper_params.pure_text_malt.num_responses_per_timestep
        return [
            "MALT: every branch of every tree grows to the last round; a node's "
            f"{k} samples share one request (its prompt billed once); at most one DPO pair "
            "per node and agent"
        ]
