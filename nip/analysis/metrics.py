"""Per-iteration metrics of a batch of dialogues and of MALT trees (see docs/training.md).

Undefined ratios (precision with no accepts, say) are ``None``, never a crash or a NaN.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from nip.protocols import Decision
from nip.providers.openai import PRICES as OPENAI_PRICES
from nip.rollouts.records import AgentTurn, Transcript

#: ``(agent, model)`` -> USD per 1M ``(input, output)`` tokens, None when unknown.
PriceOf = Callable[[str, str], tuple[float, float] | None]


def openai_list_price(agent: str, model: str) -> tuple[float, float] | None:
    """OpenAI's list price of ``model`` (a run prices by each agent's provider instead)."""
    return OPENAI_PRICES.inference(model)


def cost_usd(turns: Iterable[AgentTurn], price: PriceOf = openai_list_price) -> float | None:
    """The API cost of ``turns`` in USD (None if a model is unpriced); cached or
    hand-written turns cost nothing."""
    total = 0.0
    for turn in turns:
        if turn.cached or turn.overridden:
            continue
        price_usd = price(turn.agent, turn.model) if turn.model else None
        if price_usd is None:
            return None
        total += (turn.prompt_tokens * price_usd[0] + turn.completion_tokens * price_usd[1]) / 1e6
    return total


def _ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator else None


def _std(values: Sequence[float]) -> float:
    return statistics.pstdev(values) if len(values) > 1 else 0.0


#: A final decision as a number for ``mean_decision``: reject 0, accept 1, neither half-way.
_DECISION_VALUES = {Decision.REJECT: 0.0, Decision.ACCEPT: 1.0, Decision.NEITHER: 0.5}


def priced_rollout_metrics(
    transcripts: Sequence[Transcript], agents: Mapping[str, Any], settings: Any
) -> dict[str, Any]:
    """:func:`rollout_metrics` priced as the run and its dry run are
    (``nip.providers.inference_price``, with ``settings.prices_usd_per_1m``)."""
    from nip.providers import inference_price

    def price(agent: str, model: str) -> tuple[float, float] | None:
        return inference_price(agents[agent].agent_params, model, settings.prices_usd_per_1m)

    return rollout_metrics(transcripts, price=price)


def rollout_metrics(
    transcripts: Sequence[Transcript],
    *,
    price: PriceOf = openai_list_price,
) -> dict[str, Any]:
    """Accuracy, precision/recall (accept = positive), per-class accuracy, rewards, rates, cost.

    No decision counts as wrong; ``price`` prices ``cost_usd``. Also the metrics of
    :func:`decision_metrics`, :func:`datapoint_metrics` and :func:`agent_usage_metrics`.
    """
    n = len(transcripts)
    metrics: dict[str, Any] = {"num_dialogues": n}
    if n == 0:
        return metrics
    decisions = [t.decision for t in transcripts]
    labels = [t.datapoint.y for t in transcripts]
    correct = [t.correct for t in transcripts]
    pairs = list(zip(decisions, labels, strict=True))
    tp = sum(d is Decision.ACCEPT and y == 1 for d, y in pairs)
    fp = sum(d is Decision.ACCEPT and y == 0 for d, y in pairs)
    fn = sum(d is not Decision.ACCEPT and y == 1 for d, y in pairs)
    metrics.update(
        accuracy=sum(correct) / n,
        std_accuracy=_std([float(c) for c in correct]),
        precision=_ratio(tp, tp + fp),
        recall=_ratio(tp, tp + fn),
        accept_rate=decisions.count(Decision.ACCEPT) / n,
        no_decision_rate=decisions.count(Decision.NONE) / n,
        mean_episode_length=statistics.fmean(t.num_rounds for t in transcripts),
        std_episode_length=_std([t.num_rounds for t in transcripts]),
    )
    for label, solutions in ((1, "correct"), (0, "incorrect")):
        right = sum(c for c, y in zip(correct, labels, strict=True) if y == label)
        metrics[f"accuracy_on_{solutions}_solutions"] = _ratio(right, labels.count(label))
    metrics.update(datapoint_metrics(transcripts))
    metrics.update(decision_metrics(transcripts))
    turns = [turn for t in transcripts for turn in t.turns]
    agents = sorted({turn.agent for turn in turns} | {a for t in transcripts for a in t.stances})
    for agent in agents + ["verifier"] * ("verifier" not in agents):
        rewards = [t.episode_reward(agent) for t in transcripts]
        mine = [turn for turn in turns if turn.agent == agent]
        metrics[f"{agent}.mean_episode_reward"] = statistics.fmean(rewards)
        metrics[f"{agent}.std_episode_reward"] = _std(rewards)
        metrics[f"{agent}.retry_proportion"] = _ratio(sum(x.retries > 0 for x in mine), len(mine))
        metrics[f"{agent}.mean_retries"] = _ratio(sum(x.retries for x in mine), len(mine))
        metrics[f"{agent}.token_limit_proportion"] = _ratio(
            sum(x.token_limit for x in mine), len(mine)
        )
        metrics[f"{agent}.invalid_proportion"] = _ratio(sum(not x.valid for x in mine), len(mine))
        metrics.update(agent_usage_metrics(agent, mine, price))
    metrics["prompt_tokens"] = sum(x.prompt_tokens for x in turns)
    metrics["completion_tokens"] = sum(x.completion_tokens for x in turns)
    metrics["cached_proportion"] = _ratio(sum(x.cached for x in turns), len(turns))
    metrics["cost_usd"] = cost_usd(turns, price)
    return metrics


def datapoint_metrics(transcripts: Sequence[Transcript]) -> dict[str, Any]:
    """How the verifier does on its hardest datapoints: ``worst_datapoint_accuracy``,
    ``always_wrong_proportion`` and ``num_datapoints`` over dialogues grouped by datapoint id."""
    by_datapoint: dict[str, list[bool]] = {}
    for transcript in transcripts:
        by_datapoint.setdefault(transcript.datapoint.id, []).append(transcript.correct)
    if not by_datapoint:
        return {}
    accuracies = [sum(results) / len(results) for results in by_datapoint.values()]
    return {
        "num_datapoints": len(by_datapoint),
        "worst_datapoint_accuracy": min(accuracies),
        "always_wrong_proportion": sum(a == 0 for a in accuracies) / len(accuracies),
    }


def decision_metrics(transcripts: Sequence[Transcript]) -> dict[str, Any]:
    """The verifier's final decisions where it decided: ``mean_decision`` (accept 1, reject 0,
    neither 0.5), ``mean_score``, their spreads, ``verifier_decision_entropy`` (bits) and the
    share of all dialogues ending with neither."""
    decided = [t for t in transcripts if t.decision in _DECISION_VALUES]
    values = [_DECISION_VALUES[t.decision] for t in decided]
    scores = [t.score for t in decided if t.score is not None]
    counts = [sum(t.decision is d for t in decided) for d in _DECISION_VALUES]
    shares = [c / len(decided) for c in counts if c]
    return {
        "mean_decision": statistics.fmean(values) if values else None,
        "std_decision": _std(values) if values else None,
        "mean_score": statistics.fmean(scores) if scores else None,
        "std_score": _std(scores) if scores else None,
        "verifier_decision_entropy": sum(p * math.log2(1 / p) for p in shares) if decided else None,
        "neither_agree_nor_disagree_proportion": _ratio(
            sum(t.decision is Decision.NEITHER for t in transcripts), len(transcripts)
        ),
    }


def agent_usage_metrics(
    agent: str,
    turns: Sequence[AgentTurn],
    price: PriceOf = openai_list_price,
) -> dict[str, Any]:
    """One agent's tokens, API cost and mean request latency over its own ``turns``.

    No latency total: requests run concurrently, and MALT's siblings share one request.
    """
    generated = [t.latency_s for t in turns if t.valid and not t.cached and not t.overridden]
    return {
        f"{agent}.prompt_tokens": sum(t.prompt_tokens for t in turns),
        f"{agent}.completion_tokens": sum(t.completion_tokens for t in turns),
        f"{agent}.cost_usd": cost_usd(turns, price),
        f"{agent}.mean_latency_s": statistics.fmean(generated) if generated else None,
    }


def malt_metrics(trees: Sequence[Any]) -> dict[str, Any]:
    """Node and preference-pair counts of MALT trees (nodes without the root; non-terminal
    nodes with it, where the first pairs are); per agent its pairs, also per branch point."""
    if not trees:
        return {}
    nodes = [len(t.nodes) - 1 for t in trees]
    open_nodes = [sum(1 for n in t.nodes.values() if n.children) for t in trees]
    metrics: dict[str, Any] = {
        "malt_trees": len(trees),
        "mean_malt_nodes": statistics.fmean(nodes),
        "mean_non_terminal_malt_nodes": statistics.fmean(open_nodes),
    }
    agents = sorted(
        {p.agent for t in trees for p in t.pairs}
        | {turn.agent for t in trees for n in t.nodes.values() for turn in n.turns}
    )
    for agent in agents:
        pairs = [sum(p.agent == agent for p in t.pairs) for t in trees]
        metrics[f"{agent}.mean_malt_pairs"] = statistics.fmean(pairs)
        metrics[f"{agent}.malt_pairs"] = sum(pairs)
        metrics[f"{agent}.malt_pair_proportion"] = _ratio(sum(pairs), sum(open_nodes))
    return metrics
