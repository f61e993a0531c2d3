"""The run plan: what a run will do, iteration by iteration, computed once before it starts.

``make_run_plan(HyperParameters.load("exp.yaml"), train_ids=..., test_ids=...)`` (``nip plan
CONFIG``) holds every schedule rule once: which items each iteration samples and tests, its
algorithm and stages, which groups train with which method, data and starting model (or why
not), and each job's settings as its provider will send them. The trainer, dry run, reporter and
dashboard read it; a run saves it as ``plan.json`` and a resume that would plan differently is
refused (:class:`PlanChangedError`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from nip.data import DatasetUnavailableError
from nip.data.order import held_out_indices, train_indices
from nip.errors import IncompatibleParametersError
from nip.jobs import FineTuneSpec
from nip.parameters import HyperParameters, PureTextAgentParameters
from nip.parameters.groups import group_members
from nip.providers import job_settings
from nip.runs.plan_steps import TEST_ITERATION, GroupStep, IterationPlan
from nip.runs.run_dir import RunDirectory
from nip.runs.state import ITERATION_STAGES, TrainerState
from nip.session import Session
from nip.training.algorithms import algorithm_of
from nip.training.plan_display import PlanDisplay, plan_diff

__all__ = [
    "TEST_ITERATION",
    "GroupStep",
    "IterationPlan",
    "PlanChangedError",
    "RunPlan",
    "check_saved_plan",
    "fine_tune_spec",
    "job_epochs",
    "make_run_plan",
    "plan_for_session",
    "test_plan",
]


#: The fields of an iteration's plan each stage executes (kept as they ran by an accepted change).
_STAGE_FIELDS: Mapping[str, tuple[str, ...]] = {
    "sample_rollouts": ("algorithm", "items", "item_ids", "frozen_agents"),
    "test": ("tests", "test_passes", "test_items", "test_item_ids"),
    "create_fine_tune_jobs": ("fine_tunes", "groups"),
}


class PlanChangedError(IncompatibleParametersError):
    """Resuming would run a different plan from the one the run started with."""


@dataclass(frozen=True)
class RunPlan(PlanDisplay):
    """What a run will do (see the module's documentation)."""

    protocol: str
    trainer: str
    seed: int
    train_split: str = "train"
    test_split: str = "test"
    iterations: tuple[IterationPlan, ...] = field(default_factory=tuple)

    # ---------------------------------------------------------------- reading
    def __getitem__(self, iteration: int) -> IterationPlan:
        return self.iterations[iteration]

    def __len__(self) -> int:
        return len(self.iterations)

    @property
    def total_stages(self) -> int:
        """Stages in the whole run."""
        return sum(len(it.stages) for it in self.iterations)

    def after(self, iteration: int, stage: str) -> tuple[int, str]:
        """The ``(iteration, stage)`` that follows ``stage`` (``"done"`` after the last)."""
        stages = self[iteration].stages
        if stage in stages and stage != stages[-1]:
            return iteration, stages[stages.index(stage) + 1]
        if iteration + 1 < len(self):
            return iteration + 1, self[iteration + 1].stages[0]
        return iteration, "done"

    @property
    def trained_groups(self) -> set[str]:
        """The groups some iteration fine-tunes."""
        return {g.group for it in self.iterations for g in it.groups if g.method}

    @property
    def trained_agents(self) -> set[str]:
        """The agents some iteration fine-tunes."""
        return {a for it in self.iterations for g in it.groups if g.method for a in g.agents}

    @property
    def splits(self) -> tuple[str, ...]:
        """The dataset splits the run plays: train, and the test split if an iteration tests."""
        tested = any(it.tests for it in self.iterations)
        return (self.train_split, self.test_split) if tested else (self.train_split,)

    # ------------------------------------------------------------- round trip
    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunPlan:
        iterations = tuple(IterationPlan.from_dict(it) for it in data.get("iterations", ()))
        return cls(**{**data, "iterations": iterations})

    def keeping_executed(self, saved: RunPlan, state: TrainerState) -> RunPlan:
        """This plan from where ``state`` stands on, ``saved`` for what has already run."""
        iterations = list(self.iterations)
        for i in range(min(state.iteration + 1, len(saved), len(iterations))):
            ran = saved[i]
            if i < state.iteration or state.stage == "done":
                iterations[i] = ran
                continue
            done = ITERATION_STAGES[: ITERATION_STAGES.index(state.stage)]
            kept = {k: getattr(ran, k) for s in done for k in _STAGE_FIELDS.get(s, ())}
            iterations[i] = replace(iterations[i], **kept)
        return replace(self, iterations=tuple(iterations))

    def __repr__(self) -> str:
        return (
            f"RunPlan(protocol={self.protocol!r}, trainer={self.trainer!r}, "
            f"iterations={len(self.iterations)})"
        )


# ------------------------------------------------------------------- the rules
def tests_in(hyper_params: HyperParameters, iteration: int) -> bool:
    """Whether ``iteration`` runs the test stage (``text_rl.test_scheme``)."""
    first = iteration == 0
    last = iteration == hyper_params.rl.num_iterations - 1
    return {"none": False, "all": True, "last": last, "first_and_last": first or last}[
        hyper_params.text_rl.test_scheme
    ]


def test_item_ids(hyper_params: HyperParameters, test_ids: Sequence[str]) -> tuple[str, ...]:
    """The items a test stage plays, in the test split's seeded order: all with
    ``test_on_whole_dataset``, else the first ``rollouts_per_iteration x num_test_iterations``."""
    order = [test_ids[i] for i in held_out_indices(len(test_ids), None, hyper_params.seed)]
    if hyper_params.text_rl.test_on_whole_dataset:
        return tuple(order)
    return tuple(
        order[: hyper_params.rl.rollouts_per_iteration * hyper_params.rl.num_test_iterations]
    )


def _test_fields(hyper_params: HyperParameters, test_ids: Sequence[str] | None) -> dict:
    """The fields of an iteration that tests (ids None when the split is not at hand)."""
    rl, whole = hyper_params.rl, hyper_params.text_rl.test_on_whole_dataset
    ids = None if test_ids is None else test_item_ids(hyper_params, test_ids)
    per_pass = rl.rollouts_per_iteration if not whole else (0 if ids is None else len(ids))
    return dict(
        tests=True, test_passes=rl.num_test_iterations, test_items=per_pass, test_item_ids=ids
    )


def test_plan(hyper_params: HyperParameters, test_ids: Sequence[str]) -> IterationPlan:
    """A test stage alone, as a run of ``hyper_params`` plans its tests (``nip retest``)."""
    algorithm = algorithm_of(hyper_params, 0).name
    return IterationPlan(0, algorithm, 0, fine_tunes=False, **_test_fields(hyper_params, test_ids))


def data_iterations(hyper_params: HyperParameters, iteration: int) -> tuple[int, ...]:
    """The iterations whose data a job after ``iteration`` learns from: this one, or with
    ``fine_tune_on_all_previous_rollouts`` every one so far run by the same algorithm."""
    if not hyper_params.text_rl.fine_tune_on_all_previous_rollouts:
        return (iteration,)
    algorithm = algorithm_of(hyper_params, iteration)
    return tuple(i for i in range(iteration + 1) if algorithm_of(hyper_params, i) is algorithm)


def make_run_plan(
    hyper_params: HyperParameters,
    *,
    train_ids: Sequence[str] | None = None,
    test_ids: Sequence[str] | None = None,
) -> RunPlan:
    """The plan of a run of ``hyper_params``; ``train_ids`` / ``test_ids``: the splits' item ids in
    order, or None (the plan then counts items without naming them)."""
    rl, text_rl = hyper_params.rl, hyper_params.text_rl
    n, seed = rl.rollouts_per_iteration, hyper_params.seed
    test = _test_fields(hyper_params, test_ids)
    members = group_members(hyper_params)
    iterations = []
    for iteration in range(rl.num_iterations):
        item_ids = None
        if train_ids is not None:
            item_ids = tuple(
                train_ids[i] for i in train_indices(len(train_ids), n, iteration, seed)
            )
        fine_tunes = iteration < rl.num_iterations - 1
        groups = (
            tuple(_group_step(hyper_params, g, a, iteration) for g, a in members.items())
            if fine_tunes
            else ()
        )
        iterations.append(
            IterationPlan(
                iteration=iteration,
                algorithm=algorithm_of(hyper_params, iteration).name,
                items=n,
                item_ids=item_ids,
                **(test if tests_in(hyper_params, iteration) else {}),
                fine_tunes=fine_tunes,
                groups=groups,
                frozen_agents=tuple(
                    agent
                    for group, agents in members.items()
                    for agent in agents
                    if _skip_reason(hyper_params, agents, iteration) is not None
                ),
            )
        )
    return RunPlan(
        protocol=hyper_params.interaction_protocol,
        trainer=hyper_params.trainer,
        seed=seed,
        test_split=text_rl.test_dataset_split,
        iterations=tuple(iterations),
    )


def _group_step(
    hyper_params: HyperParameters, group: str, agents: list[str], iteration: int
) -> GroupStep:
    params = hyper_params.agents[agents[0]]
    skip = _skip_reason(hyper_params, agents, iteration)
    if skip is not None:
        return GroupStep(group, tuple(agents), skip=skip)
    method = algorithm_of(hyper_params, iteration).method
    continues = continues_from_latest(params)
    start = (
        f"<the model of run {params.checkpoint_run_id}>"
        if params.load_checkpoint_and_parameters
        else params.model_name
    )
    spec = fine_tune_spec(
        hyper_params,
        params,
        method,
        (),
        job_name(group, iteration),
        base_model=f"<{group}'s latest model>" if continues and iteration > 0 else start,
    )
    return GroupStep(
        group,
        tuple(agents),
        method=method,
        data_iterations=data_iterations(hyper_params, iteration),
        job=job_settings(params, spec),
        epochs=job_epochs(params, spec),
        continues=continues,
    )


def _skip_reason(hyper_params: HyperParameters, agents: Sequence[str], iteration: int):
    params = hyper_params.agents[agents[0]]  # a group's members agree (check_group_agreement)
    if params.freeze_agent:
        return "frozen"
    if not params.update_schedule.is_update_iteration(iteration):
        return "not_scheduled"
    return None


def continues_from_latest(params: PureTextAgentParameters) -> bool:
    """Whether a group's jobs continue from its latest model, not its starting model."""
    return not params.fine_tune_from_scratch


def fine_tune_spec(
    hyper_params: HyperParameters,
    params: PureTextAgentParameters,
    method: str,
    examples: Sequence[dict[str, Any]],
    job_name: str | None,
    *,
    base_model: str,
    previous_adapter: str | None = None,
) -> FineTuneSpec:
    """A group's job from its members' parameters: what the plan shows and the group submits."""
    return FineTuneSpec(
        base_model=base_model,
        method=method,  # type: ignore[arg-type]
        examples=tuple(examples),
        job_name=job_name,
        num_epochs=params.num_epochs or hyper_params.rl.num_epochs,
        learning_rate=hyper_params.rl.lr,
        batch_size=params.per_device_train_batch_size,
        dpo_beta=params.dpo_beta,
        use_lora=params.use_lora,
        lora_rank=params.lora_rank,
        lora_alpha=params.computed_lora_alpha,
        lora_dropout=params.lora_dropout,
        previous_adapter=previous_adapter,
        quantization=params.quantization,
        stack_lora_adapters=params.stack_lora_adapters,
        seed=hyper_params.seed,
        openai_n_epochs=params.openai_n_epochs,
        openai_batch_size=params.openai_batch_size,
        openai_learning_rate_multiplier=params.openai_learning_rate_multiplier,
    )


def sent_hyperparameters(job: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``method`` hyper-parameters a job sends to an API (empty for a job trained here)."""
    method = (job or {}).get("method")
    if not isinstance(method, Mapping):
        return {}
    return dict((method.get(method.get("type")) or {}).get("hyperparameters", {}))


def job_epochs(params: PureTextAgentParameters, spec: FineTuneSpec) -> int:
    """The epochs a job trains: those its provider is sent, else ``spec.num_epochs``."""
    sent = sent_hyperparameters(job_settings(params, spec)).get("n_epochs")
    return sent if isinstance(sent, int) else spec.num_epochs


def job_name(group: str, iteration: int) -> str:
    """The name of ``group``'s job after ``iteration`` (its OpenAI suffix)."""
    return f"{group}-it{iteration}"


def plan_for_session(
    hyper_params: HyperParameters, session: Session, *, need_data: bool = True
) -> RunPlan:
    """The plan of a run on ``session``'s dataset (``need_data``: raise when it cannot be loaded,
    else plan without item ids)."""
    text_rl = hyper_params.text_rl
    try:
        train = [str(item.id) for item in session.dataset("train")]
        test = None
        if text_rl.test_scheme != "none":
            test = [str(item.id) for item in session.dataset(text_rl.test_dataset_split)]
    except DatasetUnavailableError:
        if need_data:
            raise
        train = test = None
    return make_run_plan(hyper_params, train_ids=train, test_ids=test)


def check_saved_plan(
    run_dir: RunDirectory, plan: RunPlan, state: TrainerState, *, accept: bool = False
) -> RunPlan:
    """Compare ``plan`` with the run's saved ``plan.json``; save and return the plan to run.
    What has already run stays as it ran (:meth:`RunPlan.keeping_executed`); an accepted change
    applies from where ``state`` stands. :class:`PlanChangedError` (listing the differences) when
    they differ and ``accept`` is False."""
    if run_dir.exists("plan.json"):
        recorded = run_dir.read_json("plan.json")
        plan = plan.keeping_executed(RunPlan.from_dict(recorded), state)
        # What the saved plan recorded (a field added by a later nip is not compared).
        changes = plan_diff(recorded, json.loads(json.dumps(plan.to_dict())))
        if changes and not accept:
            shown = "\n  ".join(changes[:20])
            more = f"\n  ... and {len(changes) - 20} more" if len(changes) > 20 else ""
            raise PlanChangedError(
                f"{run_dir.path} would now run a different plan (saved -> now):\n  "
                f"{shown}{more}\nA changed configuration, dataset or nip changed the "
                "schedule; resume with accept_plan_change=True (nip resume "
                "--accept-plan-change) to go on with the new plan."
            )
    elif run_dir.exists("state.json") and not accept:
        # A run started by a nip without run plans drew its training items in the file's
        # order; this one walks a seeded shuffle, so going on would change its data silently.
        raise PlanChangedError(
            f"{run_dir.path} was started by a nip without run plans (no plan.json): it drew "
            "its items in the dataset's order, and this nip draws them in a seeded shuffled "
            "order (docs/training.md). Resume with accept_plan_change=True (nip resume "
            "--accept-plan-change) to go on with the new plan."
        )
    run_dir.write_json("plan.json", plan.to_dict())
    return plan
