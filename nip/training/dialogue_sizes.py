"""How big a run's dialogues will be: calls and tokens per agent, before any model is called.

A :class:`DialogueSizer` plays dialogues to their last round with stand-in responses of a given
length, building every prompt with the agents' real prompt builder; its backends refuse to
generate (:class:`DryRunCallError`). :mod:`nip.training.cost_estimate` prices the result.

OpenAI's models' tokens are counted with ``tiktoken`` (``o200k_base`` for gpt-4o, gpt-4.1 and o;
``cl100k_base`` for gpt-4 and gpt-3.5) when it is installed (the ``cost`` extra) and its
encoding file is already here (a dry run makes no HTTP request). Fetch it once with a network::

    python -c "import tiktoken; tiktoken.get_encoding('o200k_base')"

Otherwise a token is four characters, rounded up (within 4 % of ``o200k_base`` on nip's
prompts).
"""

from __future__ import annotations

import hashlib
import math
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from nip.agents.agent import AgentNotActiveInChannelError
from nip.backends import GenerationRequest, GenerationResult
from nip.errors import NipError
from nip.parameters import HyperParameters, PureTextMaltParameters
from nip.protocols import ProtocolHandler
from nip.providers.openai import price_key
from nip.providers.pool import BackendPool, endpoint_key
from nip.rollouts.dialogue import Dialogue
from nip.rollouts.records import Datapoint, Transcript
from nip.session import Session
from nip.settings import ExperimentSettings

#: Where tiktoken downloads each encoding from (its cache file is named by this URL's SHA-1).
_ENCODING_URLS = {
    "o200k_base": "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
    "cl100k_base": "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
}

#: Tokens OpenAI adds around each chat message, and to prime the reply (its cookbook's
#: figures for the gpt-4o family; a name costs one more token).
TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
TOKENS_REPLY_PRIMING = 3


class TokenCounter(Protocol):
    """Counts the tokens of a text."""

    #: How the counting is done, for reports (``"o200k_base (tiktoken)"``, ``"chars/4"``).
    name: str

    def count(self, text: str) -> int:
        """The number of tokens of ``text``."""
        ...


@dataclass(frozen=True)
class CharsPerTokenCounter:
    """One token per ``chars_per_token`` characters, rounded up."""

    chars_per_token: float = 4.0

    @property
    def name(self) -> str:
        return f"chars/{self.chars_per_token:g}"

    def count(self, text: str) -> int:
        return math.ceil(len(text) / self.chars_per_token)


class TiktokenCounter:
    """Exact counts with a tiktoken encoding."""

    def __init__(self, encoding: Any):
        self._encoding = encoding
        self.name = f"{encoding.name} (tiktoken)"

    def count(self, text: str) -> int:
        return len(self._encoding.encode(text, disallowed_special=()))


def encoding_name(model: str) -> str | None:
    """The tiktoken encoding of an OpenAI model, or None for other models."""
    key = price_key(model).removeprefix("ft:")
    if key.startswith(("gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4")):
        return "o200k_base"
    if key.startswith(("gpt-4", "gpt-3.5")):
        return "cl100k_base"
    return None


def token_counter(model: str) -> TokenCounter:
    """The best offline counter for ``model``: tiktoken where its encoding's file is already in
    tiktoken's cache (found by its own rule), else chars/4."""
    encoding = encoding_name(model)
    cache_dir = os.environ.get(
        "TIKTOKEN_CACHE_DIR",
        os.environ.get("DATA_GYM_CACHE_DIR", os.path.join(tempfile.gettempdir(), "data-gym-cache")),
    )
    if encoding is None or not cache_dir:  # not OpenAI's, or tiktoken's caching is off
        return CharsPerTokenCounter()
    key = hashlib.sha1(_ENCODING_URLS[encoding].encode()).hexdigest()
    if not os.path.isfile(os.path.join(cache_dir, key)):
        return CharsPerTokenCounter()  # tiktoken would download it: not in a dry run
    try:
        import tiktoken

        return TiktokenCounter(tiktoken.get_encoding(encoding))
    except Exception:  # not installed, or a corrupt file (tiktoken would download it again)
        return CharsPerTokenCounter()


def count_chat_tokens(
    messages: Iterable[Mapping[str, Any]], counter: TokenCounter, *, reply: bool = True
) -> int:
    """The prompt tokens of a chat request (with ``reply=False``, of a training example): per
    message its content, role and :data:`TOKENS_PER_MESSAGE` (a ``name``: :data:`TOKENS_PER_NAME`).
    """
    total = TOKENS_REPLY_PRIMING if reply else 0
    for message in messages:
        total += TOKENS_PER_MESSAGE + counter.count(str(message.get("content") or ""))
        total += counter.count(str(message["role"]))
        if message.get("name"):
            total += TOKENS_PER_NAME + counter.count(str(message["name"]))
    return total


def filler_text(tokens: int) -> str:
    """A text of exactly ``tokens`` tokens for every counter here (``"the the ..."``):
    stands in for a response of that length when prompts are built ahead of a run."""
    return " ".join(["the"] * tokens) if tokens > 0 else "the"


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
        usage = {  # the mean tokens of a pair
            agent: PassUsage(*t[:4], example_tokens=round(t[4] / t[3]) if t[3] else 0)
            for agent, t in totals.items()
        }
        return usage, leaves
