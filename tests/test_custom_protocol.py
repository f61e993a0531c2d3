"""A protocol defined outside nip (here, in this test module) runs like a shipped one.

Two protocols are defined below as a researcher would in a notebook cell: a verifier that
must ask two questions before it may decide (prompts given inline), and a two-prover
protocol in which each prover also reads the other's channel (prompts in template files).
They go through ``Session`` rollouts, the Expert Iteration trainer with the dummy API, a
resumed run and the prompt inspector with nothing else changed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar

import pytest

from nip.errors import InvalidParameterError, ProtocolDefinitionError, UnknownProtocolError
from nip.parameters import HyperParameters, PureTextAgentParameters, RlParameters, TextRlParameters
from nip.protocols import MAIN, VERIFIER, AgentSpec, ChannelSpec, MnipProtocol, ProtocolHandler
from nip.rollouts import Datapoint
from nip.session import Session
from nip.settings import ExperimentSettings
from nip.training.trainer import PureTextEiTrainer, build_trainer


class TwoQuestionsProtocol(ProtocolHandler):
    """The verifier questions one prover and may decide only after asking two questions."""

    name = "two_questions"
    agent_names = ("prover", VERIFIER)
    max_message_rounds = 7
    stance_can_be_randomized = True
    system_prompts: ClassVar = {
        "prover": "You are $agent_name. Argue that the answer is $agent_stance_string.\n"
        "$question\n$solution\nAt most $max_response_words words.",
        VERIFIER: "You are the Verifier. Ask at least two questions, then decide.\n"
        "$verifier_decision_instructions\n$question\n$solution\n"
        "You may ask up to $max_questions questions of at most $max_response_words words.",
    }

    def _build_agents(self) -> tuple[AgentSpec, ...]:
        return (
            AgentSpec("prover", "Expert", default_stance=1),
            AgentSpec(VERIFIER, "Verifier", is_verifier=True),
        )

    def speakers(self, round_id: int, seed: int = 0) -> dict[str, tuple[str, ...]]:
        return {VERIFIER if round_id % 2 == 0 else "prover": (MAIN,)}

    def can_decide(self, round_id: int, seed: int = 0) -> bool:
        return super().can_decide(round_id, seed) and round_id >= 4  # after two questions


def peeking_provers(template_dir: Path) -> type[ProtocolHandler]:
    """mnip in which each prover also reads the other's channel, prompts in files."""
    for agent in ("prover0", "prover1", VERIFIER):
        (template_dir / f"{agent}.txt").write_text(
            f"You are $agent_name ({agent}); the other expert's channel is open to you.\n"
            + ("$verifier_decision_instructions\n" if agent == VERIFIER else "")
            + "$question\n$solution\n"
        )

    class PeekingProvers(MnipProtocol):
        name = "peeking_provers"
        system_prompts: ClassVar = {
            a: template_dir / f"{a}.txt" for a in ("prover0", "prover1", VERIFIER)
        }

        def _build_channels(self) -> tuple[ChannelSpec, ...]:
            everyone = frozenset(self.agent_names)
            return tuple(ChannelSpec(f"{p}_channel", everyone) for p in ("prover0", "prover1"))

    return PeekingProvers


ITEMS = [
    Datapoint(
        id=f"p{i}",
        question="Return a + b.",
        solution=f"def f(a, b):\n    return a + b + {i % 2}\n",
        y=1 - i % 2,
        stance=i % 2,
    )
    for i in range(8)
]


def dummy_params(protocol: type[ProtocolHandler], **fields) -> HyperParameters:
    agents = {a: PureTextAgentParameters(use_dummy_api=True) for a in protocol.agent_names}
    return protocol.hyper_parameters(agents=agents, **fields)


def quiet(run_dir: Path | None = None) -> ExperimentSettings:
    return ExperimentSettings(run_dir=run_dir, show_progress=False, cache="off")


# ------------------------------------------------------------------ the definition
@pytest.mark.parametrize(
    ("round_id", "speaker", "may_decide"),
    [(0, "verifier", False), (1, "prover", False), (2, "verifier", False), (4, "verifier", True)],
)
def test_the_verifier_may_decide_only_after_two_questions(round_id, speaker, may_decide):
    handler = TwoQuestionsProtocol()
    assert handler.active_agents(round_id) == (speaker,)
    assert handler.can_decide(round_id) is may_decide


def test_the_saved_configuration_records_the_protocols_name_and_loads_again():
    params = dummy_params(TwoQuestionsProtocol)
    saved = params.to_dict()
    assert saved["interaction_protocol"] == "two_questions"
    assert HyperParameters.from_dict(json.loads(json.dumps(saved))).agent_names == (
        "prover",
        "verifier",
    )


def test_a_protocol_name_nip_does_not_know_needs_its_agents_in_the_configuration():
    with pytest.raises(InvalidParameterError, match="name its agents in `agents`"):
        HyperParameters(interaction_protocol="two_questions")


def test_a_protocol_of_ones_own_is_not_found_by_name_alone():
    with pytest.raises(UnknownProtocolError, match="protocol=MyProtocol"):
        Session(dummy_params(TwoQuestionsProtocol), quiet())


def test_the_protocol_passed_must_be_the_one_the_configuration_names():
    with pytest.raises(InvalidParameterError, match="interaction_protocol='nip'"):
        Session(HyperParameters(), quiet(), protocol=TwoQuestionsProtocol)


def test_a_protocol_whose_agent_names_disagree_with_its_agents_is_refused():
    class Misnamed(TwoQuestionsProtocol):
        agent_names = ("expert", VERIFIER)
        system_prompts: ClassVar = {}

    with pytest.raises(ProtocolDefinitionError, match="builds the agents"):
        Misnamed()


class OneSideEach(MnipProtocol):
    """mnip whose author declares the provers' stances part of the protocol (each argues its
    own side), so they may not be randomised."""

    name = "one_side_each"
    stance_can_be_randomized = False


RANDOMISED = {"randomize_prover_stance": True}


def test_stance_randomisation_is_refused_where_the_protocol_fixes_its_provers_stances():
    """The check reads the protocol's own declaration (``stance_can_be_randomized``), so a
    protocol of one's own is checked like a shipped one: the setting is never accepted and
    ignored."""
    agents = {a: PureTextAgentParameters(use_dummy_api=True) for a in OneSideEach.agent_names}
    with pytest.raises(InvalidParameterError, match=r"protocol_common\.randomize_prover_stance"):
        OneSideEach.hyper_parameters(agents=agents, protocol_common=RANDOMISED)
    params = HyperParameters(
        interaction_protocol="one_side_each", agents=agents, protocol_common=RANDOMISED
    )
    with pytest.raises(InvalidParameterError, match=r"OneSideEach\.stance_can_be_randomized"):
        Session(params, quiet(), protocol=OneSideEach)


def test_a_protocol_that_allows_it_plays_each_items_randomised_stance():
    params = dummy_params(TwoQuestionsProtocol, protocol_common=RANDOMISED)
    session = Session(params, quiet(), protocol=TwoQuestionsProtocol)
    batch = session.rollouts(ITEMS[:4])
    assert [t.stances["prover"] for t in batch] == [item.stance for item in ITEMS[:4]]


# ---------------------------------------------------------------------- running it
def test_rollouts_of_the_protocol_decide_only_after_two_questions():
    session = Session(dummy_params(TwoQuestionsProtocol), quiet(), protocol=TwoQuestionsProtocol)
    batch = session.rollouts(ITEMS)
    assert {t.protocol for t in batch} == {"two_questions"}
    for transcript in batch:
        questions = [t for t in transcript.turns_of(VERIFIER) if t.decision.word == "no decision"]
        assert len(questions) >= 2
        assert transcript.done


def test_its_agents_get_the_inline_system_prompts():
    session = Session(dummy_params(TwoQuestionsProtocol), quiet(), protocol=TwoQuestionsProtocol)
    prompt = session.agents[VERIFIER].build_chat_prompt(session.dialogue(ITEMS[0]).transcript, 0)
    assert prompt[0]["content"].startswith("You are the Verifier. Ask at least two questions")
    assert "up to 3 questions" in prompt[0]["content"]


def test_each_prover_reads_the_other_provers_channel(tmp_path):
    protocol = peeking_provers(tmp_path)
    # The verifier may decide from its third turn (round 4): both provers speak in rounds 1, 3.
    params = dummy_params(protocol, mnip_protocol={"min_message_rounds": 4})
    session = Session(params, quiet(), protocol=protocol)
    assert session.handler.visible_channels("prover0") == ("prover0_channel", "prover1_channel")
    transcript = session.rollouts(ITEMS[:1]).transcripts[0]
    prover1_said = transcript.turn("prover1", 1).raw_text
    prompt = session.agents["prover0"].build_chat_prompt(transcript, 3)
    assert prompt[0]["content"].startswith("You are Expert_1 (prover0)")
    assert any(prover1_said.strip() in m["content"] for m in prompt[1:])


def test_expert_iteration_trains_and_resumes_a_run_of_the_protocol(tmp_path):
    params = dummy_params(
        TwoQuestionsProtocol,
        dataset=str(dataset_file(tmp_path)),
        rl=RlParameters(num_iterations=2, rollouts_per_iteration=6),
        text_rl=TextRlParameters(min_fine_tune_examples=1, test_scheme="none"),
        pure_text_ei={"reward_threshold": 0.5},
    )
    run_dir = tmp_path / "run"
    trainer = build_trainer(params, quiet(run_dir), protocol=TwoQuestionsProtocol)
    trainer.train(max_stages=3)
    saved = json.loads((run_dir / "hyper_params.json").read_text())
    assert saved["interaction_protocol"] == "two_questions"
    with pytest.raises(UnknownProtocolError):
        PureTextEiTrainer.resume(run_dir, quiet())
    resumed = PureTextEiTrainer.resume(run_dir, quiet(), protocol=TwoQuestionsProtocol)
    assert resumed.train().stage == "done"
    models = [g.model_name for g in resumed.groups.values()]
    assert all(":ft-" in model for model in models)


def test_the_cost_of_a_run_of_the_protocol_is_estimated_from_its_schedule(tmp_path):
    from nip.training.cost_estimate import estimate_cost

    params = dummy_params(TwoQuestionsProtocol, dataset=str(dataset_file(tmp_path)))
    estimate = estimate_cost(params, quiet(), protocol=TwoQuestionsProtocol)
    assert estimate.protocol == "two_questions"
    # A full-length dialogue: the verifier in rounds 0, 2, 4, 6 and the prover in 1, 3, 5.
    first = [line for line in estimate.lines if line.iteration == 0 and line.stage == "train"]
    assert {line.agent: line.calls for line in first} == {
        "prover": 3 * params.rl.rollouts_per_iteration,
        "verifier": 4 * params.rl.rollouts_per_iteration,
    }


def test_a_run_of_the_protocol_saves_the_estimate_of_its_plan_when_it_starts(tmp_path):
    params = dummy_params(TwoQuestionsProtocol, dataset=str(dataset_file(tmp_path)))
    run_dir = tmp_path / "run"
    trainer = build_trainer(params, quiet(run_dir), protocol=TwoQuestionsProtocol)
    trainer.train(max_stages=1)
    saved = json.loads((run_dir / "cost_estimate.json").read_text())
    assert saved["total_usd"] == 0.0 and set(saved["by_agent"]) == {"prover", "verifier"}


def test_the_prompt_inspector_shows_the_protocols_prompt():
    from nip.widgets import PromptInspector

    session = Session(dummy_params(TwoQuestionsProtocol), quiet(), protocol=TwoQuestionsProtocol)
    inspector = PromptInspector(session.dialogue(ITEMS[0]), agent=VERIFIER)
    assert "Ask at least two questions" in inspector.prompt_view.value


def dataset_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.jsonl"
    rows = [
        {"id": i.id, "question": i.question, "solution": i.solution, "y": i.y, "split": "train"}
        for i in ITEMS
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path
