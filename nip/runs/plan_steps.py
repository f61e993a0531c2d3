"""One iteration of a run plan, as saved in ``plan.json``: what it samples, tests and trains.

The plan is made by :mod:`nip.training.plan` (its rules) and walked by the trainer; these
records are what the trainer's algorithms, callbacks and the dashboard read of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from nip.data.order import walk
from nip.runs.state import FINE_TUNE_STAGES, ITERATION_STAGES

#: The trainer's iteration number of a test pass (``TEST_ITERATION + pass``): dialogue ids and
#: seeds of test passes, the same in the run, its dry run and ``nip retest``.
TEST_ITERATION = 10_000


@dataclass(frozen=True)
class GroupStep:
    """What one shared model group does after an iteration's sampling.

    Attributes:
        method: ``"supervised"`` (Expert Iteration) or ``"dpo"`` (MALT); None when skipped.
        skip: Why it is not trained (``"frozen"``, ``"not_scheduled"``), or None.
        data_iterations: The iterations whose dialogues (or trees) its dataset is built from.
        job: The job's settings as its backend sends them (a base model known only later is
            named in angle brackets).
        continues: The job continues from the group's latest model, not its starting model.
    """

    group: str
    agents: tuple[str, ...]
    method: str | None = None
    skip: str | None = None
    data_iterations: tuple[int, ...] = ()
    job: dict[str, Any] | None = None
    epochs: int = 0
    continues: bool = False


@dataclass(frozen=True)
class IterationPlan:
    """One iteration: what it samples, whether it tests, and what each group trains.

    Attributes:
        items / item_ids: How many train items it samples, and their ids (None: not loaded).
        test_item_ids: The test items' ids, each once; pass ``k`` plays ``test_items`` of them
            from ``k x test_items`` on, wrapping (:attr:`test_pass_item_ids`).
        fine_tunes: Whether fine-tuning follows (not after the last iteration).
        frozen_agents: The agents not trained in this iteration (in MALT they add one child).
    """

    iteration: int
    algorithm: str
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

    @property
    def test_pass_item_ids(self) -> tuple[tuple[str, ...], ...]:
        """Each test pass's item ids, in order (empty when the items are not named)."""
        if self.test_item_ids is None:
            return ()
        return tuple(
            tuple(walk(self.test_item_ids, self.test_items, k)) for k in range(self.test_passes)
        )

    @property
    def stages(self) -> tuple[str, ...]:
        """The stages this iteration runs, in order (no fine-tuning ones where it trains none)."""
        return tuple(s for s in ITERATION_STAGES if self.fine_tunes or s not in FINE_TUNE_STAGES)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> IterationPlan:
        """From ``to_dict`` (``dataclasses.asdict``) of a plan's iteration, as saved (its lists
        as tuples; a group's fields a later nip added are left out)."""
        known = {f.name for f in fields(GroupStep)}
        groups = [{k: v for k, v in g.items() if k in known} for g in data.get("groups", ())]
        return cls(**_tuples(data), groups=tuple(GroupStep(**_tuples(g)) for g in groups))


def _tuples(data: Mapping[str, Any]) -> dict[str, Any]:
    return {k: tuple(v) if isinstance(v, list) else v for k, v in data.items() if k != "groups"}
