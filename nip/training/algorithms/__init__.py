"""The training algorithms, each a small object behind one protocol, and their table.

An algorithm says what an iteration collects (``collect``), what and how a group's dataset is
built (``training_data``, ``dataset``), its jobs' ``method``, its ``metrics``, how the dry run
sizes it (``estimate``) and how the plan shows it (``label``, ``unit``); nothing else branches on
its name. Adding one (docs/design.md): a module here implementing :class:`TrainingAlgorithm`,
and its entry in :data:`ALGORITHMS` under its ``HyperParameters.trainer`` name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

from nip.agents import PureTextWholeAgent
from nip.jobs import FineTuneMethod
from nip.parameters import HyperParameters
from nip.rollouts.records import Datapoint
from nip.runs.plan_steps import IterationPlan
from nip.training.algorithms.expert_iteration import ExpertIteration
from nip.training.algorithms.malt import Malt
from nip.training.context import Progress, RunContext
from nip.training.dialogue_sizes import DialogueSizer


@runtime_checkable
class TrainingAlgorithm(Protocol):
    """What an algorithm decides; the trainer's loop does everything else."""

    #: Its name in the run plan (``IterationPlan.algorithm``).
    name: str
    #: How the plan shows it, and what it samples per item ("dialogues", "trees").
    label: str
    unit: str
    #: The fine-tuning method of its jobs.
    method: FineTuneMethod

    def first_iteration(self, hyper_params: HyperParameters) -> int:
        """The first iteration it runs; Expert Iteration runs the ones before."""
        ...

    async def collect(self, run: RunContext, items: Sequence[Datapoint], on_progress: Progress):
        """Sample the current iteration's data from ``items`` (the plan's) and save it to the
        run directory (its train rollouts, and anything else it learns from)."""
        ...

    def training_data(self, run: RunContext, iterations: Sequence[int]) -> Any:
        """What the jobs learn from: the saved data of ``iterations``."""
        ...

    def dataset(
        self, run: RunContext, agents: Mapping[str, PureTextWholeAgent], data: Any
    ) -> list[dict[str, Any]]:
        """The lines of the job of a group of ``agents``."""
        ...

    def metrics(self, run: RunContext, iteration: int) -> dict[str, Any]:
        """Metrics of its own for the iteration, beyond the dialogues' (may be empty)."""
        ...

    def estimate(
        self, sizer: DialogueSizer, step: IterationPlan, items: Sequence[Datapoint]
    ) -> tuple[Mapping, int]:
        """The dry run's measure of ``step``'s sampling: each agent's usage, and dialogues."""
        ...

    def assumptions(self, hyper_params: HyperParameters) -> list[str]:
        """What the dry run assumes of it, in words (may be empty)."""
        ...


#: The algorithm each ``HyperParameters.trainer`` name runs (after the Expert Iteration it
#: may start with: :meth:`TrainingAlgorithm.first_iteration`).
ALGORITHMS: Mapping[str, TrainingAlgorithm] = MappingProxyType(
    {"pure_text_ei": ExpertIteration(), "pure_text_malt": Malt()}
)
#: Every algorithm by its name in the run plan.
BY_NAME: Mapping[str, TrainingAlgorithm] = MappingProxyType(
    {a.name: a for a in ALGORITHMS.values()}
)


def algorithm_of(hyper_params: HyperParameters, iteration: int) -> TrainingAlgorithm:
    """Which algorithm ``iteration`` runs: the trainer's, once its first iteration is reached,
    Expert Iteration before."""
    algorithm = ALGORITHMS[hyper_params.trainer]
    if iteration >= algorithm.first_iteration(hyper_params):
        return algorithm
    return ALGORITHMS["pure_text_ei"]
