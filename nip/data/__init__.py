"""Code-validation data: the shipped HumanEval-derived dataset, its loader and the sandbox.

``load_code_validation_dataset()`` returns the shipped ``humaneval_cv`` dataset, a Hub
dataset such as Buggy-APPS (``lrhammond/buggy-apps``), or a user's file or folder, as a
sequence of :class:`CodeValidationItem`. Labels were
decided by running the tests in :func:`run_in_sandbox`; ``docs/dataset.md`` explains the
build, the difficulty tiers and the counts.
"""

from nip.data._dataset import CodeValidationDataset
from nip.data._errors import DatasetFormatError, DatasetSplitError, DatasetUnavailableError
from nip.data._records import CodeValidationItem, Counterexample, Mutation
from nip.data.checking import CheckResult, CheckSuite, StepResult, check_solution
from nip.data.loader import (
    SHIPPED_DATASETS,
    dataset_provenance,
    load_code_validation_dataset,
    load_configured_dataset,
)
from nip.data.sandbox import SandboxResult, run_in_sandbox

__all__ = [
    "SHIPPED_DATASETS",
    "CheckResult",
    "CheckSuite",
    "CodeValidationDataset",
    "CodeValidationItem",
    "Counterexample",
    "DatasetFormatError",
    "DatasetSplitError",
    "DatasetUnavailableError",
    "Mutation",
    "SandboxResult",
    "StepResult",
    "check_solution",
    "dataset_provenance",
    "load_code_validation_dataset",
    "load_configured_dataset",
    "run_in_sandbox",
]
