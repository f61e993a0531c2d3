"""Run metrics on hand-built dialogues and trees with known answers: hardest datapoints,
decision mean and entropy, per-agent tokens, cost and latency, and MALT pair counts."""

from __future__ import annotations

import math

import pytest

from nip.analysis.metrics import malt_metrics, rollout_metrics
from nip.protocols import Decision
from nip.rollouts.records import AgentTurn, Datapoint, Transcript
from nip.training.algorithms.malt_tree import PreferencePair, ResponseTree

ACCEPT, REJECT, NEITHER, NONE = Decision.ACCEPT, Decision.REJECT, Decision.NEITHER, Decision.NONE


def dialogue(
    datapoint: str, y: int, decision: Decision, score: float | None = None, turns=()
) -> Transcript:
    """A finished dialogue about ``datapoint`` (label ``y``) that ended with ``decision``."""
    if score is None and decision is not NONE:
        score = {ACCEPT: 1.0, REJECT: -1.0, NEITHER: 0.0}[decision]
    return Transcript(
        protocol="nip",
        datapoint=Datapoint(datapoint, "q", f"solution of {datapoint}", y=y),
        seed=0,
        turns=list(turns),
        rewards=[{"verifier": 0.0}],
        done=True,
        decision=decision,
        score=score,
    )


# ------------------------------------------------------------------- hardest datapoints
def test_worst_datapoint_accuracy_is_the_lowest_per_datapoint_accuracy():
    """a: 2 of 2 right; b: 1 of 2; c: 0 of 2 (one wrong, one undecided)."""
    transcripts = [
        dialogue("a", 1, ACCEPT),
        dialogue("a", 1, ACCEPT),
        dialogue("b", 0, REJECT),
        dialogue("b", 0, ACCEPT),
        dialogue("c", 1, REJECT),
        dialogue("c", 1, NONE),
    ]
    metrics = rollout_metrics(transcripts)
    assert metrics["num_datapoints"] == 3
    assert metrics["worst_datapoint_accuracy"] == 0.0
    assert metrics["always_wrong_proportion"] == pytest.approx(1 / 3)


def test_a_verifier_that_gets_each_datapoint_right_sometimes_fails_none_always():
    transcripts = [
        dialogue("a", 1, ACCEPT),
        dialogue("a", 1, REJECT),
        dialogue("b", 0, REJECT),
        dialogue("b", 0, REJECT),
        dialogue("b", 0, ACCEPT),
    ]
    metrics = rollout_metrics(transcripts)
    assert metrics["worst_datapoint_accuracy"] == 0.5
    assert metrics["always_wrong_proportion"] == 0.0


# -------------------------------------------------------------------------- decisions
def test_mean_decision_and_score_leave_out_dialogues_without_a_decision():
    transcripts = [
        dialogue("a", 1, ACCEPT, score=0.5),
        dialogue("b", 1, ACCEPT, score=1.0),
        dialogue("c", 0, REJECT, score=-0.5),
        dialogue("d", 0, NEITHER),
        dialogue("e", 0, NONE),
    ]
    metrics = rollout_metrics(transcripts)
    assert metrics["mean_decision"] == pytest.approx((1 + 1 + 0 + 0.5) / 4)
    assert metrics["std_decision"] == pytest.approx(math.sqrt(0.171875))
    assert metrics["mean_score"] == pytest.approx((0.5 + 1.0 - 0.5 + 0.0) / 4)
    assert metrics["neither_agree_nor_disagree_proportion"] == pytest.approx(1 / 5)


@pytest.mark.parametrize(
    ("decisions", "entropy"),
    [
        ([ACCEPT, ACCEPT, ACCEPT], 0.0),
        ([ACCEPT, REJECT], 1.0),
        ([ACCEPT, REJECT, NONE, NONE], 1.0),  # no decision is not a category
        ([ACCEPT, REJECT, NEITHER], math.log2(3)),
        ([ACCEPT, ACCEPT, ACCEPT, REJECT], 0.75 * math.log2(4 / 3) + 0.25 * 2),
    ],
)
def test_decision_entropy_is_in_bits_over_accept_reject_and_neither(decisions, entropy):
    transcripts = [dialogue(f"d{i}", 1, d) for i, d in enumerate(decisions)]
    assert rollout_metrics(transcripts)["verifier_decision_entropy"] == pytest.approx(entropy)


def test_decision_metrics_are_none_when_the_verifier_never_decided():
    metrics = rollout_metrics([dialogue("a", 1, NONE), dialogue("b", 0, NONE)])
    assert metrics["mean_decision"] is None and metrics["mean_score"] is None
    assert metrics["verifier_decision_entropy"] is None


# ------------------------------------------------------------ tokens, cost and latency
def turn(
    agent: str,
    prompt: int,
    completion: int,
    latency: float,
    model: str = "gpt-4o-mini-2024-07-18",
    **extra,
) -> AgentTurn:
    return AgentTurn(
        round=0,
        agent=agent,
        raw_text="...",
        model=model,
        prompt_tokens=prompt,
        completion_tokens=completion,
        latency_s=latency,
        **extra,
    )


def test_each_agent_has_its_tokens_cost_and_latency_in_the_run_metrics():
    first = dialogue(
        "a",
        1,
        ACCEPT,
        turns=[turn("verifier", 1_000_000, 0, 2.0), turn("prover", 0, 1_000_000, 4.0)],
    )
    second = dialogue(
        "b",
        0,
        REJECT,
        turns=[
            turn("verifier", 1_000_000, 1_000_000, 1.0),
            turn("prover", 500, 50, 9.0, cached=True),  # a cache hit: free and instant
            turn("prover", 0, 0, 0.0, valid=False),
        ],
    )
    metrics = rollout_metrics([first, second])
    assert metrics["verifier.prompt_tokens"] == 2_000_000
    assert metrics["verifier.completion_tokens"] == 1_000_000
    assert metrics["verifier.cost_usd"] == pytest.approx(2 * 0.15 + 0.60)
    assert metrics["verifier.mean_latency_s"] == 1.5
    assert metrics["prover.prompt_tokens"] == 500
    assert metrics["prover.cost_usd"] == pytest.approx(0.60)
    assert metrics["prover.mean_latency_s"] == 4.0
    assert metrics["cost_usd"] == pytest.approx(metrics["verifier.cost_usd"] + 0.60)


def test_a_free_agent_costs_nothing_and_an_unpriced_model_makes_its_cost_unknown():
    turns = [turn("verifier", 100, 10, 1.0), turn("prover", 100, 10, 1.0, model="my-model")]
    prices = {("verifier", "gpt-4o-mini-2024-07-18"): (0.0, 0.0)}  # the verifier's is free
    metrics = rollout_metrics(
        [dialogue("a", 1, ACCEPT, turns=turns)], price=lambda *turn: prices.get(turn)
    )
    assert metrics["verifier.cost_usd"] == 0.0
    assert metrics["prover.cost_usd"] is None


# ------------------------------------------------------------------------------- MALT
def malt_tree(tree_id: str, pairs: int) -> ResponseTree:
    """root -> two verifier children; the first -> two prover children (3 branch points
    counting the root, and 4 other nodes). ``pairs`` verifier pairs are recorded."""
    tree = ResponseTree.new(tree_id, "nip", Datapoint("a", "q", "s", y=1), 0, {"prover": 1})
    asks = AgentTurn(round=0, agent="verifier", raw_text="Question: why?")
    answers = AgentTurn(round=1, agent="prover", raw_text="Answer: because.")
    first = tree.add_child(tree.root, 0, round=0, turns=(asks,))
    tree.add_child(tree.root, 1, round=0, turns=(asks,), done=True)
    tree.add_child(first, 0, round=1, turns=(answers,), done=True)
    tree.add_child(first, 1, round=1, turns=(answers,), done=True)
    tree.pairs = [
        PreferencePair(tree_id, "verifier", tree_id, f"{tree_id}.0", f"{tree_id}.1", 1.0, -1.0)
    ] * pairs
    return tree


def test_malt_pair_proportion_is_pairs_per_branch_point():
    metrics = malt_metrics([malt_tree("t0", 1), malt_tree("t1", 0)])
    assert metrics["mean_malt_nodes"] == 4 and metrics["mean_non_terminal_malt_nodes"] == 2
    assert metrics["verifier.malt_pairs"] == 1
    assert metrics["verifier.mean_malt_pairs"] == 0.5
    assert metrics["verifier.malt_pair_proportion"] == pytest.approx(1 / 4)


def test_an_agent_that_acted_but_got_no_pair_has_a_pair_proportion_of_zero():
    metrics = malt_metrics([malt_tree("t0", 1)])
    assert metrics["prover.malt_pairs"] == 0 and metrics["prover.mean_malt_pairs"] == 0
    assert metrics["prover.malt_pair_proportion"] == 0.0
