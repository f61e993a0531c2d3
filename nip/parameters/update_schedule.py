"""When an agent is trained: every iteration, or in periodic blocks."""

from __future__ import annotations

from pydantic import Field

from nip.errors import InvalidParameterError
from nip.parameters._base import BaseParameters


class AgentUpdateSchedule(BaseParameters):
    """Decides in which training iterations an agent is updated."""

    def is_update_iteration(self, iteration: int) -> bool:
        """Whether the agent is fine-tuned after ``iteration`` (0-based)."""
        raise NotImplementedError


class ConstantUpdateSchedule(AgentUpdateSchedule):
    """Update the agent in every iteration (the default)."""

    def is_update_iteration(self, iteration: int) -> bool:
        return True


class ContiguousPeriodicUpdateSchedule(AgentUpdateSchedule):
    """Update for ``update_iterations`` iterations out of every ``period``, from ``start``."""

    period: int = Field(2, description="Length of one cycle, in iterations.", ge=1)
    update_iterations: int = Field(
        1, description="Iterations at the start of a cycle that update.", ge=0
    )
    start: int = Field(0, description="Iteration at which the first cycle begins.", ge=0)

    def validate(self) -> None:
        if self.update_iterations > self.period:
            raise InvalidParameterError(
                "update_iterations", self.update_iterations, f"at most period={self.period}"
            )

    def is_update_iteration(self, iteration: int) -> bool:
        if iteration < self.start:
            return False
        return (iteration - self.start) % self.period < self.update_iterations


class AlternatingPeriodicUpdateSchedule(AgentUpdateSchedule):
    """Alternate blocks of ``period`` iterations on and off (``first_on`` says which first)."""

    period: int = Field(1, description="Length of each on or off block, in iterations.", ge=1)
    first_on: bool = Field(True, description="Whether the first block updates the agent.")

    def is_update_iteration(self, iteration: int) -> bool:
        on = (iteration // self.period) % 2 == 0
        return on if self.first_on else not on
