"""MALT: response trees, expected rewards, preference pairs and DPO examples."""

from __future__ import annotations

import pytest

from nip.backends import DummyBackend, GenerationRequest
from nip.errors import InvalidParameterError
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
from nip.training.algorithms.malt import build_trees, dpo_examples, select_pairs
from nip.training.algorithms.malt_tree import ResponseTree

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
def hand_tree(intermediate: float = 0.0, estimator: str = "leaf_mean") -> ResponseTree:
    """root -> a (no-guess reward), b (decides right: +1); a -> a0 (+1), a1 (-1)."""
    tree = ResponseTree.new("t", "nip", ITEMS[1], seed=0, stances={"prover": 1})
    root = tree.root
    turn = AgentTurn(round=0, agent="verifier", raw_text="x")
    a = tree.add_child(root, 0, round=0, turns=(turn,), rewards={"verifier": intermediate})
    tree.add_child(root, 1, round=0, turns=(turn,), rewards={"verifier": 1.0}, done=True)
    turn2 = AgentTurn(round=2, agent="verifier", raw_text="y")
    tree.add_child(a, 0, round=2, turns=(turn2,), rewards={"verifier": 1.0}, done=True)
    tree.add_child(a, 1, round=2, turns=(turn2,), rewards={"verifier": -1.0}, done=True)
    tree.compute_expected_rewards(("verifier",), estimator)
    return tree


def test_the_leaf_mean_estimator_is_the_mean_return_over_the_leaves_below():
    tree = hand_tree(estimator="leaf_mean")
    assert tree.nodes["t.0"].expected_reward["verifier"] == 0.0  # (1 + -1) / 2
    assert tree.nodes["t.1"].expected_reward["verifier"] == 1.0
    assert tree.root.expected_reward["verifier"] == pytest.approx(1 / 3)  # (1 - 1 + 1) / 3
    assert tree.root.num_leaves == 3


def test_the_leaf_mean_counts_intermediate_rewards_on_every_path():
    """Node a's own 0.5 is on both of its paths: (0.5+1 + 0.5-1) / 2 = 0.5. The original
    added it once and divided by two, giving 0.25."""
    tree = hand_tree(intermediate=0.5, estimator="leaf_mean")
    assert tree.nodes["t.0"].expected_reward["verifier"] == 0.5
    assert tree.root.expected_reward["verifier"] == pytest.approx((1.5 - 0.5 + 1.0) / 3)


def uneven_tree(estimator: str) -> ResponseTree:
    """A tree whose first child goes on and branches while its sibling ends at once.

    Verifier rewards (only leaves pay)::

        t ─┬─ t.0 ─┬─ t.0.0              -1  (decides wrong)
           │       └─ t.0.1 ─┬─ t.0.1.0  +1
           │                 └─ t.0.1.1 ─┬─ t.0.1.1.0  +1
           │                             └─ t.0.1.1.1  -1
           └─ t.1                        +1  (decides right)
    """
    tree = ResponseTree.new("t", "nip", ITEMS[1], seed=0, stances={"prover": 1})

    def child(parent, index, reward=None):
        turn = AgentTurn(round=parent.round + 1, agent="verifier", raw_text=f"{parent.id}/{index}")
        rewards = {"verifier": 0.0 if reward is None else reward}
        return tree.add_child(
            parent, index, round=parent.round + 1, turns=(turn,), rewards=rewards,
            done=reward is not None,
        )  # fmt: skip

    a = child(tree.root, 0)
    child(a, 0, -1.0)
    a1 = child(a, 1)
    child(a1, 0, 1.0)
    a11 = child(a1, 1)
    child(a11, 0, 1.0)
    child(a11, 1, -1.0)
    child(tree.root, 1, 1.0)
    tree.compute_expected_rewards(("verifier",), estimator)
    return tree


def values(tree: ResponseTree) -> dict[str, float]:
    return {node_id: node.expected_reward["verifier"] for node_id, node in tree.nodes.items()}


def test_the_default_estimator_is_the_policys_expected_return():
    """Each node is worth its own reward plus the mean of its children's values."""
    assert PureTextMaltParameters().expected_reward_estimator == "recursive_mean"
    tree = hand_tree(estimator="recursive_mean")
    assert values(tree) == {"t": 0.5, "t.0": 0.0, "t.1": 1.0, "t.0.0": 1.0, "t.0.1": -1.0}


def test_with_uneven_branches_the_recursive_mean_weighs_each_sampled_child_equally():
    assert values(uneven_tree("recursive_mean")) == {
        "t": pytest.approx((-0.25 + 1.0) / 2),
        "t.0": pytest.approx((-1.0 + 0.5) / 2),
        "t.0.0": -1.0,
        "t.0.1": pytest.approx((1.0 + 0.0) / 2),
        "t.0.1.0": 1.0,
        "t.0.1.1": 0.0,
        "t.0.1.1.0": 1.0,
        "t.0.1.1.1": -1.0,
        "t.1": 1.0,
    }


def test_with_uneven_branches_the_leaf_mean_overweights_the_longer_branch():
    """t.0 has four leaves, so the leaf mean counts its one early failure once in four."""
    assert values(uneven_tree("leaf_mean")) == {
        "t": pytest.approx((-1 + 1 + 1 - 1 + 1) / 5),
        "t.0": pytest.approx((-1 + 1 + 1 - 1) / 4),
        "t.0.0": -1.0,
        "t.0.1": pytest.approx((1 + 1 - 1) / 3),
        "t.0.1.0": 1.0,
        "t.0.1.1": 0.0,
        "t.0.1.1.0": 1.0,
        "t.0.1.1.1": -1.0,
        "t.1": 1.0,
    }


def pairs_of(tree: ResponseTree) -> set[tuple[str, str, str]]:
    chosen = select_pairs(tree, NipProtocol(), PureTextMaltParameters(), seed=0)
    return {(p.parent_id, p.chosen_id, p.rejected_id) for p in chosen}


def test_the_recursive_mean_pairs_the_early_winner_against_the_branch_that_fails_early():
    """t.0 is worth -0.25 < 0 (the verifier's mid-point) and t.1 +1: a pair at the root."""
    assert pairs_of(uneven_tree("recursive_mean")) == {
        ("t", "t.1", "t.0"),
        ("t.0", "t.0.1", "t.0.0"),
        ("t.0.1.1", "t.0.1.1.0", "t.0.1.1.1"),
    }


def test_the_leaf_mean_builds_no_pair_at_the_root_of_the_same_tree():
    """Under the leaf mean t.0 is worth 0, on the mid-point, so both root children count as
    positive and the root gives no pair."""
    assert pairs_of(uneven_tree("leaf_mean")) == {
        ("t.0", "t.0.1", "t.0.0"),
        ("t.0.1.1", "t.0.1.1.0", "t.0.1.1.1"),
    }


def test_the_estimators_agree_when_every_child_has_as_many_leaves():
    balanced = values(hand_tree(intermediate=0.5, estimator="recursive_mean"))
    assert balanced["t.0"] == values(hand_tree(intermediate=0.5, estimator="leaf_mean"))["t.0"]


def test_an_unknown_estimator_is_refused():
    with pytest.raises(ValueError, match="estimator"):
        hand_tree(estimator="median")
    with pytest.raises(InvalidParameterError, match="expected_reward_estimator"):
        PureTextMaltParameters(expected_reward_estimator="median")


@pytest.mark.parametrize(
    ("estimator", "other"), [("recursive_mean", "leaf_mean"), ("leaf_mean", "recursive_mean")]
)
def test_grown_trees_are_scored_with_the_configured_estimator(estimator, other):
    """Dummy dialogues end at different depths, so the two estimators disagree somewhere."""
    malt = PureTextMaltParameters(expected_reward_estimator=estimator)
    agents = ("prover", "verifier")
    disagreements = 0
    for tree in grow(session(), malt):
        scored = {i: dict(n.expected_reward) for i, n in tree.nodes.items()}
        tree.compute_expected_rewards(agents, estimator)
        assert {i: dict(n.expected_reward) for i, n in tree.nodes.items()} == scored
        tree.compute_expected_rewards(agents, other)
        disagreements += sum(n.expected_reward != scored[i] for i, n in tree.nodes.items())
    assert disagreements > 0


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
