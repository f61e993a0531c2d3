"""MALT: response trees, expected rewards, preference pairs and DPO examples."""

from __future__ import annotations

import pytest

from nip.backends import DummyBackend, GenerationRequest
from nip.parameters import (
    HyperParameters,
    NipProtocolParameters,
    PureTextAgentParameters,
    PureTextMaltParameters,
)
from nip.protocols import Decision, NipProtocol
from nip.rollouts import AgentTurn, Datapoint
from nip.session import Session
from nip.settings import ExperimentSettings
from nip.training.malt import build_trees, dpo_examples, select_pairs
from nip.training.malt_tree import ResponseTree

ITEMS = [Datapoint(id=f"d{i}", question="q", solution=f"s{i}", y=i % 2) for i in range(4)]


class CountingDummy(DummyBackend):
    def __init__(self):
        super().__init__()
        self.requests: list[GenerationRequest] = []

    async def generate(self, request):
        self.requests.append(request)
        return await super().generate(request)


def session(rounds: int = 5) -> Session:
    hp = HyperParameters(
        nip_protocol=NipProtocolParameters(max_message_rounds=rounds),
        agents={n: PureTextAgentParameters(use_dummy_api=True) for n in ("prover", "verifier")},
    )
    return Session(hp, ExperimentSettings(show_progress=False))


def grow(s: Session, malt: PureTextMaltParameters | None = None, frozen=frozenset(), items=ITEMS):
    return build_trees(
        s.handler,
        s.agents,
        items,
        malt=malt or PureTextMaltParameters(),
        seed=7,
        frozen_agents=frozen,
    )


# ------------------------------------------------------------------------ growing
def test_every_open_node_has_k_children_and_every_leaf_ends_the_dialogue():
    trees = grow(session(), PureTextMaltParameters(num_responses_per_timestep=3))
    for tree in trees:
        for node in tree.nodes.values():
            assert len(node.children) in (0, 3)
            if node.is_leaf:
                assert node.done
        assert len(tree.root.children) == 3


def test_siblings_are_requested_together_with_n_sampling():
    s = session()
    backend = CountingDummy()
    for agent in s.agents.values():
        agent.backend = backend
    trees = grow(s, PureTextMaltParameters(num_responses_per_timestep=2))
    generated = sum(len(t.nodes) - 1 for t in trees)
    assert all(r.n == 2 for r in backend.requests)
    assert len(backend.requests) * 2 == generated


def test_frozen_agents_add_one_child_in_rounds_only_they_act():
    trees = grow(session(), frozen=frozenset({"prover"}))
    for tree in trees:
        for node in tree.nodes.values():
            if node.children and tree.nodes[node.children[0]].turns[0].agent == "prover":
                assert len(node.children) == 1


def test_node_ids_are_unique_across_trees():
    trees = grow(session())
    ids = [n for t in trees for n in t.nodes]
    assert len(ids) == len(set(ids))


def test_the_transcript_at_a_leaf_is_a_complete_dialogue():
    tree = grow(session())[0]
    leaf = tree.leaves()[0]
    transcript = tree.transcript_at(leaf.id)
    assert transcript.done and transcript.num_rounds == leaf.round + 1
    assert transcript.episode_rewards == {
        a: sum(n.rewards[a] for n in tree.path(leaf.id)) for a in ("prover", "verifier")
    }


def test_a_tree_round_trips_through_a_dict():
    tree = grow(session())[0]
    again = ResponseTree.from_dict(tree.to_dict())
    assert again.to_records() == tree.to_records() and again.pairs == tree.pairs


def test_trees_export_one_row_per_node():
    tree = grow(session())[0]
    rows = tree.to_records()
    assert len(rows) == len(tree.nodes)
    assert {"node_id", "parent_id", "verifier.expected_reward", "text"} <= set(rows[0])


# ----------------------------------------------------------------- expected reward
def hand_tree(intermediate: float = 0.0) -> ResponseTree:
    """root -> a (no-guess reward), b (decides right: +1); a -> a0 (+1), a1 (-1)."""
    tree = ResponseTree.new("t", "nip", ITEMS[1], seed=0, stances={"prover": 1})
    root = tree.root
    turn = AgentTurn(round=0, agent="verifier", raw_text="x")
    a = tree.add_child(root, 0, round=0, turns=(turn,), rewards={"verifier": intermediate})
    tree.add_child(root, 1, round=0, turns=(turn,), rewards={"verifier": 1.0}, done=True)
    turn2 = AgentTurn(round=2, agent="verifier", raw_text="y")
    tree.add_child(a, 0, round=2, turns=(turn2,), rewards={"verifier": 1.0}, done=True)
    tree.add_child(a, 1, round=2, turns=(turn2,), rewards={"verifier": -1.0}, done=True)
    tree.compute_expected_rewards(("verifier",))
    return tree


def test_expected_reward_is_the_mean_return_over_the_leaves_below():
    tree = hand_tree()
    assert tree.nodes["t.0"].expected_reward["verifier"] == 0.0  # (1 + -1) / 2
    assert tree.nodes["t.1"].expected_reward["verifier"] == 1.0
    assert tree.root.expected_reward["verifier"] == pytest.approx(1 / 3)  # (1 - 1 + 1) / 3
    assert tree.root.num_leaves == 3


def test_expected_reward_counts_intermediate_rewards_on_every_path():
    """Node a's own 0.5 is on both of its paths: (0.5+1 + 0.5-1) / 2 = 0.5. The original
    added it once and divided by two, giving 0.25."""
    tree = hand_tree(intermediate=0.5)
    assert tree.nodes["t.0"].expected_reward["verifier"] == 0.5
    assert tree.root.expected_reward["verifier"] == pytest.approx((1.5 - 0.5 + 1.0) / 3)


# ---------------------------------------------------------------- pair selection
def test_positive_negative_pairs_straddle_the_reward_mid_point():
    tree = hand_tree()
    pairs = select_pairs(tree, NipProtocol(), PureTextMaltParameters(), seed=0)
    by_parent = {p.parent_id: p for p in pairs}
    assert by_parent["t.0"].chosen_id == "t.0.0" and by_parent["t.0"].rejected_id == "t.0.1"
    # t.0 (0.0) and t.1 (1.0) are both >= the verifier's mid-point 0: no pair at the root.
    assert "t" not in by_parent
    assert tree.nodes["t.0.0"].pair_role == {"verifier": "positive"}


def test_interval_pairs_need_a_large_enough_gap():
    tree = hand_tree()
    wide = PureTextMaltParameters(
        pair_selection_method="interval", interval_threshold_proportion=0.4
    )
    pairs = {p.parent_id: p for p in select_pairs(tree, NipProtocol(), wide, seed=0)}
    assert pairs["t"].chosen_id == "t.1" and pairs["t"].rejected_id == "t.0"  # gap 1.0 > 0.8
    narrow = PureTextMaltParameters(
        pair_selection_method="interval", interval_threshold_proportion=0.6
    )
    pairs = {p.parent_id for p in select_pairs(tree, NipProtocol(), narrow, seed=0)}
    assert "t" not in pairs and "t.0" in pairs  # 1.0 < 1.2 at the root; 2.0 > 1.2 below


def test_pairs_are_chosen_only_among_children_where_the_agent_acted():
    tree = hand_tree()
    pairs = select_pairs(tree, NipProtocol(), PureTextMaltParameters(), seed=0)
    assert all(p.agent == "verifier" for p in pairs)


# -------------------------------------------------------------------- DPO data
def test_dpo_examples_use_the_agents_view_at_the_branch_and_the_siblings_messages():
    s = session()
    trees = grow(s)
    examples = dpo_examples(trees, s.agents["verifier"])
    pairs = [p for t in trees for p in t.pairs if p.agent == "verifier"]
    assert len(examples) == len(pairs) > 0
    example, pair = examples[0], pairs[0]
    tree = next(t for t in trees if t.tree_id == pair.tree_id)
    assert example.chosen == tree.nodes[pair.chosen_id].turn_of("verifier").raw_text
    assert example.rejected == tree.nodes[pair.rejected_id].turn_of("verifier").raw_text
    assert example.prompt[0]["role"] == "system"
    assert example.prompt[-1]["role"] != "assistant"


def test_dpo_examples_have_the_openai_and_trl_formats():
    s = session()
    example = dpo_examples(grow(s), s.agents["verifier"])[0]
    openai_line = example.to_openai()
    assert set(openai_line) == {"input", "preferred_output", "non_preferred_output"}
    assert openai_line["input"]["messages"][0]["role"] == "system"
    trl_row = example.to_trl()
    assert trl_row["chosen"] == [{"role": "assistant", "content": example.chosen}]


def test_the_same_seed_grows_the_same_trees():
    first = [t.to_dict() for t in grow(session())]
    assert first == [t.to_dict() for t in grow(session())]


def test_decisions_are_recorded_on_nodes():
    tree = grow(session())[0]
    deciding = [n for n in tree.nodes.values() if n.decision is not Decision.NONE]
    assert deciding and all(n.done for n in deciding)
