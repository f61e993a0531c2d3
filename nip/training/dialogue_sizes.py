"""How big a run's dialogues will be: calls and tokens per agent, before any model is called.

A :class:`DialogueSizer` plays dialogues to their last round with stand-in responses of a given
length, building every prompt with the agents' real prompt builder; its backends refuse to
generate (:class:`DryRunCallError`). :mod:`nip.training.cost_estimate` prices the result.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from nip.agents.agent import AgentNotActiveInChannelError
from nip.backends import GenerationRequest, GenerationResult
from nip.errors import NipError
from nip.parameters import HyperParameters, PureTextMaltParameters
from nip.protocols import ProtocolHandler
from nip.providers.pool import BackendPool, endpoint_key
from nip.rollouts.dialogue import Dialogue
from nip.rollouts.records import Datapoint, Transcript
from nip.session import Session
from nip.settings import ExperimentSettings
from nip.training.token_count import (
    TOKENS_REPLY_PRIMING,
    TokenCounter,
    count_chat_tokens,
    filler_text,
    token_counter,
)


class DryRunCallError(NipError):
    """Something asked for a model call during a dry run (a dry run never generates)."""


class _RefusingBackend:
    """A chat backend that refuses every request: the dry run's guarantee of no calls."""

    name = "dry-run"

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        raise DryRunCallError(f"a dry run makes no model call (asked for {request.model!r})")

    async def aclose(self) -> None:
        return None


def dry_run_session(
    hyper_params: HyperParameters,
    settings: ExperimentSettings,
    *,
    protocol: type[ProtocolHandler] | None = None,
) -> Session:
    """The run's session (agents, protocol, dataset) with backends that refuse to generate:
    no API key is read and no client is made."""
    refusing = _RefusingBackend()
    settings = replace(settings, serve=False, servers={})  # no server is started or asked
    overrides = {endpoint_key(p): refusing for p in hyper_params.agents.values()}
    pool = BackendPool(settings, overrides=overrides)
    return Session(hyper_params, settings, backends=pool, protocol=protocol)


@dataclass(frozen=True)
class Call:
    """One agent's request in one round of a full-length dialogue."""

    round: int
    agent: str
    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True)
class PassUsage:
    """One agent's usage over one pass of dialogues (or MALT trees): requests (an upper bound from
    the turn schedule), their estimated prompt and completion tokens, the fine-tuning examples the
    pass can give it at most (SFT conversations or DPO pairs), and one example's mean tokens."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    examples: int = 0
    example_tokens: int = 0


class DialogueSizer:
    """Measures the dialogues of one configuration (``session``: a :func:`dry_run_session`); prompts
    are built for ``sample_items`` items of a pass, each response ``response_fill`` of its agent's
    token limit."""

    def __init__(self, session: Session, *, sample_items: int, response_fill: float):
        self.session = session
        self.handler = session.handler
        self.agents = session.agents
        self.sample_items = sample_items
        params = session.hyper_params.agents
        self.counters: dict[str, TokenCounter] = {
            name: token_counter(params[name].model_name) for name in self.agents
        }
        self.response_tokens: Mapping[str, int] = {
            name: max(1, round(response_fill * params[name].effective_max_tokens_per_message))
            for name in self.agents
        }

    @property
    def rounds(self) -> range:
        """Every round of a full-length dialogue."""
        return range(self.handler.num_rounds())

    def turns(self, agent: str, seed: int) -> int:
        """The agent's turns in a full-length dialogue with this seed."""
        return sum(agent in self.handler.active_agents(r, seed) for r in self.rounds)

    def seeds(self, items: Sequence[Datapoint], iteration: int) -> list[int]:
        """The seeds of the dialogues a run plays on ``items`` in ``iteration``."""
        return [
            self.session.dialogue(item, iteration=iteration, index=i).transcript.seed
            for i, item in enumerate(items)
        ]

    # ------------------------------------------------------------ one dialogue
    def _response(self, agent: str, round_id: int, seed: int) -> str:
        channels = self.handler.speakers(round_id, seed)[agent]
        tokens = self.response_tokens[agent]
        if len(channels) == 1:
            return filler_text(tokens)
        headers = self.handler.agent(agent).response_channel_headers
        share = max(1, tokens // len(channels))
        return "\n".join(f"{headers[c]} {filler_text(share)}" for c in channels)

    def simulate(self, datapoint: Datapoint, seed: int) -> tuple[list[Call], Transcript]:
        """A full-length dialogue with stand-in responses, and each call's real prompt size."""
        dialogue = Dialogue.start(self.handler, self.agents, datapoint, seed=seed)
        calls = []
        for round_id in self.rounds:
            turns, messages = [], []
            for agent in self.handler.active_agents(round_id, seed):
                prompt = dialogue.prompt_for(agent)
                tokens = count_chat_tokens(prompt, self.counters[agent])
                calls.append(Call(round_id, agent, tokens, self.response_tokens[agent]))
                text = self._response(agent, round_id, seed)
                turn, written = self.agents[agent].turn_from_text(
                    text, dialogue.transcript, round_id
                )
                turns.append(turn)
                messages += written
            dialogue.apply_round(turns, messages)
        return calls, dialogue.transcript

    def example_tokens(self, agent: str, transcript: Transcript) -> int | None:
        """Tokens of the agent's SFT example of ``transcript`` (None: it did not speak)."""
        try:
            messages = self.agents[agent].fine_tune_messages(transcript)
        except AgentNotActiveInChannelError:
            return None
        return count_chat_tokens(messages, self.counters[agent], reply=False)

    # ------------------------------------------------------------------ passes
    def dialogue_pass(
        self, items: Sequence[Datapoint], seeds: Sequence[int]
    ) -> dict[str, PassUsage]:
        """Every agent's usage over one dialogue per item: calls from each dialogue's turn schedule,
        tokens per call and per example the means over the first ``sample_items``."""
        pairs = list(zip(items, seeds, strict=True))[: self.sample_items]
        sampled = [self.simulate(d, s) for d, s in pairs]
        usage = {}
        for agent in self.agents:
            turns = [self.turns(agent, s) for s in seeds]
            mine = [c for calls, _ in sampled for c in calls if c.agent == agent]
            per_call = sum(c.prompt_tokens for c in mine) / len(mine) if mine else 0.0
            spoke = [e for _, t in sampled if (e := self.example_tokens(agent, t)) is not None]
            usage[agent] = PassUsage(
                calls=sum(turns),
                prompt_tokens=round(per_call * sum(turns)),
                completion_tokens=sum(turns) * self.response_tokens[agent],
                examples=sum(t > 0 for t in turns),
                example_tokens=round(sum(spoke) / len(spoke)) if spoke else 0,
            )
        return usage

    def _prompt_sizes(self, items: Sequence[Datapoint], seeds: Sequence[int]):
        """Mean prompt tokens by (round, agent) over the first ``sample_items`` items."""
        found: dict[tuple[int, str], list[int]] = {}
        for datapoint, seed in list(zip(items, seeds, strict=True))[: self.sample_items]:
            for call in self.simulate(datapoint, seed)[0]:
                found.setdefault((call.round, call.agent), []).append(call.prompt_tokens)
        by_round: dict[int, list[int]] = {}
        for (round_id, _), sizes in found.items():
            by_round.setdefault(round_id, []).extend(sizes)

        def size(round_id: int, agent: str) -> int:
            # An agent the sample never heard in that round (MAC's other prover) is taken
            # to be like the agents that spoke there.
            sizes = found.get((round_id, agent)) or by_round.get(round_id) or [0]
            return round(sum(sizes) / len(sizes))

        return size

    def malt_pass(
        self,
        items: Sequence[Datapoint],
        seeds: Sequence[int],
        malt: PureTextMaltParameters,
        frozen: set[str],
    ) -> tuple[dict[str, PassUsage], int]:
        """Every agent's usage over one MALT tree per item, and the leaves of all trees: every
        branch grows to the last round, each open node asks each agent acting next for k samples in
        one request (k = 1 where only frozen agents act and
        ``frozen_agents_generate_one_response``)."""
        prompt_size = self._prompt_sizes(items, seeds)
        totals = {a: [0, 0, 0, 0, 0] for a in self.agents}  # calls, prompt, compl., pairs, tok
        leaves = 0
        for seed in seeds:
            nodes = 1
            for round_id in self.rounds:
                speakers = self.handler.active_agents(round_id, seed)
                k = malt.children_per_node(speakers, frozen)
                for agent in speakers:
                    prompt, response = prompt_size(round_id, agent), self.response_tokens[agent]
                    pair = prompt - TOKENS_REPLY_PRIMING + 2 * response
                    added = (nodes, nodes * prompt, nodes * k * response)
                    added += (nodes, nodes * pair) if k >= 2 else (0, 0)
                    totals[agent] = [t + a for t, a in zip(totals[agent], added, strict=True)]
                nodes *= k
            leaves += nodes
        usage = {
            agent: PassUsage(
                calls=calls,
                prompt_tokens=prompt,
                completion_tokens=completion,
                examples=pairs,
                example_tokens=round(pair_tokens / pairs) if pairs else 0,
            )
            for agent, (calls, prompt, completion, pairs, pair_tokens) in totals.items()
        }
        return usage, leaves
