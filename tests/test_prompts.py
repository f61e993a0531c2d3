"""What each agent sees: the exact chat prompt, protocol by protocol.

Each test scripts a dialogue with fixed messages (overrides) and reads back the prompt an
agent gets, so these tests double as the documentation of prompt building.
"""

from __future__ import annotations

import pytest

from nip.agents import PureTextWholeAgent
from nip.backends import DummyBackend
from nip.errors import NipError
from nip.parameters import HyperParameters, PureTextAgentParameters
from nip.prompts import LAST_TURN_SYSTEM_MESSAGE, PromptTemplateError, load_system_template
from nip.protocols import build_protocol_handler
from nip.rollouts import Datapoint
from nip.rollouts.dialogue import Dialogue

DATAPOINT = Datapoint(
    id="HumanEval/0-m1",
    question='def add(a: int, b: int) -> int:\n    """Return a + b; e.g. add(1, 2) == 3."""',
    solution='def add(a, b):\n    return a - b  # <b>&"quoted"',
    y=0,
    stance=1,
)


def make_dialogue(protocol: str, seed: int = 0, **agent_overrides) -> Dialogue:
    names = HyperParameters(interaction_protocol=protocol).agent_names
    agents = {
        name: PureTextAgentParameters(use_dummy_api=True, **agent_overrides.get(name, {}))
        for name in names
    }
    hp = HyperParameters(interaction_protocol=protocol, agents=agents)
    handler = build_protocol_handler(hp)
    backend = DummyBackend()
    built = {n: PureTextWholeAgent(hp, None, n, handler, backend=backend) for n in names}
    return Dialogue.start(handler, built, DATAPOINT, seed=seed)


def shape(messages) -> list[tuple]:
    """(role, name, content) for each message; system prompts cut to their first 40 chars."""
    return [
        (m["role"], m.get("name"), m["content"][:40] if m["role"] == "system" else m["content"])
        for m in messages
    ]


# ------------------------------------------------------------------------------ nip
def test_nip_verifier_first_turn_sees_only_its_system_prompt():
    prompt = make_dialogue("nip").prompt_for("verifier")
    assert len(prompt) == 1 and prompt[0]["role"] == "system"
    system = prompt[0]["content"]
    assert system.startswith("You are Verifier.")
    assert "up to 4 questions" in system  # 5 verifier turns, the last one for deciding
    assert '"Decision: accept"' in system


def test_the_solution_reaches_the_model_unescaped():
    system = make_dialogue("nip").prompt_for("verifier")[0]["content"]
    assert 'return a - b  # <b>&"quoted"' in system
    assert "&lt;" not in system and "&#34;" not in system


def test_nip_prover_sees_the_verifiers_question_with_its_name():
    dialogue = make_dialogue("nip")
    dialogue.step(overrides={"verifier": "Question: what does add(1, 2) return?"})
    assert shape(dialogue.prompt_for("prover")) == [
        ("system", None, "You are Expert. Another agent, Verifier,"),
        ("user", "Verifier", "Verifier: Question: what does add(1, 2) return?"),
    ]


def test_nip_prover_argues_its_stance():
    system = make_dialogue("nip").prompt_for("prover")[0]["content"]
    assert "convince Verifier to accept the solution" in system


def test_an_agent_sees_its_own_earlier_messages_as_assistant_turns():
    dialogue = make_dialogue("nip")
    dialogue.step(overrides={"verifier": "Question: why subtract?"})
    dialogue.step(overrides={"prover": "Answer: it is intended."})
    assert shape(dialogue.prompt_for("verifier")) == [
        ("system", None, "You are Verifier. Your task is to decide"),
        ("assistant", None, "Question: why subtract?"),
        ("user", "Expert", "Expert: Answer: it is intended."),
    ]


def test_the_verifiers_last_turn_ends_with_an_instruction_to_decide():
    dialogue = make_dialogue("nip")
    for i in range(4):
        dialogue.step(overrides={"verifier": f"Question: q{i}?"})
        dialogue.step(overrides={"prover": f"Answer: a{i}."})
    prompt = dialogue.prompt_for("verifier")
    assert prompt[-1] == {"role": "system", "content": LAST_TURN_SYSTEM_MESSAGE}
    assert len(prompt) == 1 + 8 + 1


# --------------------------------------------------------------------------- debate
def test_debate_verifier_is_told_the_sides_and_the_question_format():
    system = make_dialogue("debate").prompt_for("verifier")[0]["content"]
    assert "Expert_1 argues that you should reject it and Expert_2 that you should accept" in system
    assert "Question for Expert_1:" in system and "Question for Expert_2:" in system


def test_debate_provers_argue_opposite_sides():
    dialogue = make_dialogue("debate")
    assert "convince Verifier to reject" in dialogue.prompt_for("prover0")[0]["content"]
    assert "convince Verifier to accept" in dialogue.prompt_for("prover1")[0]["content"]


def test_a_debate_prover_reads_the_other_channel_first_then_its_own():
    dialogue = make_dialogue("debate")
    dialogue.step(
        overrides={"verifier": "Question for Expert_1: why?\nQuestion for Expert_2: why not?"}
    )
    assert shape(dialogue.prompt_for("prover0")) == [
        ("system", None, "You are Expert_1. Another agent, Verifie"),
        ("user", "Verifier", "Verifier: Question for Expert_2: why not?"),
        ("user", "Verifier", "Verifier: Question for Expert_1: why?"),
    ]


def test_debate_provers_see_each_others_answers():
    dialogue = make_dialogue("debate")
    dialogue.step(overrides={"verifier": "Question for Expert_1: a?\nQuestion for Expert_2: b?"})
    dialogue.step(overrides={"prover0": "Answer: it subtracts.", "prover1": "Answer: it adds."})
    prompt = dialogue.prompt_for("prover0", round_id=3)
    assert ("user", "Expert_2", "Expert_2: Answer: it adds.") in shape(prompt)
    assert ("assistant", None, "Answer: it subtracts.") in shape(prompt)


# ----------------------------------------------------------------------------- mnip
def test_mnip_provers_never_see_each_other():
    dialogue = make_dialogue("mnip")
    dialogue.step(overrides={"verifier": "Question for Expert_1: a?\nQuestion for Expert_2: b?"})
    dialogue.step(overrides={"prover0": "Answer: zero.", "prover1": "Answer: one."})
    prompt = dialogue.prompt_for("prover0", round_id=3)
    texts = [m["content"] for m in prompt]
    assert not any("Expert_2" in t and "Answer" in t for t in texts)
    assert not any("b?" in t for t in texts)
    assert ("user", "Verifier", "Verifier: Question for Expert_1: a?") in shape(prompt)


def test_mnip_verifier_reads_both_private_channels():
    dialogue = make_dialogue("mnip")
    dialogue.step(overrides={"verifier": "Question for Expert_1: a?\nQuestion for Expert_2: b?"})
    dialogue.step(overrides={"prover0": "Answer: zero.", "prover1": "Answer: one."})
    names = [m.get("name") for m in dialogue.prompt_for("verifier")[2:]]
    assert sorted(names) == ["Expert_1", "Expert_2"]


# ------------------------------------------------------------------ adp, mac, solo
def test_adp_verifier_reads_one_message_then_decides():
    dialogue = make_dialogue("adp")
    dialogue.step(overrides={"prover": "Answer: the solution is right."})
    prompt = dialogue.prompt_for("verifier")
    assert shape(prompt)[1] == ("user", "Expert", "Expert: Answer: the solution is right.")
    assert LAST_TURN_SYSTEM_MESSAGE not in [m["content"] for m in prompt]


def test_mac_verifier_does_not_learn_which_prover_spoke():
    dialogue = make_dialogue("merlin_arthur", seed=1)  # prover1 speaks
    dialogue.step(overrides={"prover1": "The code is correct."})
    message = dialogue.prompt_for("verifier")[1]
    assert message == {"role": "user", "content": "The code is correct."}


def test_solo_verifier_sees_only_the_problem():
    prompt = make_dialogue("solo_verifier").prompt_for("verifier")
    assert len(prompt) == 1 and "then decide" in prompt[0]["content"]


# ---------------------------------------------------------------- supervisor messages
@pytest.mark.parametrize(
    ("mode", "first", "second"),
    [
        ("none", False, False),
        ("all", True, True),
        ("first", True, False),
        ("all_but_first", False, True),
    ],
)
def test_supervisor_messages_follow_use_supervisor_message(mode, first, second):
    dialogue = make_dialogue(
        "nip", verifier={"use_supervisor_message": mode, "supervisor_name": "Boss"}
    )

    def has_supervisor(prompt):
        return prompt[-1].get("name") == "Boss"

    assert has_supervisor(dialogue.prompt_for("verifier")) is first
    dialogue.step(overrides={"verifier": "Question: a?"})
    dialogue.step(overrides={"prover": "Answer: b."})
    assert has_supervisor(dialogue.prompt_for("verifier")) is second


def test_the_supervisor_counts_the_verifiers_remaining_questions():
    dialogue = make_dialogue("nip", verifier={"use_supervisor_message": "all"})
    assert "You have 4 questions left" in dialogue.prompt_for("verifier")[-1]["content"]


# --------------------------------------------------------------------------- templates
def test_a_custom_template_file_replaces_the_built_in_one(tmp_path):
    path = tmp_path / "verifier.txt"
    path.write_text("Judge $solution for $question. Decision: accept or reject.")
    dialogue = make_dialogue("nip", verifier={"system_prompt_template_path": str(path)})
    assert dialogue.prompt_for("verifier")[0]["content"].startswith("Judge def add(a, b):")


def test_a_template_with_an_unknown_variable_is_rejected_on_load(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text("Hello $agent_name, check $soluton.")
    with pytest.raises(PromptTemplateError, match=r"unknown template variable.*soluton"):
        load_system_template("nip", "verifier", path)
    assert issubclass(PromptTemplateError, NipError)


def test_every_protocol_has_a_built_in_template_for_every_agent():
    from nip.protocols import PROTOCOLS

    for name, cls in PROTOCOLS.items():
        for agent in cls.agent_names:
            assert load_system_template(name, agent).text.strip()
