"""Code-validation data: the shipped HumanEval-derived dataset, its loader and the sandbox.

``load_code_validation_dataset()`` reads the shipped ``humaneval_cv``, a Hub dataset such as
``lrhammond/buggy-apps``, or a user's file or folder; ``docs/dataset.md`` explains the build.
"""

from nip.data._dataset import CodeValidationDataset, CodeValidationItem, Counterexample, Mutation
from nip.data._errors import DatasetFormatError, DatasetSplitError, DatasetUnavailableError
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
