"""The run plan: what a run will do, iteration by iteration, computed once before it starts.

::

    plan = make_run_plan(HyperParameters.load("exp.yaml"), train_ids=..., test_ids=...)
    plan                  # a table in Jupyter; print(plan) in a terminal (nip plan CONFIG)
    plan.iterations[0].groups[0].method, plan.to_dict()

Every schedule rule lives here, once: which items each iteration samples (``nip.data.order``),
which iterations test and how many passes, which algorithm an iteration runs (Expert
Iteration, or MALT after ``num_initial_ei_iterations``), which groups train with which method
on which iterations' data, why the others do not (frozen, not scheduled), and each job's
settings as its provider's backend will send them (``nip.providers.job_settings``, the
function the backends use). The trainer executes the plan, the dry run prices it, and the
reporter and the dashboard show it. A run saves it as ``plan.json``; resuming compares the
plan it would make now with the saved one and refuses a difference (:class:`PlanChangedError`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from nip.data import DatasetUnavailableError
from nip.data.order import held_out_indices, train_indices
from nip.errors import IncompatibleParametersError
from nip.parameters import HyperParameters
from nip.parameters.groups import group_members
from nip.protocols import ProtocolHandler
from nip.providers import job_settings
from nip.session import Session
from nip.settings import ExperimentSettings
from nip.training.algorithms import ALGORITHMS
from nip.training.groups import SKIP_REASONS, fine_tune_spec, too_few_examples
from nip.training.plan_display import plan_diff, plan_html, plan_jobs, plan_rows, plan_text
from nip.training.run_dir import RunDirectory

__all__ = [
    "SKIP_REASONS",
    "GroupStep",
    "IterationPlan",
    "PlanChangedError",
    "RunPlan",
    "check_saved_plan",
    "make_run_plan",
    "plan_for_session",
    "plan_run",
    "too_few_examples",
]

Algorithm = Literal["expert_iteration", "malt"]
SkipReason = Literal["frozen", "not_scheduled"]


class PlanChangedError(IncompatibleParametersError):
    """Resuming would run a different plan from the one the run started with."""


@dataclass(frozen=True)
class GroupStep:
    """What one shared model group does after an iteration's sampling.

    Attributes:
        group: The group's name.
        agents: Its members.
        method: ``"supervised"`` (Expert Iteration) or ``"dpo"`` (MALT); None when skipped.
        skip: Why it is not trained (``"frozen"``, ``"not_scheduled"``), or None.
        data_iterations: The iterations whose dialogues (or trees) its dataset is built from.
        job: The job's settings as its provider's backend sends them (the base model of a
            group that continues from its latest fine-tune is named in angle brackets: it is
            known only once the earlier job has run).
        epochs: The epochs the job trains for, as the dry run prices them: the number sent,
            or where OpenAI chooses (``"auto"``) the agent's ``num_epochs`` (``rl.num_epochs``).
    """

    group: str
    agents: tuple[str, ...]
    method: str | None = None
    skip: str | None = None
    data_iterations: tuple[int, ...] = ()
    job: dict[str, Any] | None = None
    epochs: int = 0


@dataclass(frozen=True)
class IterationPlan:
    """One iteration: what it samples, whether it tests, and what each group trains.

    Attributes:
        iteration: Its number, from 0.
        algorithm: ``"expert_iteration"`` (dialogues) or ``"malt"`` (response trees).
        items: How many train items it samples.
        item_ids: Their ids, in order (None when the dataset was not loaded).
        tests: Whether the test stage runs.
        test_passes: Passes over the test items (``rl.num_test_iterations``).
        test_items: How many test items each pass plays.
        test_item_ids: Their ids (None when not loaded, or no test).
        fine_tunes: Whether fine-tuning follows (not after the last iteration).
        groups: Each group's step (empty when nothing is fine-tuned).
        frozen_agents: The agents not trained in this iteration (frozen, or not scheduled):
            in MALT they add one child, not several, in rounds only they act.
    """

    iteration: int
    algorithm: Algorithm
    items: int
    item_ids: tuple[str, ...] | None = None
    tests: bool = False
    test_passes: int = 0
    test_items: int = 0
    test_item_ids: tuple[str, ...] | None = None
    fine_tunes: bool = True
    groups: tuple[GroupStep, ...] = ()
    frozen_agents: tuple[str, ...] = ()

    def group(self, name: str) -> GroupStep | None:
        return next((g for g in self.groups if g.group == name), None)


@dataclass(frozen=True)
class RunPlan:
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
    def trains_anything(self) -> bool:
        return any(g.method for it in self.iterations for g in it.groups)

    # ------------------------------------------------------------- round trip
    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunPlan:
        iterations = tuple(
            IterationPlan(
                **{
                    **it,
                    "item_ids": _tuple(it.get("item_ids")),
                    "test_item_ids": _tuple(it.get("test_item_ids")),
                    "frozen_agents": tuple(it.get("frozen_agents", ())),
                    "groups": tuple(
                        GroupStep(
                            **{
                                **g,
                                "agents": tuple(g["agents"]),
                                "data_iterations": tuple(g["data_iterations"]),
                            }
                        )
                        for g in it.get("groups", ())
                    ),
                }
            )
            for it in data.get("iterations", ())
        )
        return cls(**{**data, "iterations": iterations})

    def differences(self, other: RunPlan) -> list[str]:
        """Readable lines, one per setting that differs from ``other`` (empty: the same)."""
        return plan_diff(self.to_dict(), other.to_dict())

    # ---------------------------------------------------------------- display
    def rows(self) -> list[dict[str, str]]:
        """One row per iteration: what it samples, tests and trains."""
        return plan_rows(self)

    def jobs_text(self) -> list[str]:
        """Each distinct job's settings, as sent to its provider, with the first iteration."""
        return plan_jobs(self)

    def __str__(self) -> str:
        return plan_text(self)

    def _repr_html_(self) -> str:
        return plan_html(self)

    def __repr__(self) -> str:
        return (
            f"RunPlan(protocol={self.protocol!r}, trainer={self.trainer!r}, "
            f"iterations={len(self.iterations)})"
        )


def _tuple(value: Any) -> tuple | None:
    return None if value is None else tuple(value)


# ----------------------------------------------------------------- making a plan
def algorithm_of(hyper_params: HyperParameters, iteration: int) -> Algorithm:
    """Which algorithm ``iteration`` runs: MALT's trainer runs Expert Iteration first for
    ``num_initial_ei_iterations``."""
    if (
        hyper_params.trainer == "pure_text_malt"
        and iteration >= hyper_params.pure_text_malt.num_initial_ei_iterations
    ):
        return "malt"
    return "expert_iteration"


def tests_in(hyper_params: HyperParameters, iteration: int) -> bool:
    """Whether ``iteration`` runs the test stage (``text_rl.test_scheme``)."""
    first = iteration == 0
    last = iteration == hyper_params.rl.num_iterations - 1
    return {"none": False, "all": True, "last": last, "first_and_last": first or last}[
        hyper_params.text_rl.test_scheme
    ]


def data_iterations(hyper_params: HyperParameters, iteration: int) -> tuple[int, ...]:
    """The iterations whose data a job after ``iteration`` learns from: this one, or with
    ``fine_tune_on_all_previous_rollouts`` every compatible one so far (those run by the
    same algorithm: MALT's trees, or Expert Iteration's dialogues)."""
    if not hyper_params.text_rl.fine_tune_on_all_previous_rollouts:
        return (iteration,)
    algorithm = algorithm_of(hyper_params, iteration)
    return tuple(i for i in range(iteration + 1) if algorithm_of(hyper_params, i) == algorithm)


def make_run_plan(
    hyper_params: HyperParameters,
    *,
    train_ids: Sequence[str] | None = None,
    test_ids: Sequence[str] | None = None,
) -> RunPlan:
    """The plan of a run of ``hyper_params``.

    Args:
        hyper_params: The run.
        train_ids / test_ids: The ids of the items of the train and test splits, in the
            split's order; None when the dataset is not at hand (the plan then counts items
            without naming them).
    """
    rl, text_rl = hyper_params.rl, hyper_params.text_rl
    n, seed = rl.rollouts_per_iteration, hyper_params.seed
    test_size = None if text_rl.test_on_whole_dataset else n
    test_item_ids = None
    if test_ids is not None:
        test_item_ids = tuple(test_ids[i] for i in held_out_indices(len(test_ids), test_size, seed))
    test_items = len(test_item_ids) if test_item_ids is not None else (test_size or 0)
    members = group_members(hyper_params)
    iterations = []
    for iteration in range(rl.num_iterations):
        item_ids = None
        if train_ids is not None:
            item_ids = tuple(
                train_ids[i] for i in train_indices(len(train_ids), n, iteration, seed)
            )
        tests = tests_in(hyper_params, iteration)
        fine_tunes = iteration < rl.num_iterations - 1
        groups = (
            tuple(_group_step(hyper_params, g, a, iteration) for g, a in members.items())
            if fine_tunes
            else ()
        )
        iterations.append(
            IterationPlan(
                iteration=iteration,
                algorithm=algorithm_of(hyper_params, iteration),
                items=n,
                item_ids=item_ids,
                tests=tests,
                test_passes=rl.num_test_iterations if tests else 0,
                test_items=test_items if tests else 0,
                test_item_ids=test_item_ids if tests else None,
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
    method = ALGORITHMS[algorithm_of(hyper_params, iteration)].method
    continues = not params.fine_tune_from_scratch and iteration > 0
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
        base_model=f"<{group}'s latest model>" if continues else start,
    )
    job = job_settings(params, spec)
    return GroupStep(
        group,
        tuple(agents),
        method=method,
        data_iterations=data_iterations(hyper_params, iteration),
        job=job,
        epochs=_epochs(job, spec.num_epochs),
    )


def _skip_reason(
    hyper_params: HyperParameters, agents: Sequence[str], iteration: int
) -> SkipReason | None:
    params = hyper_params.agents[agents[0]]  # a group's members agree (check_group_agreement)
    if params.freeze_agent:
        return "frozen"
    if not params.update_schedule.is_update_iteration(iteration):
        return "not_scheduled"
    return None


def sent_hyperparameters(job: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``method`` hyper-parameters a job sends to an API (empty for a job trained here,
    whose settings are its spec)."""
    method = (job or {}).get("method")
    if not isinstance(method, Mapping):
        return {}
    return dict((method.get(method.get("type")) or {}).get("hyperparameters", {}))


def _epochs(job: Mapping[str, Any] | None, num_epochs: int) -> int:
    """The epochs a job trains: the number it sends, or ``num_epochs`` where the provider
    chooses (``"auto"``) or the job trains here."""
    sent = sent_hyperparameters(job).get("n_epochs")
    return sent if isinstance(sent, int) else num_epochs


def job_name(group: str, iteration: int) -> str:
    """The name of ``group``'s job after ``iteration`` (its OpenAI suffix)."""
    return f"{group}-it{iteration}"


def plan_for_session(
    hyper_params: HyperParameters, session: Session, *, need_data: bool = True
) -> RunPlan:
    """The plan of a run of ``hyper_params`` on ``session``'s dataset.

    Args:
        need_data: Raise when the dataset cannot be loaded; else plan without item ids.
    """
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


def plan_run(
    hyper_params: HyperParameters,
    settings: ExperimentSettings | None = None,
    *,
    protocol: type[ProtocolHandler] | None = None,
) -> RunPlan:
    """The plan of a run of ``hyper_params``, before it starts (``nip plan CONFIG``): no API
    key is needed and nothing is sent; without the dataset at hand (a Hub dataset offline),
    the plan counts the items without naming them."""
    from nip.training.dialogue_sizes import dry_run_session

    settings = settings or ExperimentSettings(show_progress=False)
    session = dry_run_session(hyper_params, settings, protocol=protocol)
    return plan_for_session(hyper_params, session, need_data=False)


def check_saved_plan(run_dir: RunDirectory, plan: RunPlan, *, accept: bool = False) -> None:
    """Compare ``plan`` with the run's saved ``plan.json``, then save ``plan``.

    Raises:
        PlanChangedError: They differ and ``accept`` is False (the message lists the
            differences, saved -> now).
    """
    if run_dir.exists("plan.json"):
        changes = RunPlan.from_dict(run_dir.read_json("plan.json")).differences(plan)
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
