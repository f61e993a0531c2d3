"""prover_invalid_response_penalty: a prover that cannot produce a valid response ends the
episode and is penalised; without it, its invalid turn is recorded and the dialogue goes on."""

from __future__ import annotations

from nip.backends import Completion, GenerationResult, TokenUsage
from nip.parameters import CommonProtocolParameters, HyperParameters, PureTextAgentParameters
from nip.protocols import DebateProtocol, Decision, NipProtocol
from nip.rollouts import Datapoint
from nip.session import Session
from nip.settings import ExperimentSettings

ITEM = Datapoint(id="p0", question="Return a + b.", solution="return a - b", y=0)


class EmptyAnswers:
    """A backend whose every completion is empty (an invalid response)."""

    name = "empty"

    def __init__(self):
        self.calls = 0

    async def generate(self, request):
        self.calls += 1
        return GenerationResult((Completion("", "stop"),), TokenUsage(5, 0))

    async def aclose(self) -> None:
        return None


def nip_session(penalty: float | None) -> Session:
    hp = HyperParameters(
        protocol_common=CommonProtocolParameters(prover_invalid_response_penalty=penalty),
        agents={
            "prover": PureTextAgentParameters(use_dummy_api=True, num_invalid_generation_retries=1),
            "verifier": PureTextAgentParameters(use_dummy_api=True),
        },
    )
    return Session(hp, ExperimentSettings(show_progress=False))


def test_the_penalty_is_off_by_default():
    assert CommonProtocolParameters().prover_invalid_response_penalty is None


def test_an_invalid_prover_turn_terminates_the_episode_and_costs_the_penalty():
    handler = NipProtocol(CommonProtocolParameters(prover_invalid_response_penalty=-1.0))
    outcome = handler.step(1, Decision.NONE, 1, invalid_provers=["prover"])
    assert outcome.done and outcome.terminated and outcome.decision is Decision.NONE
    assert outcome.rewards == {"prover": -1.0, "verifier": 0.0}


def test_without_the_penalty_an_invalid_prover_turn_changes_nothing():
    outcome = NipProtocol().step(1, Decision.NONE, 1, invalid_provers=["prover"])
    assert not outcome.done and outcome.rewards == {"prover": 0.0, "verifier": 0.0}


def test_only_the_debate_prover_that_failed_is_penalised():
    handler = DebateProtocol(CommonProtocolParameters(prover_invalid_response_penalty=-0.5))
    rewards = handler.step(1, Decision.NONE, 1, invalid_provers=["prover1"]).rewards
    assert rewards == {"prover0": 0.0, "prover1": -0.5, "verifier": 0.0}


def test_the_penalty_widens_the_provers_reward_range_but_not_the_verifiers():
    handler = NipProtocol(CommonProtocolParameters(prover_invalid_response_penalty=-1.0))
    assert (handler.min_reward("prover"), handler.max_reward("prover")) == (-1.0, 1.0)
    assert handler.reward_mid_point("prover") == 0.0
    assert (handler.min_reward("verifier"), handler.max_reward("verifier")) == (-1.0, 1.0)


def test_a_dialogue_ends_when_the_prover_stays_invalid_after_its_retries():
    s = nip_session(-1.0)
    backend = EmptyAnswers()
    s.agents["prover"].backend = backend
    dialogue = s.dialogue(ITEM)
    dialogue.step(overrides={"verifier": "Question: what does it return for 1, 2?"})
    [turn] = dialogue.step()
    assert not turn.valid and turn.retries == 1 and backend.calls == 2
    transcript = dialogue.transcript
    assert transcript.done and transcript.terminated and transcript.num_rounds == 2
    assert transcript.episode_rewards == {"prover": -1.0, "verifier": 0.0}


def test_without_the_penalty_the_dialogue_goes_on_after_an_invalid_prover_turn():
    s = nip_session(None)
    s.agents["prover"].backend = EmptyAnswers()
    dialogue = s.dialogue(ITEM)
    dialogue.step(overrides={"verifier": "Question: what does it return for 1, 2?"})
    [turn] = dialogue.step()
    assert not turn.valid and not dialogue.done
    assert dialogue.next_speakers == ("verifier",)
