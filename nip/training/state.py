"""Where a run stands: its stages and the state saved after each (``state.json``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Stage = Literal[
    "sample_rollouts",
    "log_stats",
    "test",
    "create_fine_tune_jobs",
    "await_fine_tune_jobs",
    "switch_models",
    "done",
]
NEXT_STAGE: dict[str, str] = {
    "sample_rollouts": "log_stats",
    "log_stats": "test",
    "test": "create_fine_tune_jobs",
    "create_fine_tune_jobs": "await_fine_tune_jobs",
    "await_fine_tune_jobs": "switch_models",
    "switch_models": "sample_rollouts",
}


@dataclass
class TrainerState:
    """Where a run stands: its iteration, the next stage, and each group's state."""

    iteration: int = 0
    stage: Stage = "sample_rollouts"
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)
    stages_completed: int = 0
    #: The iteration each group's latest fine-tuning job was submitted in, by group name.
    job_iterations: dict[str, int] = field(default_factory=dict)
