"""The training algorithms, each a small object behind one protocol, and their table.

An algorithm says three things, and the trainer's loop (:mod:`nip.training.trainer`) does the
rest: what an iteration collects (``collect``: dialogues, or MALT's response trees), what a
group's dataset is built from (``training_data``, over the iterations the run plan names) and
how (``dataset``), and which fine-tuning ``method`` its jobs use. Which algorithm an iteration
runs is the run plan's decision (:func:`nip.training.plan.algorithm_of`).

Adding one: a module with its selection and dataset (as :mod:`nip.training.expert_iteration`
and :mod:`nip.training.malt`), an object here implementing :class:`TrainingAlgorithm`, and its
entry in :data:`ALGORITHMS` (see docs/design.md, "Adding a trainer").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from nip.jobs import FineTuneMethod
from nip.training.expert_iteration import select_group_rollouts, sft_dataset
from nip.training.malt import build_trees_async, dpo_dataset
from nip.training.malt_tree import ResponseTree
from nip.training.metrics import malt_metrics

if TYPE_CHECKING:
    from nip.training.groups import PureTextSharedModelGroup
    from nip.training.plan import IterationPlan
    from nip.training.trainer import PureTextEiTrainer

Progress = Callable[[int, int], None]


@runtime_checkable
class TrainingAlgorithm(Protocol):
    """What an algorithm decides; the trainer's loop does everything else."""

    #: The fine-tuning method of its jobs.
    method: FineTuneMethod

    async def collect(
        self, trainer: PureTextEiTrainer, step: IterationPlan, on_progress: Progress
    ) -> None:
        """Sample the iteration's data and save it to the run directory (its train
        rollouts, and anything else it learns from)."""
        ...

    def training_data(self, trainer: PureTextEiTrainer, iterations: Sequence[int]) -> Any:
        """What the jobs learn from: the saved data of ``iterations``."""
        ...

    def dataset(
        self, trainer: PureTextEiTrainer, group: PureTextSharedModelGroup, data: Any
    ) -> list[dict[str, Any]]:
        """The lines of ``group``'s job."""
        ...

    def metrics(self, trainer: PureTextEiTrainer, iteration: int) -> dict[str, Any]:
        """Metrics of its own for the iteration, beyond the dialogues' (may be empty)."""
        ...


class ExpertIteration:
    """Sample dialogues, keep those each agent won, fine-tune on them (SFT)."""

    method: FineTuneMethod = "supervised"

    async def collect(
        self, trainer: PureTextEiTrainer, step: IterationPlan, on_progress: Progress
    ) -> None:
        batch = await trainer.session.rollouts_async(
            n=step.items,
            split="train",
            iteration=step.iteration,
            description=f"iteration {step.iteration}",
            on_progress=on_progress,
        )
        trainer.run_dir.save_rollouts("train", step.iteration, batch.transcripts)

    def training_data(self, trainer: PureTextEiTrainer, iterations: Sequence[int]) -> Any:
        return [t for i in iterations for t in trainer.run_dir.load_rollouts("train", i)]

    def dataset(
        self, trainer: PureTextEiTrainer, group: PureTextSharedModelGroup, data: Any
    ) -> list[dict[str, Any]]:
        selected, replaced = select_group_rollouts(
            data, group.agent_wholes, trainer.hyper_params, trainer.state.iteration
        )
        return sft_dataset(group.agent_wholes, selected, replaced)

    def metrics(self, trainer: PureTextEiTrainer, iteration: int) -> dict[str, Any]:
        return {}


def trees_name(iteration: int) -> str:
    """Where the MALT trees of ``iteration`` are saved in the run directory."""
    return f"malt/trees_it{iteration:04d}.jsonl"


class Malt:
    """Grow response trees, pick sibling preference pairs, fine-tune with DPO."""

    method: FineTuneMethod = "dpo"

    async def collect(
        self, trainer: PureTextEiTrainer, step: IterationPlan, on_progress: Progress
    ) -> None:
        hyper_params = trainer.hyper_params
        datapoints = trainer.session.datapoints(step.items, split="train", iteration=step.iteration)
        trees = await build_trees_async(
            trainer.session.handler,
            trainer.session.agents,
            datapoints,
            malt=hyper_params.pure_text_malt,
            seed=hyper_params.seed,
            iteration=step.iteration,
            frozen_agents=frozenset(step.frozen_agents),
        )
        trainer.run_dir.write_jsonl(trees_name(step.iteration), [t.to_dict() for t in trees])
        leaves = [t.transcript_at(leaf.id) for t in trees for leaf in t.leaves()]
        trainer.run_dir.save_rollouts("train", step.iteration, leaves)

    def training_data(self, trainer: PureTextEiTrainer, iterations: Sequence[int]) -> Any:
        """The trees of ``iterations`` (the plan's: with ``fine_tune_on_all_previous_rollouts``
        every MALT iteration so far, kept even when the models changed since, as the
        original concatenated them)."""
        return [tree for i in iterations for tree in load_trees(trainer, i)]

    def dataset(
        self, trainer: PureTextEiTrainer, group: PureTextSharedModelGroup, data: Any
    ) -> list[dict[str, Any]]:
        return dpo_dataset(data, group.agent_wholes)

    def metrics(self, trainer: PureTextEiTrainer, iteration: int) -> dict[str, Any]:
        if not trainer.run_dir.exists(trees_name(iteration)):
            return {}
        return malt_metrics(load_trees(trainer, iteration))


def load_trees(trainer: PureTextEiTrainer, iteration: int) -> list[ResponseTree]:
    """The MALT trees saved for ``iteration``."""
    rows = trainer.run_dir.read_jsonl(trees_name(iteration))
    return [ResponseTree.from_dict(row) for row in rows]


#: The algorithm each name in the run plan (``IterationPlan.algorithm``) stands for.
ALGORITHMS: Mapping[str, TrainingAlgorithm] = MappingProxyType(
    {"expert_iteration": ExpertIteration(), "malt": Malt()}
)
