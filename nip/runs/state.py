"""Where a run stands: its stages and the state saved after each (``state.json``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, get_args

Stage = Literal[
    "sample_rollouts",
    "log_stats",
    "test",
    "create_fine_tune_jobs",
    "await_fine_tune_jobs",
    "switch_models",
    "done",
]
#: An iteration's stages in the order they run; the run plan lists those each iteration runs
#: (:attr:`nip.runs.plan_steps.IterationPlan.stages`), and each one's code is in
#: :data:`nip.training.stages.STAGES`.
ITERATION_STAGES: tuple[str, ...] = get_args(Stage)[:-1]
#: The stages that fine-tune (none after an iteration that trains nothing, such as the last).
FINE_TUNE_STAGES: tuple[str, ...] = ITERATION_STAGES[3:]


@dataclass
class TrainerState:
    """Where a run stands: its iteration, the next stage, and each group's state."""

    iteration: int = 0
    stage: Stage = "sample_rollouts"
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)
    stages_completed: int = 0
    #: The iteration each group's latest fine-tuning job was submitted in, by group name.
    job_iterations: dict[str, int] = field(default_factory=dict)
