"""Expert Iteration: which dialogues each agent is fine-tuned on."""

from __future__ import annotations

import subprocess
import sys

import pytest

from nip.parameters import PureTextEiParameters, TextRlParameters
from nip.protocols import Decision
from nip.rollouts import AgentTurn, Datapoint, Transcript
from nip.training.algorithms.expert_iteration import (
    guess_replacement_proportion,
    select_rollouts,
    weighted_sample_indices,
)


def transcript(index: int, verifier_reward: float, prover_reward: float = 0.0) -> Transcript:
    """A finished nip dialogue with the given episode rewards."""
    return Transcript(
        protocol="nip",
        datapoint=Datapoint(id=f"d{index}", question="q", solution="s", y=1),
        seed=index,
        turns=[
            AgentTurn(round=0, agent="verifier", raw_text="Question?"),
            AgentTurn(round=1, agent="prover", raw_text="Answer."),
            AgentTurn(
                round=2, agent="verifier", raw_text="Decision: accept", decision=Decision.ACCEPT
            ),
        ],
        rewards=[{"verifier": 0.0, "prover": 0.0}] * 2
        + [{"verifier": verifier_reward, "prover": prover_reward}],
        done=True,
        decision=Decision.ACCEPT,
        id=f"t{index}",
    )


REWARDS = [1.0, -1.0, 1.0, -1.0, 1.0, 1.0, -1.0, -1.0, 1.0, -1.0]
BATCH = [transcript(i, r, prover_reward=(r + 1) / 2) for i, r in enumerate(REWARDS)]


def select(agent="verifier", is_verifier=True, ei=None, text_rl=None, iteration=0, seed=0):
    return select_rollouts(
        BATCH,
        agent,
        ei=ei or PureTextEiParameters(),
        text_rl=text_rl or TextRlParameters(),
        is_verifier=is_verifier,
        iteration=iteration,
        seed=seed,
    )


def test_threshold_keeps_the_dialogues_the_agent_won():
    chosen = select().selected
    assert [t.id for t in chosen] == [f"t{i}" for i, r in enumerate(REWARDS) if r >= 0.9]


def test_the_threshold_is_configurable():
    chosen = select(ei=PureTextEiParameters(reward_threshold=-5.0)).selected
    assert len(chosen) == len(BATCH)


def test_an_agent_that_never_spoke_has_nothing_to_select():
    assert len(select(agent="prover0", is_verifier=False)) == 0


@pytest.mark.parametrize(
    ("schedule", "iteration", "expected"),
    [
        ("none", 3, 0.5),
        ("linear", 0, 0.5),
        ("linear", 2, 0.3),
        ("linear", 9, 0.0),
        ("exponential", 2, 0.5 * 0.9**2),
    ],
)
def test_guess_replacement_proportion_anneals(schedule, iteration, expected):
    text_rl = TextRlParameters(
        verifier_guess_replacement_proportion=0.5,
        verifier_guess_replacement_annealing=schedule,
        verifier_guess_replacement_annealing_rate=0.1,
    )
    assert guess_replacement_proportion(text_rl, iteration) == pytest.approx(expected)


def test_guess_replacement_takes_a_share_of_the_verifiers_dialogues_whatever_their_reward():
    text_rl = TextRlParameters(verifier_guess_replacement_proportion=0.3)
    selection = select(text_rl=text_rl)
    assert len(selection.guess_replaced) == 3
    replaced = {t.id for t in selection.guess_replaced}
    assert not replaced & {t.id for t in selection.selected}


def test_guess_replacement_applies_only_to_the_verifier():
    text_rl = TextRlParameters(verifier_guess_replacement_proportion=0.3)
    assert select(agent="prover", is_verifier=False, text_rl=text_rl).guess_replaced == ()


def test_weighted_sampling_prefers_high_rewards():
    ei = PureTextEiParameters(
        rollout_selection_method="weighted_sampling",
        weighting_sample_size_factor=3.0,
        weighting_epsilon=0.0,
    )
    chosen = select(ei=ei).selected
    assert len(chosen) == 30
    assert all(t.episode_reward("verifier") == 1.0 for t in chosen)


def test_weighted_sampling_is_uniform_when_all_rewards_are_equal():
    """The original divided 0 by 0 here and crashed."""
    ei = PureTextEiParameters(rollout_selection_method="weighted_sampling")
    indices = weighted_sample_indices([0.5] * 8, ei, seed=3)
    assert len(indices) == 4 and all(0 <= i < 8 for i in indices)


def test_weighted_sampling_without_replacement_draws_distinct_dialogues():
    ei = PureTextEiParameters(
        rollout_selection_method="weighted_sampling",
        weighting_use_replacement=False,
        weighting_sample_size_factor=0.5,
    )
    indices = weighted_sample_indices(REWARDS, ei, seed=1)
    assert len(indices) == len(set(indices)) == 5


def test_the_same_seed_selects_the_same_examples():
    ei = PureTextEiParameters(rollout_selection_method="weighted_sampling")
    text_rl = TextRlParameters(verifier_guess_replacement_proportion=0.4)
    first = select(ei=ei, text_rl=text_rl, seed=11)
    again = select(ei=ei, text_rl=text_rl, seed=11)
    other = [select(ei=ei, text_rl=text_rl, seed=s) for s in range(12, 20)]
    assert first == again
    assert any(o != first for o in other)


def test_selection_is_the_same_in_another_process():
    """Seeds are derived with SHA-256, not Python's per-process salted hash."""
    code = (
        "from tests.test_ei_selection import select;"
        "from nip.parameters import PureTextEiParameters, TextRlParameters;"
        "s = select(ei=PureTextEiParameters(rollout_selection_method='weighted_sampling'),"
        " text_rl=TextRlParameters(verifier_guess_replacement_proportion=0.4), seed=5);"
        "print([t.id for t in s.selected], [t.id for t in s.guess_replaced])"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": str(salt), "PATH": ""},
            cwd=".",
        ).stdout
        for salt in (1, 2)
    }
    assert len(outputs) == 1
