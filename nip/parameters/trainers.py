"""Parameters of the trainers: run length, Expert Iteration and MALT."""

from __future__ import annotations

from collections.abc import Collection
from typing import Literal

from pydantic import Field

from nip.parameters._base import BaseParameters

TestScheme = Literal["none", "all", "last", "first_and_last"]
TestDatasetSplit = Literal["test", "validation"]
GuessReplacementAnnealing = Literal["none", "linear", "exponential"]
RolloutSelectionMethod = Literal["threshold", "weighted_sampling"]
PairSelectionMethod = Literal["positive_negative", "interval"]
TranscriptFormat = Literal["json", "yaml", "markdown"]
OnFineTuneFailure = Literal["retry", "keep_previous", "stop"]
ExpectedRewardEstimator = Literal["recursive_mean", "leaf_mean"]


class RlParameters(BaseParameters):
    """How long a run is. Defaults are small and safe (the original defaulted to 1,000
    iterations of 125 rollouts, an expensive surprise with a paid API)."""

    num_iterations: int = Field(
        3, description="Training iterations (sample, fine-tune, switch).", ge=1
    )
    rollouts_per_iteration: int = Field(16, description="Dialogues sampled per iteration.", ge=1)
    num_test_iterations: int = Field(
        1, description="Passes over the test split each time the agents are tested.", ge=1
    )
    num_epochs: int = Field(
        1, description="Fine-tuning epochs for agents whose num_epochs is None.", ge=1
    )
    lr: float = Field(
        1e-4,
        description="Learning rate of fine-tuning jobs (local, nip serve, Together AI); refused "
        "when no trainable agent is on a provider that takes one.",
        gt=0.0,
    )


class TextRlParameters(BaseParameters):
    """Options shared by the text trainers (Expert Iteration and MALT)."""

    fine_tune_on_all_previous_rollouts: bool = Field(
        False, description="Fine-tune on the rollouts of every iteration so far, not only the last."
    )
    verifier_guess_replacement_proportion: float = Field(
        0.0,
        description="Share of verifier examples whose final decision is replaced by the true "
        "label.",
        ge=0.0,
        le=1.0,
    )
    verifier_guess_replacement_annealing: GuessReplacementAnnealing = Field(
        "none", description="How the replacement proportion decays over iterations."
    )
    verifier_guess_replacement_annealing_rate: float = Field(
        0.1, description="Decay rate of the replacement proportion.", ge=0.0, le=1.0
    )
    save_transcripts: bool = Field(
        True,
        description="Also write readable transcripts (transcripts/) next to the JSONL rollouts.",
    )
    transcript_format: TranscriptFormat = Field(
        "json", description="Format of the readable transcripts: json, yaml or markdown."
    )
    test_scheme: TestScheme = Field("last", description="In which iterations to test the agents.")
    test_dataset_split: TestDatasetSplit = Field(
        "test", description="Which split of the dataset the test stage uses (test or validation)."
    )
    test_on_whole_dataset: bool = Field(
        True, description="Test on the whole test split (else rollouts_per_iteration items)."
    )
    min_fine_tune_examples: int = Field(
        10,
        description="Fewer examples than this skip fine-tuning for a group (with a warning).",
        ge=1,
    )
    on_fine_tune_failure: OnFineTuneFailure = Field(
        "retry",
        description="When a fine-tuning job fails: retry (resubmit, then keep the previous model), "
        "keep_previous (keep the model, no resubmission) or stop (end the run, resumable).",
    )
    max_fine_tune_retries: int = Field(
        3,
        description="retry: resubmissions of a failed job before keeping the previous model.",
        ge=0,
    )
    fine_tune_retry_backoff_s: float = Field(
        30.0,
        description="retry: wait before the first resubmission; doubled for each further one.",
        ge=0,
    )


class PureTextEiParameters(BaseParameters):
    """Expert Iteration: keep the rollouts an agent won and fine-tune on them."""

    rollout_selection_method: RolloutSelectionMethod = Field(
        "threshold", description="How rollouts are chosen for fine-tuning."
    )
    reward_threshold: float = Field(
        0.9, description="threshold: keep rollouts whose episode reward is at least this."
    )
    weighting_minimum: float | None = Field(
        None,
        description="weighted_sampling: rewards below this are raised to it (None: the minimum).",
    )
    weighting_epsilon: float = Field(
        0.05,
        description="weighted_sampling: probability mass spread uniformly over all rollouts.",
        ge=0.0,
    )
    weighting_sample_size_factor: float = Field(
        0.5, description="weighted_sampling: draw this fraction of the rollouts.", gt=0.0
    )
    weighting_use_replacement: bool = Field(
        True, description="weighted_sampling: with replacement."
    )


class PureTextMaltParameters(BaseParameters):
    """Multi-Agent LLM Training (MALT): trees of responses and DPO on sibling pairs."""

    num_responses_per_timestep: int = Field(
        2, description="Responses sampled per node; a tree has at most this ** rounds leaves.", ge=2
    )
    frozen_agents_generate_one_response: bool = Field(
        True, description="Frozen agents add one child, not several, in rounds only they act."
    )
    pair_selection_method: PairSelectionMethod = Field(
        "positive_negative", description="How preference pairs are chosen among siblings."
    )
    interval_threshold_proportion: float = Field(
        0.1,
        description="interval: minimum expected-reward gap, as a share of the agent's reward "
        "range.",
        ge=0.0,
        le=1.0,
    )
    num_initial_ei_iterations: int = Field(
        0, description="Run Expert Iteration for this many iterations before MALT.", ge=0
    )
    expected_reward_estimator: ExpectedRewardEstimator = Field(
        "recursive_mean",
        description="A node's value: recursive_mean (own reward + mean of its children's values, "
        "the policy's expected return) or leaf_mean (mean over the leaves below, as the original; "
        "for exact replication of its runs).",
    )

    def children_per_node(self, speakers: Collection[str], frozen: Collection[str]) -> int:
        """A tree node's children when ``speakers`` act next: one where only ``frozen`` agents
        act and ``frozen_agents_generate_one_response``, else ``num_responses_per_timestep``."""
        one = self.frozen_agents_generate_one_response and set(speakers) <= set(frozen)
        return 1 if one else self.num_responses_per_timestep
