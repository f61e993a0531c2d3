"""When an agent is trained: every iteration, or in periodic blocks."""

from __future__ import annotations

from dataclasses import dataclass

from nip.errors import InvalidParameterError
from nip.parameters._base import BaseParameters, param


@dataclass
class AgentUpdateSchedule(BaseParameters):
    """Decides in which training iterations an agent is updated."""

    def is_update_iteration(self, iteration: int) -> bool:
        """Whether the agent is fine-tuned after ``iteration`` (0-based)."""
        raise NotImplementedError


@dataclass
class ConstantUpdateSchedule(AgentUpdateSchedule):
    """Update the agent in every iteration (the default)."""

    def is_update_iteration(self, iteration: int) -> bool:
        return True


@dataclass
class ContiguousPeriodicUpdateSchedule(AgentUpdateSchedule):
    """Update for ``update_iterations`` iterations out of every ``period``, from ``start``."""

    period: int = param(2, doc="Length of one cycle, in iterations.", ge=1)
    update_iterations: int = param(1, doc="Iterations at the start of a cycle that update.", ge=0)
    start: int = param(0, doc="Iteration at which the first cycle begins.", ge=0)

    def validate(self) -> None:
        if self.update_iterations > self.period:
            raise InvalidParameterError(
                "update_iterations", self.update_iterations, f"at most period={self.period}"
            )

    def is_update_iteration(self, iteration: int) -> bool:
        if iteration < self.start:
            return False
        return (iteration - self.start) % self.period < self.update_iterations


@dataclass
class AlternatingPeriodicUpdateSchedule(AgentUpdateSchedule):
    """Alternate blocks of ``period`` iterations on and off (``first_on`` says which first)."""

    period: int = param(1, doc="Length of each on or off block, in iterations.", ge=1)
    first_on: bool = param(True, doc="Whether the first block updates the agent.")

    def is_update_iteration(self, iteration: int) -> bool:
        on = (iteration // self.period) % 2 == 0
        return on if self.first_on else not on
