"""Fine-tuning jobs behind one interface: OpenAI API, local LoRA (TRL + PEFT), dummy."""

from nip.jobs._types import (
    TERMINAL_STATUSES,
    FineTuneBackend,
    FineTuneEvent,
    FineTuneJob,
    FineTuneMethod,
    FineTuneSpec,
    JobStatus,
)
from nip.jobs.dummy import DummyFineTuneBackend

__all__ = [
    "TERMINAL_STATUSES",
    "DummyFineTuneBackend",
    "FineTuneBackend",
    "FineTuneEvent",
    "FineTuneJob",
    "FineTuneMethod",
    "FineTuneSpec",
    "JobStatus",
]
