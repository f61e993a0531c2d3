"""Expert Iteration: which dialogues each agent learns from, and the SFT dataset they make.

Selection, per agent:

* ``threshold``: the dialogues whose episode reward for the agent is at least
  ``reward_threshold`` (by default: the ones it won).
* ``weighted_sampling``: draws with probability growing with the reward (uniform when all
  rewards are equal).
* Verifier guess replacement: a (possibly decaying) random share of the verifier's examples
  have the final message replaced by the true decision ("stabilised EI").

Randomness comes from a generator seeded by SHA-256 of (run seed, iteration, agent), the same in
every process. :func:`sft_dataset` writes one ``{"messages": [...]}`` line per member's view of
each selected dialogue (the OpenAI fine-tuning and TRL conversational format).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nip.agents import PureTextWholeAgent
from nip.jobs import FineTuneMethod
from nip.parameters import HyperParameters, PureTextEiParameters, TextRlParameters
from nip.rollouts.records import Datapoint, Transcript
from nip.training.context import Progress, RunContext
from nip.utils.seeding import derive_seed


@dataclass(frozen=True)
class Selection:
    """The dialogues chosen to fine-tune one agent: used as they are, and ``guess_replaced``
    (verifier dialogues whose final decision is replaced by the label)."""

    selected: tuple[Transcript, ...]
    guess_replaced: tuple[Transcript, ...] = ()

    def __len__(self) -> int:
        return len(self.selected) + len(self.guess_replaced)


def guess_replacement_proportion(text_rl: TextRlParameters, iteration: int) -> float:
    """The share of verifier examples whose guess is replaced in ``iteration``."""
    p = text_rl.verifier_guess_replacement_proportion
    rate = text_rl.verifier_guess_replacement_annealing_rate
    schedule = text_rl.verifier_guess_replacement_annealing
    if schedule == "linear":
        return max(p - iteration * rate, 0.0)
    if schedule == "exponential":
        return p * (1.0 - rate) ** iteration
    return p


def weighted_sample_indices(
    rewards: Sequence[float], ei: PureTextEiParameters, seed: int
) -> list[int]:
    """Indices drawn with weights growing with reward (see the module docstring)."""
    import numpy as np

    n = len(rewards)
    if n == 0:
        return []
    values = np.asarray(rewards, dtype=float)
    minimum = ei.weighting_minimum if ei.weighting_minimum is not None else float(values.min())
    weights = np.maximum(values, minimum) - minimum
    total = weights.sum()
    weights = weights / total if total > 0 else np.full(n, 1.0 / n)
    weights = weights + ei.weighting_epsilon / n
    weights = weights / weights.sum()
    size = round(n * ei.weighting_sample_size_factor)
    if not ei.weighting_use_replacement:
        size = min(size, int(np.count_nonzero(weights)))
    rng = np.random.default_rng(seed)
    drawn = rng.choice(n, size=size, replace=ei.weighting_use_replacement, p=weights)
    return sorted(int(i) for i in drawn)


def select_rollouts(
    transcripts: Sequence[Transcript],
    agent_name: str,
    *,
    ei: PureTextEiParameters,
    text_rl: TextRlParameters,
    is_verifier: bool,
    iteration: int,
    seed: int,
) -> Selection:
    """Choose ``agent_name``'s fine-tuning dialogues from those where it wrote a valid message."""
    import numpy as np

    candidates = [t for t in transcripts if any(x.valid for x in t.turns_of(agent_name))]
    agent_seed = derive_seed(seed, "ei-selection", iteration, agent_name)
    replaced: list[Transcript] = []
    if is_verifier:
        proportion = guess_replacement_proportion(text_rl, iteration)
        count = math.floor(proportion * len(candidates))
        if count:
            order = np.random.default_rng(agent_seed).permutation(len(candidates))
            replaced = [candidates[i] for i in order[:count]]
            keep = sorted(order[count:])
            candidates = [candidates[i] for i in keep]
    rewards = [t.episode_reward(agent_name) for t in candidates]
    if ei.rollout_selection_method == "threshold":
        selected = [t for t, r in zip(candidates, rewards, strict=True) if r >= ei.reward_threshold]
    else:
        indices = weighted_sample_indices(rewards, ei, derive_seed(agent_seed, "weights"))
        selected = [candidates[i] for i in indices]
    return Selection(tuple(selected), tuple(replaced))


def select_group_rollouts(
    transcripts: Sequence[Transcript],
    agents: Mapping[str, PureTextWholeAgent],
    hyper_params: HyperParameters,
    iteration: int,
) -> tuple[dict[str, list[Transcript]], dict[str, list[Transcript]]]:
    """Each member's selection, by agent: (dialogues used as they are, guess-replaced ones); the
    ``iteration`` seeds the draw and anneals guess replacement."""
    selected: dict[str, list[Transcript]] = {}
    replaced: dict[str, list[Transcript]] = {}
    for name, agent in agents.items():
        selection = select_rollouts(
            transcripts,
            name,
            ei=hyper_params.pure_text_ei,
            text_rl=hyper_params.text_rl,
            is_verifier=agent.is_verifier,
            iteration=iteration,
            seed=hyper_params.seed,
        )
        selected[name] = list(selection.selected)
        replaced[name] = list(selection.guess_replaced)
    return selected, replaced


def sft_dataset(
    agents: Mapping[str, PureTextWholeAgent],
    rollouts_per_agent: Mapping[str, Sequence[Transcript]],
    guess_replaced_rollouts: Mapping[str, Sequence[Transcript]] | None = None,
) -> list[dict[str, Any]]:
    """The SFT lines of a group: each member's view of its dialogues (and of the guess-replaced
    ones, rewritten with the true label), members in order."""
    examples: list[dict[str, Any]] = []
    for name, agent in agents.items():
        examples += agent.build_fine_tune_dataset(rollouts_per_agent.get(name, ()))
        examples += agent.build_fine_tune_dataset(
            (guess_replaced_rollouts or {}).get(name, ()),
            replace_verifier_guess_with_true_label=True,
        )
    return examples


class ExpertIteration:
    """Sample dialogues, keep those each agent won, fine-tune on them (SFT)."""

    name = "expert_iteration"
    label = "Expert Iteration"
    unit = "dialogues"
    method: FineTuneMethod = "supervised"

    def first_iteration(self, hyper_params: HyperParameters) -> int:
        return 0

    async def collect(
        self, run: RunContext, items: Sequence[Datapoint], on_progress: Progress
    ) -> None:
        batch = await run.session.rollouts_async(
            items,
            iteration=run.iteration,
            description=f"iteration {run.iteration}",
            on_progress=on_progress,
        )
        run.run_dir.save_rollouts("train", run.iteration, batch.transcripts)

    def training_data(self, run: RunContext, iterations: Sequence[int]) -> Any:
        return [t for i in iterations for t in run.run_dir.load_rollouts("train", i)]

    def dataset(
        self, run: RunContext, agents: Mapping[str, PureTextWholeAgent], data: Any
    ) -> list[dict[str, Any]]:
        selected, replaced = select_group_rollouts(data, agents, run.hyper_params, run.iteration)
        return sft_dataset(agents, selected, replaced)

    def metrics(self, run: RunContext, iteration: int) -> dict[str, Any]:
        return {}

    def estimate(self, sizer, step, items) -> tuple[Mapping, int]:
        return sizer.dialogue_pass(items, sizer.seeds(items, step.iteration)), len(items)

    def assumptions(self, hyper_params: HyperParameters) -> list[str]:
        return []
