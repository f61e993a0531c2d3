"""Playing dialogues: stepping, retries, rewards, concurrency and reproducibility."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import pickle
from collections.abc import Iterator

import pytest

from nip.agents import PureTextWholeAgent
from nip.analysis.metrics import cost_usd
from nip.backends import Completion, DummyBackend, GenerationRequest, GenerationResult, TokenUsage
from nip.errors import BackendUnavailableError
from nip.parameters import HyperParameters, PureTextAgentParameters
from nip.protocols import Decision
from nip.rollouts import AgentTurn, Datapoint, RolloutBatch
from nip.rollouts.dialogue import DialogueOverError
from nip.session import Session
from nip.settings import ExperimentSettings
from nip.utils.sync import run_sync

ITEMS = [
    Datapoint(
        id=f"p{i}",
        question="Return a + b.",
        solution=f"def f(a, b):\n    return a + b + {i % 2}\n",
        y=1 - i % 2,
        stance=i % 2,
    )
    for i in range(24)
]


class ScriptedBackend:
    """Answers each request with the next scripted (text, finish_reason), after a delay."""

    name = "scripted"

    def __init__(self, script: list[tuple[str | None, str]], delay_s: float = 0.0):
        self._script: Iterator[tuple[str | None, str]] = iter(script)
        self.delay_s = delay_s
        self.requests: list[GenerationRequest] = []

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        self.requests.append(request)
        await asyncio.sleep(self.delay_s)
        text, reason = next(self._script)
        return GenerationResult((Completion(text, reason),), TokenUsage(10, 3), model="scripted")

    async def aclose(self) -> None:
        return None


def session(protocol: str = "nip", settings: ExperimentSettings | None = None, **agent) -> Session:
    names = HyperParameters(interaction_protocol=protocol).agent_names
    hp = HyperParameters(
        interaction_protocol=protocol,
        agents={n: PureTextAgentParameters(use_dummy_api=True, **agent) for n in names},
    )
    return Session(hp, settings or ExperimentSettings(show_progress=False))


def solo_agent(backend, retries: int = 2) -> tuple[Session, PureTextWholeAgent]:
    s = session("solo_verifier", num_invalid_generation_retries=retries)
    agent = s.agents["verifier"]
    agent.backend = backend
    return s, agent


# --------------------------------------------------------------------- step through
def test_a_dialogue_is_played_one_round_at_a_time():
    dialogue = session("nip").dialogue(ITEMS[0])
    assert dialogue.next_speakers == ("verifier",)
    turns = dialogue.step(overrides={"verifier": "Question: is 0 handled?"})
    assert [t.agent for t in turns] == ["verifier"] and turns[0].overridden
    assert dialogue.round_id == 1 and dialogue.next_speakers == ("prover",)
    assert dialogue.transcript.messages[0].content == "Question: is 0 handled?"


def test_a_decision_ends_the_dialogue_and_is_rewarded():
    dialogue = session("nip").dialogue(ITEMS[1])  # y = 0: the solution is wrong
    dialogue.step(overrides={"verifier": "Decision: reject"})
    transcript = dialogue.transcript
    assert dialogue.done and transcript.decision is Decision.REJECT and transcript.correct
    assert transcript.episode_rewards == {"prover": 0.0, "verifier": 1.0}
    with pytest.raises(DialogueOverError):
        dialogue.step()


def test_overriding_an_agent_that_does_not_speak_is_an_error():
    dialogue = session("nip").dialogue(ITEMS[0])
    with pytest.raises(ValueError, match="do not speak in round 0"):
        dialogue.step(overrides={"prover": "Answer: hi"})


def test_a_branch_continues_independently():
    dialogue = session("nip").dialogue(ITEMS[0])
    dialogue.step(overrides={"verifier": "Question: a?"})
    branch = dialogue.branch()
    branch.step(overrides={"prover": "Answer: in the branch."})
    dialogue.step(overrides={"prover": "Answer: in the original."})
    assert branch.transcript.messages[-1].content == "Answer: in the branch."
    assert dialogue.transcript.messages[-1].content == "Answer: in the original."
    assert len(branch.transcript.messages) == len(dialogue.transcript.messages) == 2


def test_regenerate_replays_the_last_round_with_a_new_sample():
    dialogue = session("nip").dialogue(ITEMS[0])
    dialogue.step(overrides={"verifier": "Question: a?"})
    dialogue.step()
    before = dialogue.transcript.turns[-1]
    after = dialogue.regenerate()[0]
    assert dialogue.round_id == 2
    assert after.sample_index == before.sample_index + 1
    assert after.raw_text != before.raw_text


def test_undo_forgets_rounds():
    dialogue = session("nip").dialogue(ITEMS[0])
    dialogue.step(overrides={"verifier": "Question: a?"})
    dialogue.step(overrides={"prover": "Answer: b."})
    dialogue.undo()
    assert dialogue.round_id == 1 and len(dialogue.transcript.messages) == 1


def test_simultaneous_provers_generate_in_the_same_round():
    dialogue = session("debate").dialogue(ITEMS[0])
    dialogue.step(overrides={"verifier": "Question for Expert_1: a?\nQuestion for Expert_2: b?"})
    turns = dialogue.step()
    assert [t.agent for t in turns] == ["prover0", "prover1"]


# --------------------------------------------------------------- parsing and retries
def test_an_invalid_response_is_retried_and_counted():
    backend = ScriptedBackend([("Decision: perhaps", "stop"), ("Decision: accept", "stop")])
    s, _ = solo_agent(backend)
    turn = s.dialogue(ITEMS[0]).step()[0]
    assert turn.decision is Decision.ACCEPT and turn.retries == 1
    assert "accept or reject" in turn.error
    assert backend.requests[0].seed != backend.requests[1].seed  # a retry is a new sample


def test_after_every_retry_fails_the_turn_is_invalid_and_the_dialogue_goes_on():
    backend = ScriptedBackend([("", "stop")] * 3)
    s, _ = solo_agent(backend, retries=2)
    dialogue = s.dialogue(ITEMS[0])
    turn = dialogue.step()[0]
    assert not turn.valid and turn.retries == 2 and "empty" in turn.error
    assert dialogue.done and dialogue.transcript.terminated


def test_a_content_filtered_completion_is_retried():
    backend = ScriptedBackend([(None, "content_filter"), ("Decision: reject", "stop")])
    s, _ = solo_agent(backend)
    turn = s.dialogue(ITEMS[0]).step()[0]
    assert turn.decision is Decision.REJECT and "content filter" in turn.error


def test_an_unknown_finish_reason_is_retried():
    backend = ScriptedBackend([("Decision: accept", "tool_calls"), ("Decision: accept", "stop")])
    s, _ = solo_agent(backend)
    assert s.dialogue(ITEMS[0]).step()[0].retries == 1


def test_a_turn_carries_the_tokens_of_its_rejected_attempts_too():
    # A provider bills every generation, parsed or not (each scripted call: 10 + 3 tokens).
    backend = ScriptedBackend([("Decision: perhaps", "stop"), ("Decision: accept", "stop")])
    s, _ = solo_agent(backend)
    turn = s.dialogue(ITEMS[0]).step()[0]
    assert turn.retries == 1
    assert (turn.prompt_tokens, turn.completion_tokens) == (20, 6)


def test_a_turn_whose_every_attempt_failed_still_costs_what_they_cost():
    backend = ScriptedBackend([("", "stop")] * 3)
    s, _ = solo_agent(backend, retries=2)
    turn = s.dialogue(ITEMS[0]).step()[0]
    assert not turn.valid and (turn.prompt_tokens, turn.completion_tokens) == (30, 9)
    assert turn.model == "scripted" and not turn.cached
    usd_per_million = {"scripted": (1.0, 2.0)}.get
    assert cost_usd([turn], lambda agent, model: usd_per_million(model)) == pytest.approx(
        (30 * 1.0 + 9 * 2.0) / 1e6
    )


class SampledBackend(ScriptedBackend):
    """Answers an ``n``-sampled request with the scripted texts of its next ``n`` entries."""

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        self.requests.append(request)
        completions = tuple(Completion(*next(self._script)) for _ in range(request.n))
        return GenerationResult(completions, TokenUsage(100, 10 * request.n + 1), model="s")


def test_n_sampled_turns_add_up_to_what_the_requests_cost():
    # Sample 1 cannot be parsed and is generated again alone: its share stays on its turn.
    backend = SampledBackend(
        [
            ("Decision: accept", "stop"),
            ("Decision: perhaps", "stop"),
            ("Decision: reject", "stop"),
            ("Decision: accept", "stop"),  # sample 1 again
        ]
    )
    s, agent = solo_agent(backend)
    samples = run_sync(agent.generate_samples(s.dialogue(ITEMS[0]).transcript, 0, 3))
    turns = [turn for turn, _ in samples]
    assert [t.sample_index for t in turns] == [0, 4, 2]
    assert [t.prompt_tokens for t in turns] == [100, 100, 0]  # the n-request's prompt, once
    assert [t.completion_tokens for t in turns] == [11, 10 + 11, 10]
    assert sum(t.prompt_tokens for t in turns) == 100 + 100  # both requests' prompts
    assert sum(t.completion_tokens for t in turns) == 31 + 11  # both requests' completions


def test_hitting_the_token_limit_sets_the_flag_and_keeps_the_text():
    backend = ScriptedBackend([("Question: this question was cut", "length")] * 2)
    s = session("nip")
    s.agents["verifier"].backend = backend
    turn = s.dialogue(ITEMS[0]).step()[0]
    assert turn.token_limit and turn.raw_text == "Question: this question was cut"


def test_backend_failures_propagate_as_typed_errors():
    class Unreachable:
        name = "unreachable"

        async def generate(self, request):
            raise BackendUnavailableError("connection refused", attempts=3)

        async def aclose(self):
            return None

    s, _ = solo_agent(Unreachable())
    with pytest.raises(BackendUnavailableError, match="connection refused"):
        s.rollouts(ITEMS[:3])


# ------------------------------------------------------------------------- batches
@pytest.mark.parametrize(
    "protocol", ["nip", "adp", "debate", "merlin_arthur", "mnip", "solo_verifier"]
)
def test_a_batch_runs_to_completion_under_every_protocol(protocol):
    batch = session(protocol).rollouts(ITEMS)
    assert len(batch) == len(ITEMS)
    assert all(t.done for t in batch)
    assert all(t.num_rounds <= session(protocol).handler.num_rounds() for t in batch)
    assert 0.0 <= batch.accuracy <= 1.0


def test_the_same_seed_gives_the_same_transcripts():
    first = session("debate").rollouts(ITEMS).to_jsonl()
    second = session("debate").rollouts(ITEMS).to_jsonl()
    assert first == second


def test_a_different_seed_gives_different_transcripts():
    hp = session("nip").hyper_params
    other = Session(
        HyperParameters.from_dict({**hp.to_dict(), "seed": hp.seed + 1}),
        ExperimentSettings(show_progress=False),
    )
    assert session("nip").rollouts(ITEMS).to_jsonl() != other.rollouts(ITEMS).to_jsonl()


class WaveGate:
    """A backend that holds each request until ``size`` are in flight, then lets them all go:
    dialogues that advance together pass in full waves; an engine that runs them one after
    another leaves a request waiting alone until ``timeout_s``, and the gate opens for good."""

    name = "wave-gate"

    def __init__(self, inner, size: int, timeout_s: float = 10.0):
        self.inner, self.size, self.timeout_s = inner, size, timeout_s
        self.waves: list[int] = []
        self.timed_out = False
        self._waiting = 0
        self._release: asyncio.Event | None = None

    async def generate(self, request):
        if not self.timed_out:
            self._release = self._release or asyncio.Event()
            release = self._release
            self._waiting += 1
            if self._waiting == self.size:
                self.waves.append(self._waiting)
                self._waiting, self._release = 0, None
                release.set()
            else:
                try:
                    await asyncio.wait_for(release.wait(), self.timeout_s)
                except TimeoutError:
                    self.timed_out = True
                    self.waves.append(self._waiting)
                    release.set()
        return await self.inner.generate(request)

    async def aclose(self) -> None:
        return None


def test_all_dialogues_advance_together():
    """24 dialogues of 5 dependent calls make 5 waves of 24 requests in flight at once (an
    engine running them one after another would make 120 waves of one)."""
    s = session("nip", ExperimentSettings(show_progress=False))
    from nip.backends import DummyPolicy

    gate = WaveGate(DummyBackend(DummyPolicy(decide_on_turn=3)), size=len(ITEMS))
    for agent in s.agents.values():
        agent.backend = gate
    batch = s.rollouts(ITEMS)
    assert all(t.num_rounds == 5 for t in batch)
    assert not gate.timed_out
    assert gate.waves == [24] * 5


def test_a_slow_dialogue_does_not_stall_the_others():
    class SlowForOne:
        name = "slow-for-one"

        async def generate(self, request):
            if "p0" in request.messages[0]["content"] or request.metadata.get("slow"):
                await asyncio.sleep(60.0)  # cancelled once the fast batch is back
            return await DummyBackend().generate(request)

        async def aclose(self):
            return None

    s = session("solo_verifier")
    s.agents["verifier"].backend = SlowForOne()
    slow = Datapoint(id="slow", question="p0 slow", solution="x", y=1)

    async def scenario():
        slow_task = asyncio.create_task(s.rollouts_async([slow]))
        fast = await s.rollouts_async(ITEMS)
        slow_still_running = not slow_task.done()
        slow_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await slow_task
        return fast, slow_still_running

    fast, slow_still_running = asyncio.run(scenario())
    assert len(fast) == len(ITEMS)
    assert slow_still_running


def test_a_batch_exports_to_jsonl_and_dataframes(tmp_path):
    batch = session("nip").rollouts(ITEMS[:6])
    path = tmp_path / "rollouts.jsonl"
    batch.to_jsonl(path)
    assert RolloutBatch.from_jsonl(path).to_jsonl() == batch.to_jsonl()
    frame = batch.to_dataframe()
    assert list(frame["datapoint_id"]) == [f"p{i}" for i in range(6)]
    assert {"correct", "rounds", "verifier.reward", "prover.reward"} <= set(frame.columns)
    turns = batch.messages_dataframe()
    assert len(turns) == sum(len(t.turns) for t in batch)


def test_dataframes_write_decisions_as_words():
    batch = session("nip").rollouts(ITEMS[:6])
    words = {d.word for d in Decision}
    assert set(batch.to_dataframe()["decision"]) <= words
    assert set(batch.messages_dataframe()["decision"]) <= words
    assert batch.to_dataframe()["decision"][0] == batch[0].decision.word


def test_an_agent_turn_shows_as_a_short_line_and_a_card():
    turn = AgentTurn(
        round=2,
        agent="verifier",
        raw_text="The loop stops one item early.\n" * 5 + "Decision: reject",
        decision=Decision.REJECT,
        model="gpt-4o-mini",
        prompt_tokens=300,
        completion_tokens=20,
    )
    assert repr(turn).startswith("AgentTurn(round 2, verifier, 'The loop stops one item")
    assert repr(turn).endswith("...', decision=reject)") and len(repr(turn)) < 120
    card = turn._repr_html_()
    assert "decides: reject" in card and "300 + 20 tokens" in card and "gpt-4o-mini" in card
    assert "tokens · 1 retry<" in dataclasses.replace(turn, retries=1)._repr_html_()
    assert "2 retries" in dataclasses.replace(turn, retries=2)._repr_html_()


def test_a_batch_summarises_accuracy_and_rewards():
    batch = session("nip").rollouts(ITEMS)
    summary = batch.summary()
    assert summary["dialogues"] == 24
    assert summary["accuracy"] == sum(t.correct for t in batch) / 24
    assert "verifier.mean_episode_reward" in summary
    assert "<table>" in batch._repr_html_()


def test_transcripts_render_as_a_chat_and_a_stable_text_repr():
    transcript = session("debate").rollouts(ITEMS[:1])[0]
    html = transcript._repr_html_()
    assert "prover0_channel" in html and "verifier" in html
    assert repr(transcript).startswith("Transcript(debate, datapoint='p0' (correct)")


# ----------------------------------------------------------------- notebook safety
def test_the_sync_api_works_inside_a_running_event_loop():
    """As in a Jupyter cell, where the kernel's loop is already running."""

    async def cell():
        return session("nip").rollouts(ITEMS[:4])

    assert len(asyncio.run(cell())) == 4


def test_run_sync_propagates_exceptions_from_inside_a_loop():
    async def failing():
        raise KeyError("boom")

    async def cell():
        return run_sync(failing())

    with pytest.raises(KeyError, match="boom"):
        asyncio.run(cell())


def test_pickling_an_agent_leaves_its_backend_behind():
    s = session("nip")
    agent = s.agents["verifier"]
    clone = pickle.loads(pickle.dumps(agent))
    assert clone.backend is None and agent.backend is not None
    assert clone.agent_name == "verifier"
