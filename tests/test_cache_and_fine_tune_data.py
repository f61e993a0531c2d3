"""The response cache, and the fine-tuning examples built from transcripts."""

from __future__ import annotations

import asyncio
import json

from nip.backends import DummyBackend, GenerationRequest
from nip.backends.cache import CachedBackend, ResponseCache
from nip.parameters import HyperParameters, PureTextAgentParameters
from nip.rollouts import Datapoint
from nip.session import Session
from nip.settings import ExperimentSettings

ITEMS = [
    Datapoint(
        id=f"p{i}", question="Return a + b.", solution=f"def f(a, b): return a+b+{i}", y=i % 2
    )
    for i in range(6)
]


class CountingBackend(DummyBackend):
    """The dummy backend, counting the calls that reach it."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    async def generate(self, request):
        self.calls += 1
        return await super().generate(request)


def request(seed: int = 1, n: int = 1) -> GenerationRequest:
    return GenerationRequest(
        model="m", messages=({"role": "user", "content": "Question?"},), seed=seed, n=n
    )


# --------------------------------------------------------------------------- cache
def test_a_repeated_request_is_answered_from_the_cache(tmp_path):
    inner = CountingBackend()
    cached = CachedBackend(inner, ResponseCache(tmp_path / "c.sqlite"), namespace="test")
    first = asyncio.run(cached.generate(request()))
    second = asyncio.run(cached.generate(request()))
    assert inner.calls == 1 and second.cached and not first.cached
    assert second.completions == first.completions


def test_the_cache_persists_across_processes_and_objects(tmp_path):
    path = tmp_path / "c.sqlite"
    asyncio.run(CachedBackend(CountingBackend(), ResponseCache(path), "t").generate(request()))
    inner = CountingBackend()
    result = asyncio.run(CachedBackend(inner, ResponseCache(path), "t").generate(request()))
    assert result.cached and inner.calls == 0


def test_a_different_seed_or_namespace_misses(tmp_path):
    store = ResponseCache(tmp_path / "c.sqlite")
    inner = CountingBackend()
    asyncio.run(CachedBackend(inner, store, "a").generate(request(seed=1)))
    asyncio.run(CachedBackend(inner, store, "a").generate(request(seed=2)))
    asyncio.run(CachedBackend(inner, store, "b").generate(request(seed=1)))
    assert inner.calls == 3


def test_every_sample_of_an_n_request_is_cached(tmp_path):
    inner = CountingBackend()
    cached = CachedBackend(inner, ResponseCache(tmp_path / "c.sqlite"), "t")
    first = asyncio.run(cached.generate(request(n=3)))
    second = asyncio.run(cached.generate(request(n=3)))
    assert len(second.completions) == 3 and second.completions == first.completions
    assert inner.calls == 1


def test_a_rerun_with_the_cache_costs_nothing_and_reproduces_the_transcripts(tmp_path):
    hp = HyperParameters(
        agents={n: PureTextAgentParameters(use_dummy_api=True) for n in ("prover", "verifier")}
    )
    settings = ExperimentSettings(show_progress=False, cache="on", cache_path=tmp_path / "c.db")
    first = Session(hp, settings).rollouts(ITEMS)
    again = Session(hp, settings)
    second = again.rollouts(ITEMS)
    backend = again.backends.backends["dummy"]
    assert backend.misses == 0 and backend.hits > 0
    assert first.to_jsonl().replace('"cached": false', "") == second.to_jsonl().replace(
        '"cached": true', ""
    )


# ---------------------------------------------------------------- fine-tune data
def played(protocol: str = "nip"):
    names = HyperParameters(interaction_protocol=protocol).agent_names
    hp = HyperParameters(
        interaction_protocol=protocol,
        agents={n: PureTextAgentParameters(use_dummy_api=True) for n in names},
    )
    session = Session(hp, ExperimentSettings(show_progress=False))
    return session, session.rollouts(ITEMS)


def test_an_sft_example_is_the_agents_view_ending_with_its_last_message():
    session, batch = played()
    agent = session.agents["verifier"]
    examples = agent.build_fine_tune_dataset(batch.transcripts)
    assert len(examples) == len(ITEMS)  # the verifier speaks in every dialogue
    for example, transcript in zip(examples, batch, strict=True):
        messages = example["messages"]
        assert messages[0]["role"] == "system"
        assert messages[-1] == {
            "role": "assistant",
            "content": transcript.turns_of("verifier")[-1].raw_text,
        }
        json.dumps(example)  # JSONL-ready


def test_guess_replacement_writes_the_true_label_as_the_verifiers_last_message():
    session, batch = played()
    examples = session.agents["verifier"].build_fine_tune_dataset(
        batch.transcripts, replace_verifier_guess_with_true_label=True
    )
    expected = ["Decision: accept" if t.datapoint.y else "Decision: reject" for t in batch]
    assert [e["messages"][-1]["content"] for e in examples] == expected


def test_an_agent_that_never_spoke_contributes_no_example():
    session, batch = played("merlin_arthur")
    spoke = sum(1 for t in batch if t.turns_of("prover0"))
    examples = session.agents["prover0"].build_fine_tune_dataset(batch.transcripts)
    assert len(examples) == spoke < len(ITEMS)


def test_fine_tune_examples_never_contain_supervisor_messages():
    names = ("prover", "verifier")
    hp = HyperParameters(
        agents={
            n: PureTextAgentParameters(use_dummy_api=True, use_supervisor_message="all")
            for n in names
        }
    )
    session = Session(hp, ExperimentSettings(show_progress=False))
    batch = session.rollouts(ITEMS)
    for name in names:
        for example in session.agents[name].build_fine_tune_dataset(batch.transcripts):
            assert all(m.get("name") != "Supervisor" for m in example["messages"])


def scripted_nip_dialogue():
    """A 5-round nip dialogue in which the verifier asks twice, then rejects."""
    hp = HyperParameters(
        nip_protocol={"max_message_rounds": 5},
        agents={n: PureTextAgentParameters(use_dummy_api=True) for n in ("prover", "verifier")},
    )
    session = Session(hp, ExperimentSettings(show_progress=False))
    dialogue = session.dialogue(ITEMS[0])
    for text in (
        "Question: a?",
        "Answer: one.",
        "Question: b?",
        "Answer: two.",
        "Decision: reject",
    ):
        dialogue.step(overrides={dialogue.next_speakers[0]: text})
    return session, dialogue.transcript


def test_the_verifiers_example_replays_the_decide_now_notice_it_saw():
    session, transcript = scripted_nip_dialogue()
    (example,) = session.agents["verifier"].build_fine_tune_dataset([transcript])
    roles = [(m["role"], m["content"][:12]) for m in example["messages"]]
    assert roles[-2:] == [("system", "You cannot a"), ("assistant", "Decision: re")]
    verifier = session.agents["verifier"]
    assert example["messages"][:-1] == verifier.build_chat_prompt(transcript, 4)


def test_an_example_can_keep_what_others_said_after_the_agents_last_message():
    session, transcript = scripted_nip_dialogue()
    prover = session.agents["prover"]
    (trimmed,) = prover.build_fine_tune_dataset([transcript])
    (full,) = prover.build_fine_tune_dataset([transcript], ensure_last_message_is_assistant=False)
    assert trimmed["messages"][-1] == {"role": "assistant", "content": "Answer: two."}
    assert full["messages"] == trimmed["messages"]  # the verifier's decision is not a message


def test_a_prompt_trimmed_to_the_agents_last_message_needs_one():
    import pytest

    from nip.agents import AgentNotActiveInChannelError

    session, transcript = scripted_nip_dialogue()
    with pytest.raises(AgentNotActiveInChannelError):
        session.agents["prover"].build_chat_prompt(
            transcript, 1, ensure_last_message_is_assistant=True
        )
    prompt = session.agents["verifier"].build_chat_prompt(
        transcript,
        2,
        ensure_last_message_is_assistant=True,
        replace_last_message_with_true_label=True,
    )
    assert prompt[-1] == {"role": "assistant", "content": "Decision: reject"}  # y = 0
    assert prompt[-2]["role"] == "system"  # "Question: a?" was its only message
