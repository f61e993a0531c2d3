"""The dry run: what a run will cost, before any model is called.

::

    estimate = estimate_cost(HyperParameters.load("exp.yaml"))
    estimate            # a table in Jupyter; print(estimate) in a terminal
    estimate.total_usd, estimate.to_dataframe()

The estimate follows the trainer's own schedule (train passes, the test scheme, fine-tuning
after every iteration but the last, MALT's trees) and builds the **real prompts** of the first
items of each pass with the agents' prompt builder, the dataset and the protocol; only the
responses are stand-ins of a stated length. Nothing is sent anywhere: the session's backends
are replaced by one that refuses to generate, so no API key is needed and no HTTP request is
made. What it assumes is listed in :attr:`CostEstimate.assumptions`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from nip.agents.agent import AgentNotActiveInChannelError
from nip.backends import GenerationRequest, GenerationResult
from nip.backends.pool import BackendPool, endpoint_key
from nip.errors import NipError
from nip.parameters import HyperParameters, PureTextAgentParameters
from nip.parameters.groups import group_members
from nip.rollouts.dialogue import Dialogue
from nip.rollouts.records import Datapoint, Transcript
from nip.session import Session
from nip.settings import ExperimentSettings
from nip.training.cost_report import CostEstimate, CostLine
from nip.training.metrics import (
    OPENAI_FINE_TUNING_PRICES_USD_PER_1M,
    OPENAI_PRICES_USD_PER_1M,
    price_key,
)
from nip.training.token_count import (
    TOKENS_REPLY_PRIMING,
    TokenCounter,
    count_chat_tokens,
    filler_text,
    token_counter,
)
from nip.utils.seeding import derive_seed

#: The trainer's iteration numbers for test passes (``iteration=10_000 + repeat``).
_TEST_ITERATION = 10_000


class DryRunCallError(NipError):
    """Something tried to call a model during a dry run (a bug: a dry run never generates)."""


class _RefusingBackend:
    """A chat backend that refuses every request: the dry run's guarantee of no calls."""

    name = "dry-run"

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        raise DryRunCallError(f"a dry run makes no model call (asked for {request.model!r})")

    async def aclose(self) -> None:
        return None


def is_free(params: PureTextAgentParameters) -> bool:
    """Whether an agent's tokens cost nothing: the dummy API, the embedded model, or one's
    own server (the rule the trainer's ``cost_usd`` metric follows too)."""
    return params.use_dummy_api or params.model_provider in ("Local", "SelfHosted")


@dataclass(frozen=True)
class _Call:
    """One agent's request in one round of a full-length dialogue."""

    round: int
    agent: str
    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True)
class _PassCost:
    """One agent's usage over one pass: calls, tokens, fine-tuning examples and tokens."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    examples: int = 0
    example_tokens: int = 0


class _Estimator:
    def __init__(
        self,
        hyper_params: HyperParameters,
        settings: ExperimentSettings,
        *,
        sample_items: int,
        response_fill: float,
        fine_tuning_prices: Mapping[str, float],
    ):
        self.hp = hyper_params
        refusing = _RefusingBackend()
        overrides = {endpoint_key(p): refusing for p in hyper_params.agents.values()}
        self.session = Session(
            hyper_params, settings, backends=BackendPool(settings, overrides=overrides)
        )
        self.handler = self.session.handler
        self.agents = self.session.agents
        self.sample_items = sample_items
        self.prices = {**OPENAI_PRICES_USD_PER_1M, **settings.prices_usd_per_1m}
        self.ft_prices = {**OPENAI_FINE_TUNING_PRICES_USD_PER_1M, **fine_tuning_prices}
        self.counters: dict[str, TokenCounter] = {
            name: token_counter(hyper_params.agents[name].model_name) for name in self.agents
        }
        self.response_tokens = {
            name: max(1, round(response_fill * p.effective_max_tokens_per_message))
            for name, p in hyper_params.agents.items()
            if name in self.agents
        }
        self.groups = group_members(hyper_params)
        self.unpriced: set[str] = set()

    # --------------------------------------------------------- one dialogue
    def _response(self, agent: str, round_id: int, seed: int) -> str:
        channels = self.handler.speakers(round_id, seed)[agent]
        tokens = self.response_tokens[agent]
        if len(channels) == 1:
            return filler_text(tokens)
        headers = self.handler.agent(agent).response_channel_headers
        share = max(1, tokens // len(channels))
        return "\n".join(f"{headers[c]} {filler_text(share)}" for c in channels)

    def simulate(self, datapoint: Datapoint, seed: int) -> tuple[list[_Call], Transcript]:
        """A full-length dialogue with stand-in responses, and each call's real prompt size."""
        dialogue = Dialogue.start(self.handler, self.agents, datapoint, seed=seed)
        calls = []
        for round_id in range(self.handler.num_rounds()):
            turns, messages = [], []
            for agent in self.handler.active_agents(round_id, seed):
                prompt = dialogue.prompt_for(agent)
                tokens = count_chat_tokens(prompt, self.counters[agent])
                calls.append(_Call(round_id, agent, tokens, self.response_tokens[agent]))
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

    # ------------------------------------------------------------- passes
    def dialogue_pass(self, items: Sequence[Datapoint], seeds: Sequence[int]) -> dict:
        """Every agent's usage over dialogues of ``items`` (one per item, with its seed).

        Calls are counted for every dialogue from its own turn schedule; tokens per call
        and per example are the means over the first ``sample_items`` dialogues.
        """
        pairs = list(zip(items, seeds, strict=True))[: self.sample_items]
        sampled = [self.simulate(d, s) for d, s in pairs]
        result = {}
        for agent in self.agents:
            turns = [
                sum(agent in self.handler.active_agents(r, s) for r in self._rounds) for s in seeds
            ]
            mine = [c for calls, _ in sampled for c in calls if c.agent == agent]
            per_call = sum(c.prompt_tokens for c in mine) / len(mine) if mine else 0.0
            spoke = [e for _, t in sampled if (e := self.example_tokens(agent, t)) is not None]
            result[agent] = _PassCost(
                calls=sum(turns),
                prompt_tokens=round(per_call * sum(turns)),
                completion_tokens=sum(turns) * self.response_tokens[agent],
                examples=sum(t > 0 for t in turns),
                example_tokens=round(sum(spoke) / len(spoke)) if spoke else 0,
            )
        return result

    @property
    def _rounds(self) -> range:
        return range(self.handler.num_rounds())

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

    def malt_pass(self, items: Sequence[Datapoint], iteration: int, frozen: set[str]):
        """Every agent's usage over MALT trees of ``items``, and the leaves of all trees.

        Every open node asks each agent acting next for k samples in one request (k = 1
        where only frozen agents act and ``frozen_agents_generate_one_response``).
        """
        malt = self.hp.pure_text_malt
        seeds = [derive_seed(self.hp.seed, "malt-tree", iteration, i) for i in range(len(items))]
        prompt_size = self._prompt_sizes(items, seeds)
        totals = {
            a: dict(calls=0, prompt=0, completion=0, pairs=0, pair_tokens=0) for a in self.agents
        }
        leaves = 0
        for seed in seeds:
            nodes = 1
            for round_id in self._rounds:
                speakers = self.handler.active_agents(round_id, seed)
                k = malt.num_responses_per_timestep
                if malt.frozen_agents_generate_one_response and set(speakers) <= frozen:
                    k = 1
                for agent in speakers:
                    total, prompt = totals[agent], prompt_size(round_id, agent)
                    response = self.response_tokens[agent]
                    total["calls"] += nodes
                    total["prompt"] += nodes * prompt
                    total["completion"] += nodes * k * response
                    if k >= 2:  # at most one preference pair per node and agent
                        total["pairs"] += nodes
                        total["pair_tokens"] += nodes * (
                            prompt - TOKENS_REPLY_PRIMING + 2 * response
                        )
                nodes *= k
            leaves += nodes
        result = {
            agent: _PassCost(
                calls=t["calls"],
                prompt_tokens=t["prompt"],
                completion_tokens=t["completion"],
                examples=t["pairs"],
                example_tokens=round(t["pair_tokens"] / t["pairs"]) if t["pairs"] else 0,
            )
            for agent, t in totals.items()
        }
        return result, leaves

    # ------------------------------------------------------------- pricing
    def _price(self, model: str, params: PureTextAgentParameters, prompt: int, completion: int):
        if is_free(params):
            return 0.0
        price = self.prices.get(model)
        if price is None:
            self.unpriced.add(model)
            return None
        return (prompt * price[0] + completion * price[1]) / 1e6

    def _training_price(self, model: str, params: PureTextAgentParameters, tokens: int):
        if is_free(params):
            return 0.0
        price = self.ft_prices.get(model)
        if price is None:
            self.unpriced.add(f"fine-tuning {model}")
            return None
        return tokens * price / 1e6

    # ---------------------------------------------------------------- run
    def _frozen(self, agent: str, iteration: int) -> bool:
        """Not trained in ``iteration``: frozen, or not scheduled (the trainer's rule)."""
        params = self.hp.agents[agent]
        return params.freeze_agent or not params.update_schedule.is_update_iteration(iteration)

    def _trained(self, agent: str, iteration: int) -> bool:
        """Whether the agent's group submits a fine-tuning job after ``iteration`` (the
        last iteration stops after its test)."""
        last = iteration >= self.hp.rl.num_iterations - 1
        return not last and not self._frozen(agent, iteration)

    def _test_now(self, iteration: int) -> bool:
        first, last = iteration == 0, iteration == self.hp.rl.num_iterations - 1
        return {"none": False, "all": True, "last": last, "first_and_last": first or last}[
            self.hp.text_rl.test_scheme
        ]

    def _seeds(self, items: Sequence[Datapoint], iteration: int) -> list[int]:
        return [
            self.session.dialogue(item, iteration=iteration, index=i).transcript.seed
            for i, item in enumerate(items)
        ]

    def run(self) -> list[CostLine]:
        hp = self.hp
        lines: list[CostLine] = []
        fine_tuned: set[str] = set()
        for iteration in range(hp.rl.num_iterations):
            models = {
                a: ("ft:" if a in fine_tuned else "")
                + price_key(hp.agents[a].model_name).removeprefix("ft:")
                for a in self.agents
            }
            n = hp.rl.rollouts_per_iteration
            items = self.session.datapoints(n, split="train", iteration=iteration)
            malt = (
                hp.trainer == "pure_text_malt"
                and iteration >= hp.pure_text_malt.num_initial_ei_iterations
            )
            if malt:
                frozen = {a for a in self.agents if self._frozen(a, iteration)}
                train, dialogues = self.malt_pass(items, iteration, frozen)
            else:
                train = self.dialogue_pass(items, self._seeds(items, iteration))
                dialogues = len(items)
            lines += self._lines(iteration, "train", train, models, len(items), dialogues)
            if self._test_now(iteration):
                size = None if hp.text_rl.test_on_whole_dataset else n
                test_items = self.session.datapoints(size, split="test")
                all_items, seeds = [], []
                for repeat in range(hp.rl.num_test_iterations):
                    all_items += test_items
                    seeds += self._seeds(test_items, _TEST_ITERATION + repeat)
                test = self.dialogue_pass(all_items, seeds)
                lines += self._lines(iteration, "test", test, models, len(all_items), len(seeds))
            lines += self._fine_tune_lines(iteration, train, malt)
            fine_tuned |= {a for a in self.agents if self._trained(a, iteration)}
        return lines

    def _lines(self, iteration, stage, costs, models, items, dialogues) -> list[CostLine]:
        return [
            CostLine(
                iteration=iteration,
                stage=stage,
                agent=agent,
                model=models[agent],
                free=is_free(self.hp.agents[agent]),
                items=items,
                dialogues=dialogues,
                calls=cost.calls,
                prompt_tokens=cost.prompt_tokens,
                completion_tokens=cost.completion_tokens,
                usd=self._price(
                    models[agent], self.hp.agents[agent], cost.prompt_tokens, cost.completion_tokens
                ),
            )
            for agent, cost in costs.items()
        ]

    def _fine_tune_lines(self, iteration, train, malt) -> list[CostLine]:
        hp = self.hp
        lines = []
        for agent, cost in train.items():
            if not self._trained(agent, iteration):
                continue
            params = hp.agents[agent]
            examples = cost.examples
            if not malt and hp.text_rl.fine_tune_on_all_previous_rollouts:
                examples *= iteration + 1  # every earlier iteration's dialogues too
            epochs = params.num_epochs or hp.rl.num_epochs
            tokens = examples * cost.example_tokens * epochs
            model = price_key(params.model_name).removeprefix("ft:")
            lines.append(
                CostLine(
                    iteration=iteration,
                    stage="fine-tune",
                    agent=agent,
                    model=model,
                    free=is_free(params),
                    examples=examples,
                    training_tokens=tokens,
                    usd=self._training_price(model, params, tokens),
                )
            )
        return lines


def estimate_cost(
    hyper_params: HyperParameters,
    settings: ExperimentSettings | None = None,
    *,
    sample_items: int = 4,
    response_fill: float = 1.0,
    fine_tuning_prices: Mapping[str, float] | None = None,
) -> CostEstimate:
    """Estimate the model calls, tokens and USD of a run, without calling any model.

    Args:
        hyper_params: The run to estimate.
        settings: Runtime settings; ``prices_usd_per_1m`` corrects the price table.
        sample_items: Build real prompts for this many items of each pass (the others are
            assumed to be like them).
        response_fill: Each response's length as a share of the agent's token limit
            (``max_tokens_per_message``, by default 1.5 x ``max_response_words``): 1.0
            is the upper bound; real answers are usually shorter.
        fine_tuning_prices: USD per 1M training tokens by model, over
            :data:`~nip.training.metrics.OPENAI_FINE_TUNING_PRICES_USD_PER_1M`.

    Returns:
        A :class:`~nip.training.cost_report.CostEstimate`.
    """
    if sample_items < 1:
        raise ValueError(f"sample_items must be at least 1, got {sample_items}")
    if not 0 < response_fill <= 1:
        raise ValueError(f"response_fill must be in (0, 1], got {response_fill}")
    settings = settings or ExperimentSettings(show_progress=False)
    estimator = _Estimator(
        hyper_params,
        settings,
        sample_items=sample_items,
        response_fill=response_fill,
        fine_tuning_prices=fine_tuning_prices or {},
    )
    lines = estimator.run()
    return CostEstimate(
        protocol=hyper_params.interaction_protocol,
        trainer=hyper_params.trainer,
        num_iterations=hyper_params.rl.num_iterations,
        lines=lines,
        tokenizers={a: c.name for a, c in estimator.counters.items()},
        assumptions=_assumptions(hyper_params, sample_items, response_fill),
        unpriced=sorted(estimator.unpriced),
    )


def _assumptions(hp: HyperParameters, sample_items: int, response_fill: float) -> list[str]:
    found = [
        "every dialogue runs to its last round (the verifier may decide earlier): calls are "
        "an upper bound from the turn schedule; retries of unusable responses (up to "
        "num_invalid_generation_retries each) are not counted",
        f"every response is {response_fill:.0%} of its agent's token limit "
        "(max_tokens_per_message, or 1.5 x max_response_words); prompts grow by these "
        "responses round by round",
        f"prompts are the real prompts of the first {sample_items} item(s) of each pass; "
        "the other items are assumed to be like them",
        "fine-tuning: every dialogue in which the agent spoke becomes an example (Expert "
        "Iteration keeps only those above reward_threshold: an upper bound) and every "
        "scheduled job runs; after a job the agent is priced as its fine-tuned model (ft:)",
        "the response cache is ignored; agents on the dummy API, Local or SelfHosted cost 0 USD",
    ]
    if hp.trainer == "pure_text_malt":
        found.append(
            "MALT: every branch of every tree grows to the last round; a node's "
            f"{hp.pure_text_malt.num_responses_per_timestep} samples share one request (its "
            "prompt billed once); at most one DPO pair per node and agent"
        )
    return found
