"""Parameters of the code-validation scenario and its dataset."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from nip.parameters._base import BaseParameters, param

Difficulty = Literal["easy", "hard", "all"]


@dataclass
class CodeValidationParameters(BaseParameters):
    """Which part of the code-validation dataset a run uses."""

    difficulty: Difficulty = param("all", doc="Difficulty tier of the items to use.")
    max_train_size: int | None = param(None, doc="Use at most this many training items.", ge=1)
    max_test_size: int | None = param(None, doc="Use at most this many test items.", ge=1)
