"""What a run's plug-ins see of it: algorithms, callbacks and the reporter get a
:class:`RunContext` (as TRL's callbacks get ``args, state, control``), never the trainer."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from nip.parameters import HyperParameters
from nip.runs.plan_steps import IterationPlan
from nip.runs.run_dir import RunDirectory
from nip.runs.state import TrainerState
from nip.session import Session
from nip.settings import ExperimentSettings

if TYPE_CHECKING:  # the groups' module imports the algorithms, which import this one
    from nip.training.groups import PureTextSharedModelGroup

#: ``(done, total)`` dialogues of a stage, as they finish.
Progress = Callable[[int, int], None]


@dataclass
class RunContext:
    """A run as its algorithms, callbacks and reporter see it: its parameters, settings, session
    (protocol, agents, backends), folder, :class:`~nip.training.plan.RunPlan`, state (saved after
    every stage), groups by name, and how often jobs and the control file are polled."""

    hyper_params: HyperParameters
    settings: ExperimentSettings
    session: Session
    run_dir: RunDirectory
    plan: Sequence[IterationPlan]
    state: TrainerState = field(default_factory=TrainerState)
    groups: Mapping[str, PureTextSharedModelGroup] = field(default_factory=dict)
    poll_interval_s: float = 2.0

    @property
    def iteration(self) -> int:
        return self.state.iteration

    @property
    def step(self) -> IterationPlan:
        """The plan of the current iteration."""
        return self.plan[self.state.iteration]

    def save_state(self) -> None:
        """Save where the run stands, each group's state included (``state.json``)."""
        self.state.groups = {n: g.get_state_dict() for n, g in self.groups.items()}
        self.run_dir.write_json("state.json", asdict(self.state))

    def submitted(self) -> dict[str, PureTextSharedModelGroup]:
        """The groups whose job of this iteration is submitted, by name."""
        return {n: g for n, g in self.groups.items() if g.submitted_job_id is not None}
