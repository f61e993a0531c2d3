"""Verifier decision scales: answers, scores, rewards, prompts and a dialogue on each scale."""

from __future__ import annotations

from typing import get_args

import pytest

from nip.agents import parse_response
from nip.backends import Completion, GenerationResult, TokenUsage
from nip.backends.openai_compatible import OpenAIBackend, OpenAIBackendConfig
from nip.errors import InvalidDecisionError, InvalidParameterError
from nip.parameters import (
    CommonProtocolParameters,
    HyperParameters,
    PureTextAgentParameters,
    PureTextMaltParameters,
)
from nip.parameters.protocol import VerifierDecisionScale
from nip.prompts import LAST_TURN_SYSTEM_MESSAGE, PromptTemplateError, supervisor_message
from nip.protocols import (
    DECISION_SCALES,
    PROTOCOLS,
    DebateProtocol,
    Decision,
    DecisionScale,
    NipProtocol,
    ScalePoint,
    build_protocol_handler,
    decision_scale,
)
from nip.providers.pool import BackendPool
from nip.rollouts import Datapoint, Transcript
from nip.session import Session
from nip.settings import ExperimentSettings
from nip.testing.server import create_app, serve
from nip.training.algorithms.malt import build_trees

REJECT, ACCEPT, NEITHER = Decision.REJECT, Decision.ACCEPT, Decision.NEITHER
VERIFIER_SPEC = NipProtocol().agent("verifier")
ITEMS = [
    Datapoint(id=f"p{i}", question="Return a + b.", solution=f"return a + b + {i}", y=i % 2)
    for i in range(12)
]


def _side(i: int, n: int) -> Decision:
    return REJECT if 2 * i < n else NEITHER if 2 * i == n else ACCEPT


# Each scale's answers, from the strongest reject to the strongest accept, with their decision
# and score. A prover arguing accept earns (score / 2 + 0.5) * prover_reward, one arguing
# reject (-score / 2 + 0.5) * prover_reward: the last two columns, with prover_reward = 1.
#                              answer            decision  score   accept  reject
REWARD_TABLE: dict[str, list[tuple[str, Decision, float, float, float]]] = {
    "accept_reject": [
        ("reject", REJECT, -1.0, 0.0, 1.0),
        ("accept", ACCEPT, 1.0, 1.0, 0.0),
    ],
    "likert_4": [
        ("strongly disagree", REJECT, -1.0, 0.0, 1.0),
        ("disagree", REJECT, -0.5, 0.25, 0.75),
        ("agree", ACCEPT, 0.5, 0.75, 0.25),
        ("strongly agree", ACCEPT, 1.0, 1.0, 0.0),
    ],
    "likert_5": [
        ("strongly disagree", REJECT, -1.0, 0.0, 1.0),
        ("disagree", REJECT, -0.5, 0.25, 0.75),
        ("neither agree nor disagree", NEITHER, 0.0, 0.5, 0.5),
        ("agree", ACCEPT, 0.5, 0.75, 0.25),
        ("strongly agree", ACCEPT, 1.0, 1.0, 0.0),
    ],
    "likert_6": [
        ("strongly disagree", REJECT, -1.0, 0.0, 1.0),
        ("disagree", REJECT, -2 / 3, 1 / 6, 5 / 6),
        ("somewhat disagree", REJECT, -1 / 3, 1 / 3, 2 / 3),
        ("somewhat agree", ACCEPT, 1 / 3, 2 / 3, 1 / 3),
        ("agree", ACCEPT, 2 / 3, 5 / 6, 1 / 6),
        ("strongly agree", ACCEPT, 1.0, 1.0, 0.0),
    ],
    "likert_7": [
        ("strongly disagree", REJECT, -1.0, 0.0, 1.0),
        ("disagree", REJECT, -2 / 3, 1 / 6, 5 / 6),
        ("somewhat disagree", REJECT, -1 / 3, 1 / 3, 2 / 3),
        ("neither agree nor disagree", NEITHER, 0.0, 0.5, 0.5),
        ("somewhat agree", ACCEPT, 1 / 3, 2 / 3, 1 / 3),
        ("agree", ACCEPT, 2 / 3, 5 / 6, 1 / 6),
        ("strongly agree", ACCEPT, 1.0, 1.0, 0.0),
    ],
    # i of n: reject below n / 2, neither at n / 2, accept above; score 2i/n - 1.
    "likert_int_scale_11": [
        (str(i), _side(i, 10), 2 * i / 10 - 1, i / 10, 1 - i / 10) for i in range(11)
    ],
    "out_of_10": [(str(i), _side(i, 10), 2 * i / 10 - 1, i / 10, 1 - i / 10) for i in range(11)],
    "out_of_100": [
        (str(i), _side(i, 100), 2 * i / 100 - 1, i / 100, 1 - i / 100) for i in range(101)
    ],
}  # fmt: skip

ROWS = [(name, *row) for name, rows in REWARD_TABLE.items() for row in rows]


def nip_handler(scale: str, **common) -> NipProtocol:
    return NipProtocol(CommonProtocolParameters(verifier_decision_scale=scale, **common))


# ------------------------------------------------------------------------ the table
def test_every_configurable_scale_has_a_table_and_the_default_is_accept_reject():
    assert set(DECISION_SCALES) == set(get_args(VerifierDecisionScale)) == set(REWARD_TABLE)
    assert CommonProtocolParameters().verifier_decision_scale == "accept_reject"


def test_an_unknown_scale_is_refused_when_configured():
    with pytest.raises(InvalidParameterError, match="verifier_decision_scale"):
        CommonProtocolParameters(verifier_decision_scale="likert_3")


@pytest.mark.parametrize("name", REWARD_TABLE)
def test_each_scale_lists_its_answers_from_strongest_reject_to_strongest_accept(name):
    scale = decision_scale(name)
    assert scale.texts == tuple(row[0] for row in REWARD_TABLE[name])
    assert [p.score for p in scale.points] == sorted(p.score for p in scale.points)
    assert scale.strongest_reject.score == -1.0 and scale.strongest_accept.score == 1.0


@pytest.mark.parametrize(("name", "text", "decision", "score", "accept", "reject"), ROWS)
def test_each_answer_has_its_decision_and_score(name, text, decision, score, accept, reject):
    point = decision_scale(name).parse(text)
    assert point.decision is decision and point.score == pytest.approx(score)


@pytest.mark.parametrize(("name", "text", "decision", "score", "accept", "reject"), ROWS)
def test_the_reward_table_of_every_scale(name, text, decision, score, accept, reject):
    """The verifier is rewarded by its discrete decision against the label (neither counts
    as wrong); each prover by the score, towards its own stance, within [0, prover_reward]."""
    handler = nip_handler(name, randomize_prover_stance=True)
    for y in (0, 1):
        for stance, expected in ((1, accept), (0, reject)):
            outcome = handler.step(8, decision, y, score=score, datapoint_stance=stance)
            assert outcome.done and not outcome.terminated
            assert outcome.decision is decision and outcome.score == pytest.approx(score)
            assert outcome.rewards["verifier"] == (1.0 if int(decision) == y else -1.0)
            assert outcome.rewards["prover"] == pytest.approx(expected)


@pytest.mark.parametrize("name", REWARD_TABLE)
def test_a_debate_provers_reward_follows_the_score_towards_its_side(name):
    """prover0 argues reject and prover1 accept; their rewards add up to prover_reward."""
    handler = DebateProtocol(
        CommonProtocolParameters(verifier_decision_scale=name, prover_reward=2.0)
    )
    for _text, decision, score, accept, reject in REWARD_TABLE[name]:
        rewards = handler.step(8, decision, 1, score=score).rewards
        assert rewards["prover1"] == pytest.approx(2 * accept)
        assert rewards["prover0"] == pytest.approx(2 * reject)


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("name", REWARD_TABLE)
def test_prover_reward_ranges_are_zero_to_prover_reward_on_every_scale(protocol, name):
    hp = HyperParameters.from_dict(
        {
            "interaction_protocol": protocol,
            "protocol_common": {"verifier_decision_scale": name, "prover_reward": 2.0},
        }
    )
    handler = build_protocol_handler(hp)
    for prover in handler.prover_names:
        assert (handler.min_reward(prover), handler.max_reward(prover)) == (0.0, 2.0)
        assert handler.reward_mid_point(prover) == 1.0
        rewards = handler.possible_episode_rewards(prover)
        assert len(rewards) == len(set(rewards)) and all(0.0 <= r <= 2.0 for r in rewards)
    assert (handler.min_reward("verifier"), handler.max_reward("verifier")) == (-1.0, 1.0)


def test_a_decision_without_a_score_gets_the_score_of_its_direction():
    handler = nip_handler("likert_5")
    assert handler.step(8, ACCEPT, 1).score == 1.0
    assert handler.step(8, NEITHER, 1).rewards["prover"] == 0.5


def test_force_guess_replaces_the_score_with_that_of_the_forced_decision():
    handler = nip_handler("likert_5", force_guess="one")
    outcome = handler.step(8, REJECT, 0, score=-0.5)
    assert outcome.decision is ACCEPT and outcome.score == 1.0
    assert outcome.rewards["prover"] == 1.0


def test_a_round_without_a_decision_has_no_score():
    handler = nip_handler("out_of_10")
    assert handler.step(0, Decision.NONE, 1).score is None
    assert handler.step(8, Decision.NONE, 1).score is None  # terminated


# -------------------------------------------------------------------------- parsing
@pytest.mark.parametrize(
    ("name", "answer", "text"),
    [
        ("likert_5", "Strongly agree.", "strongly agree"),
        ("likert_5", "  AGREE, the loop is right", "agree"),
        ("likert_7", "somewhat disagree: it fails on 0", "somewhat disagree"),
        ("likert_6", "disagree strongly", "disagree"),
        ("out_of_10", "10", "10"),
        ("out_of_10", "8/10", "8"),
        ("out_of_10", "7.0", "7"),
        ("out_of_100", "85 out of 100", "85"),
        ("likert_int_scale_11", "0 (strongly disagree)", "0"),
    ],
)
def test_an_answer_is_read_from_its_start(name, answer, text):
    assert decision_scale(name).parse(answer).text == text


def test_a_word_answer_matches_the_longest_answer_it_starts_with():
    scale = DecisionScale(
        "custom",
        (ScalePoint("no", REJECT, -1.0), ScalePoint("no doubt correct", ACCEPT, 1.0)),
        answer_form='"Decision: no" or "Decision: no doubt correct"',
        short_form='"Decision: no" or "Decision: no doubt correct"',
    )
    assert scale.parse("No doubt correct, it passes").decision is ACCEPT
    assert scale.parse("no, it fails").decision is REJECT


def test_a_number_is_read_whole_so_ten_is_not_one():
    assert decision_scale("out_of_10").parse("10").score == 1.0
    assert decision_scale("out_of_100").parse("100").score == 1.0


@pytest.mark.parametrize(
    ("name", "answer"),
    [
        ("likert_5", "accept"),
        ("likert_5", "maybe"),
        ("likert_4", "neither agree nor disagree"),
        ("likert_6", "neither agree nor disagree"),
        ("accept_reject", "agree"),
        ("out_of_10", "11"),
        ("out_of_10", "100"),
        ("out_of_10", "-1"),
        ("out_of_10", "7.5"),
        ("out_of_10", "seven"),
        ("out_of_100", "101"),
        ("likert_int_scale_11", "strongly agree"),
        ("likert_5", ""),
    ],
)
def test_an_answer_off_the_scale_is_an_invalid_decision(name, answer):
    with pytest.raises(InvalidDecisionError, match="'Decision:' must be followed by"):
        decision_scale(name).parse(answer)


def test_the_verifiers_response_is_parsed_on_its_scale():
    parsed = parse_response(
        "The loop is right.\n**Decision:** Agree",
        spec=VERIFIER_SPEC,
        channels=("main",),
        can_decide=True,
        scale=decision_scale("likert_5"),
    )
    assert (parsed.decision, parsed.score, parsed.channel_messages) == (ACCEPT, 0.5, {})


def test_on_accept_reject_a_decision_scores_plus_or_minus_one():
    parsed = parse_response(
        "Decision: reject", spec=VERIFIER_SPEC, channels=("main",), can_decide=True
    )
    assert (parsed.decision, parsed.score) == (REJECT, -1.0)


# -------------------------------------------------------------------------- prompts
def session(protocol: str = "nip", scale: str = "accept_reject", **agent) -> Session:
    names = HyperParameters(interaction_protocol=protocol).agent_names
    hp = HyperParameters(
        interaction_protocol=protocol,
        protocol_common={"verifier_decision_scale": scale},
        agents={n: PureTextAgentParameters(use_dummy_api=True, **agent) for n in names},
    )
    return Session(hp, ExperimentSettings(show_progress=False))


#: What each scale's system prompt must say.
PROMPT_PHRASES = {
    "accept_reject": '"Decision: accept" if the solution is correct, or "Decision: reject"',
    "likert_4": '"strongly disagree", "disagree", "agree", "strongly agree"',
    "likert_5": '"disagree", "neither agree nor disagree", "agree"',
    "likert_6": '"somewhat disagree", "somewhat agree"',
    "likert_7": '"somewhat disagree", "neither agree nor disagree", "somewhat agree"',
    "likert_int_scale_11": "from 0 to 10 saying how much you agree that the solution is correct",
    "out_of_10": "from 0 to 10 saying how sure you are that the solution is correct",
    "out_of_100": "from 0 to 100 saying how sure you are that the solution is correct",
}


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("name", REWARD_TABLE)
def test_the_verifiers_system_prompt_states_its_scale(protocol, name):
    dialogue = session(protocol, name).dialogue(ITEMS[0])
    system = dialogue.prompt_for("verifier")[0]["content"]
    assert decision_scale(name).instructions in system
    assert PROMPT_PHRASES[name] in system


def test_on_accept_reject_the_prompt_says_accept_or_reject_as_before():
    system = session("nip").dialogue(ITEMS[0]).prompt_for("verifier")[0]["content"]
    assert (
        'To give your decision, write a line of the form "Decision: accept" if the solution is '
        'correct, or "Decision: reject" if it is incorrect. Do not write "Decision:" until you '
        "have decided." in system
    )
    assert decision_scale("accept_reject").decide_now_message == LAST_TURN_SYSTEM_MESSAGE


@pytest.mark.parametrize("name", REWARD_TABLE)
def test_the_verifiers_last_turn_message_states_its_scale(name):
    dialogue = session("nip", name).dialogue(ITEMS[0])
    last = dialogue.handler.last_decision_round
    for r in range(last):
        speaker = dialogue.next_speakers[0]
        dialogue.step(overrides={speaker: "Question: why?" if r % 2 == 0 else "Answer: because."})
    prompt = dialogue.prompt_for("verifier")
    assert prompt[-1] == {"role": "system", "content": decision_scale(name).decide_now_message}
    assert decision_scale(name).short_form in prompt[-1]["content"]


def test_the_supervisor_states_the_scale():
    text = supervisor_message(
        is_verifier=True,
        turn_index=3,
        questions_left=0,
        can_decide=True,
        decide_form=decision_scale("out_of_100").short_form,
    )
    assert "a whole number from 0 to 100" in text
    dialogue = session("nip", "likert_4", use_supervisor_message="all").dialogue(ITEMS[0])
    assert '"strongly agree"' in dialogue.prompt_for("verifier")[-1]["content"]


def test_a_custom_verifier_template_must_state_a_non_default_scale(tmp_path):
    path = tmp_path / "verifier.txt"
    path.write_text("Judge $solution for $question. Decision: accept or reject.")
    with pytest.raises(PromptTemplateError, match=r"\$verifier_decision_instructions"):
        session("nip", "likert_5", system_prompt_template_path=str(path))
    path.write_text("Judge $solution for $question.\n$verifier_decision_instructions")
    dialogue = session("nip", "likert_5", system_prompt_template_path=str(path)).dialogue(ITEMS[0])
    assert '"neither agree nor disagree"' in dialogue.prompt_for("verifier")[0]["content"]


# ------------------------------------------------------------------ whole dialogues
@pytest.mark.parametrize("name", ["likert_5", "out_of_100"])
def test_dummy_dialogues_on_a_scale_keep_the_score_and_reward_provers_by_it(name):
    scale = decision_scale(name)
    batch = session("nip", name).rollouts(ITEMS)
    decided = [t for t in batch.transcripts if not t.terminated]
    assert decided, "the dummy verifier decides"
    for transcript in decided:
        final = next(t for t in transcript.turns if t.decision is not Decision.NONE)
        point = scale.parse(final.raw_text.split("Decision:")[1])
        assert (transcript.decision, transcript.score) == (point.decision, point.score)
        assert final.score == point.score
        stance = transcript.stances["prover"]
        expected = (point.score if stance == 1 else -point.score) / 2 + 0.5
        assert transcript.episode_reward("prover") == pytest.approx(expected)
        assert Transcript.from_dict(transcript.to_dict()).score == transcript.score
        assert transcript.summary()["score"] == transcript.score


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", ["likert_5", "out_of_100"])
def test_the_dummy_behind_the_test_server_decides_on_the_scale_its_prompt_states(name):
    # Over HTTP the dummy sees only the chat messages, not the agent layer's metadata.
    settings = ExperimentSettings(show_progress=False, cache="off")
    hp = HyperParameters(
        interaction_protocol="nip",
        protocol_common={"verifier_decision_scale": name},
        agents={n: PureTextAgentParameters(model_name="m") for n in ("prover", "verifier")},
    )
    with serve(create_app()) as server:
        backend = OpenAIBackend(OpenAIBackendConfig(base_url=server.base_url))
        session = Session(hp, settings, backends=BackendPool(settings, {"openai": backend}))
        batch = session.rollouts(ITEMS)
        session.close()

    verifier_turns = [t for d in batch.transcripts for t in d.turns_of("verifier")]
    assert all(t.valid and t.retries == 0 for t in verifier_turns), [
        t.error for t in verifier_turns if t.error
    ]
    assert all(not t.terminated and t.decision is not Decision.NONE for t in batch.transcripts)


class Scripted:
    """A backend answering each request with the next of ``texts``."""

    name = "scripted"

    def __init__(self, *texts: str):
        self.texts = iter(texts)

    async def generate(self, request):
        return GenerationResult((Completion(next(self.texts), "stop"),), TokenUsage(1, 1))

    async def aclose(self) -> None:
        return None


def test_an_answer_off_the_scale_is_retried():
    s = session("solo_verifier", "likert_5")
    s.agents["verifier"].backend = Scripted("Decision: accept", "Decision: agree")
    turn = s.dialogue(ITEMS[1]).step()[0]
    assert turn.retries == 1 and turn.decision is ACCEPT and turn.score == 0.5
    assert "strongly agree, agree" in turn.error


def test_a_fine_tuning_label_is_the_scales_strongest_answer():
    s = session("solo_verifier", "likert_7")
    transcript = s.dialogue(ITEMS[1]).run()  # y = 1
    verifier = s.agents["verifier"]
    [example] = verifier.build_fine_tune_dataset(
        [transcript], replace_verifier_guess_with_true_label=True
    )
    assert example["messages"][-1]["content"] == "Decision: strongly agree"


def test_malt_trees_on_a_scale_keep_each_decisions_score_and_fractional_prover_rewards():
    s = session("nip", "likert_5")
    trees = build_trees(s.handler, s.agents, ITEMS[:4], malt=PureTextMaltParameters(), seed=3)
    decided = [n for t in trees for n in t.nodes.values() if n.decision is not Decision.NONE]
    assert decided
    for node in decided:
        point = decision_scale("likert_5").parse(
            node.turn_of("verifier").raw_text.split("Decision:")[1]
        )
        assert (node.decision, node.score) == (point.decision, point.score)
        assert node.rewards["prover"] == pytest.approx(point.score / 2 + 0.5)  # stance accept
    assert s.handler.reward_mid_point("prover") == 0.5
