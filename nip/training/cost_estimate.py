"""The dry run: what a run will cost, before any model is called.

``estimate_cost(HyperParameters.load("exp.yaml"))`` follows the run plan the trainer executes and
measures the **real prompts** of the first items of each pass
(:mod:`nip.training.dialogue_sizes`); only the responses are stand-ins of a stated length.
Nothing is sent (the session's backends refuse to generate), so no API key is needed; what it
assumes is in :attr:`CostEstimate.assumptions`. Every run saves its estimate when it starts
(:func:`save_estimate`, called by :class:`~nip.training.callbacks.EstimateCallback`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nip.errors import InvalidParameterError, require_count
from nip.parameters import HyperParameters
from nip.protocols import ProtocolHandler
from nip.providers import inference_price, prices_for, provider_for
from nip.providers.openai import price_key
from nip.runs.plan_steps import TEST_ITERATION
from nip.runs.spend import ESTIMATE_FILE, sum_known, totals, training_usd
from nip.settings import ExperimentSettings
from nip.training.algorithms import BY_NAME
from nip.training.cost_report import CostEstimate, CostLine, Stage
from nip.training.dialogue_sizes import (
    DialogueSizer,
    DryRunCallError,
    PassUsage,
    dry_run_session,
)
from nip.training.plan import IterationPlan, RunPlan, plan_for_session, sent_hyperparameters
from nip.utils import counted
from nip.utils.files import atomic_write_text

__all__ = [
    "CostEstimate",
    "CostLine",
    "DryRunCallError",
    "estimate_cost",
    "estimate_summary",
    "plan_run",
    "save_estimate",
]


def plan_run(
    hyper_params: HyperParameters,
    settings: ExperimentSettings | None = None,
    *,
    protocol: type[ProtocolHandler] | None = None,
) -> RunPlan:
    """The plan of a run of ``hyper_params`` before it starts (``nip plan CONFIG``), sending
    nothing; without the dataset at hand it counts the items without naming them."""
    settings = settings or ExperimentSettings(show_progress=False)
    session = dry_run_session(hyper_params, settings, protocol=protocol)
    return plan_for_session(hyper_params, session, need_data=False)


class _Estimator:
    """Walks the trainer's schedule and prices what the sizer measures."""

    def __init__(
        self,
        hyper_params: HyperParameters,
        settings: ExperimentSettings,
        *,
        sample_items: int,
        response_fill: float,
        fine_tuning_prices: Mapping[str, float],
        protocol: type[ProtocolHandler] | None = None,
    ):
        self.hyper_params = hyper_params
        self.session = dry_run_session(hyper_params, settings, protocol=protocol)
        self.sizer = DialogueSizer(
            self.session, sample_items=sample_items, response_fill=response_fill
        )
        #: The price-table key each agent's calls are priced at (``ft:`` once it is trained).
        self.keys = {a: price_key(hyper_params.agents[a].model_name) for a in self.session.agents}
        # The user's corrections; the rest from each agent's provider (``nip.providers``).
        self.prices = dict(settings.prices_usd_per_1m)
        self.ft_prices = dict(fine_tuning_prices)
        self.unpriced: set[str] = set()
        self.plan = plan_for_session(hyper_params, self.session)

    def _priced(self, model: str, usd: float | None) -> float | None:
        """``usd``, noting ``model`` as unpriced where it is unknown (None)."""
        if usd is None:
            self.unpriced.add(model)
        return usd

    # ---------------------------------------------------------------- run
    def run(self) -> list[CostLine]:
        """Price every pass of the run plan, the one the trainer executes."""
        lines: list[CostLine] = []
        fine_tuned: set[str] = set()
        for step in self.plan.iterations:
            iteration = step.iteration
            models = {
                a: f"ft:{k}" if a in fine_tuned and not k.startswith("ft:") else k
                for a, k in self.keys.items()
            }
            items = self.session.datapoints_by_id(step.item_ids, split=self.plan.train_split)
            train, dialogues = BY_NAME[step.algorithm].estimate(self.sizer, step, items)
            lines += self._lines(iteration, "train", train, models, len(items), dialogues)
            if step.tests:
                split = self.plan.test_split
                all_items, seeds = [], []
                for repeat, ids in enumerate(step.test_pass_item_ids):
                    test_items = self.session.datapoints_by_id(ids, split=split)
                    all_items += test_items
                    seeds += self.sizer.seeds(test_items, TEST_ITERATION + repeat)
                test = self.sizer.dialogue_pass(all_items, seeds)
                lines += self._lines(iteration, "test", test, models, len(all_items), len(seeds))
            lines += self._fine_tune_lines(step, train)
            fine_tuned |= {a for g in step.groups if g.method for a in g.agents}
        return lines

    def _lines(
        self,
        iteration: int,
        stage: Stage,
        usage: Mapping[str, PassUsage],
        models: Mapping[str, str],
        items: int,
        dialogues: int,
    ) -> list[CostLine]:
        lines = []
        for agent, cost in usage.items():
            params, model = self.hyper_params.agents[agent], models[agent]
            price = inference_price(params, model, self.prices)
            spent = (
                cost.prompt_tokens * price[0] + cost.completion_tokens * price[1] if price else 0
            )
            lines.append(
                CostLine(
                    iteration,
                    stage,
                    agent,
                    model,
                    free=not provider_for(params).bills_tokens,
                    items=items,
                    dialogues=dialogues,
                    calls=cost.calls,
                    prompt_tokens=cost.prompt_tokens,
                    completion_tokens=cost.completion_tokens,
                    usd=self._priced(model, None if price is None else spent / 1e6),
                )
            )
        return lines

    def _fine_tune_lines(
        self, step: IterationPlan, train: Mapping[str, PassUsage]
    ) -> list[CostLine]:
        """One line per agent of each group trained after ``step``: its examples of every
        iteration the job learns from, times its tokens, times the job's epochs."""
        lines = []
        for group in step.groups:
            if group.method is None:
                continue
            for agent in group.agents:
                cost = train.get(agent)
                if cost is None:
                    continue
                params = self.hyper_params.agents[agent]
                examples = cost.examples * len(group.data_iterations)
                tokens = examples * cost.example_tokens * group.epochs
                model = price_key(params.model_name).removeprefix("ft:")
                lines.append(
                    CostLine(
                        iteration=step.iteration,
                        stage="fine-tune",
                        agent=agent,
                        model=model,
                        free=not provider_for(params).bills_tokens,
                        examples=examples,
                        training_tokens=tokens,
                        usd=self._priced(
                            f"fine-tuning {model}",
                            training_usd(params, tokens, group.method, self.ft_prices.get(model)),
                        ),
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
    protocol: type[ProtocolHandler] | None = None,
) -> CostEstimate:
    """Estimate the model calls, tokens and USD of a run, without calling any model.

    Args:
        settings: Runtime settings; ``prices_usd_per_1m`` corrects the price table.
        sample_items: Build real prompts for this many items of each pass (the others are
            assumed to be like them).
        response_fill: Each response's length as a share of the agent's token limit (1.0,
            the upper bound; real answers are usually shorter).
        fine_tuning_prices: USD per 1M training tokens by model, over the providers' prices.
        protocol: The class of a protocol of one's own code that the parameters name.

    Raises:
        InvalidParameterError: ``sample_items`` or ``response_fill`` is out of range.
    """
    require_count("sample_items", sample_items)
    if not 0 < response_fill <= 1:
        raise InvalidParameterError("response_fill", response_fill, "a number > 0 and <= 1")
    settings = settings or ExperimentSettings(show_progress=False)
    estimator = _Estimator(
        hyper_params,
        settings,
        sample_items=sample_items,
        response_fill=response_fill,
        fine_tuning_prices=fine_tuning_prices or {},
        protocol=protocol,
    )
    lines = estimator.run()
    return CostEstimate(
        plan=estimator.plan,
        protocol=hyper_params.interaction_protocol,
        trainer=hyper_params.trainer,
        num_iterations=hyper_params.rl.num_iterations,
        lines=lines,
        tokenizers={a: c.name for a, c in estimator.sizer.counters.items()},
        assumptions=_assumptions(hyper_params, estimator.plan, sample_items, response_fill),
        unpriced=sorted(estimator.unpriced),
    )


def _assumptions(
    hyper_params: HyperParameters, plan: RunPlan, sample_items: int, response_fill: float
) -> list[str]:
    found = [
        "every dialogue runs to its last round (the verifier may decide earlier): calls are "
        "an upper bound from the turn schedule; retries of unusable responses (up to "
        "num_invalid_generation_retries each) are not counted",
        f"every response is {response_fill:.0%} of its agent's token limit "
        "(max_tokens_per_message, or 1.5 x max_response_words); prompts grow by these "
        "responses round by round",
        f"prompts are the real prompts of the first {counted(sample_items, 'item')} of each pass; "
        "the other items are assumed to be like them",
        "fine-tuning: every dialogue in which the agent spoke becomes an example (Expert "
        "Iteration keeps only those above reward_threshold: an upper bound) and every "
        "scheduled job runs; after a job the agent is priced as its fine-tuned model (ft:)",
        "the response cache is ignored; agents on the dummy API, Local or SelfHosted cost 0 USD",
    ]
    auto = sorted(
        {
            g.group
            for it in plan.iterations
            for g in it.groups
            if sent_hyperparameters(g.job).get("n_epochs") == "auto"
        }
    )
    if auto:
        found.append(
            f"OpenAI chooses the epochs of {', '.join(auto)} ('auto'); they are priced at "
            "num_epochs (rl.num_epochs): set openai_n_epochs to send and price a fixed number"
        )
    for name in dict.fromkeys(it.algorithm for it in plan.iterations):
        found += BY_NAME[name].assumptions(hyper_params)
    for agent in hyper_params.agents.values():  # what each paid provider's prices assume
        prices = prices_for(agent)
        found += [] if prices is None else prices.notes(agent.model_name)
    return list(dict.fromkeys(found))  # each note once


def estimate_summary(estimate: CostEstimate) -> dict[str, Any]:
    """What ``cost_estimate.json`` holds: the estimate's totals, per iteration and per agent."""

    def split(lines: list) -> dict[str, float | None]:
        inference = sum_known(x.usd for x in lines if x.stage != "fine-tune")
        return totals(inference, sum_known(x.usd for x in lines if x.stage == "fine-tune"))

    iterations = sorted({x.iteration for x in estimate.lines})
    agents = sorted({x.agent for x in estimate.lines})
    return {
        **split(estimate.lines),
        "by_iteration": {
            str(i): split([x for x in estimate.lines if x.iteration == i]) for i in iterations
        },
        "by_agent": {a: sum_known(x.usd for x in estimate.lines if x.agent == a) for a in agents},
        "training_tokens": sum(x.training_tokens for x in estimate.lines),
        "unpriced": estimate.unpriced,
    }


def save_estimate(
    run_dir: str | Path,
    hyper_params: HyperParameters,
    settings: ExperimentSettings,
    protocol: type[ProtocolHandler] | None = None,
) -> Path:
    """Price the plan of ``hyper_params`` as the dry run does and save it in ``run_dir``
    (``protocol``: the class of a protocol of one's own code)."""
    estimate = estimate_cost(hyper_params, settings, protocol=protocol)
    path = Path(run_dir) / ESTIMATE_FILE
    atomic_write_text(path, json.dumps(estimate_summary(estimate), indent=2) + "\n")
    return path
