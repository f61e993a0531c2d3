"""Code-validation data: the shipped HumanEval-derived dataset, its loader and the sandbox.

``load_code_validation_dataset()`` returns the shipped ``humaneval_cv`` dataset (or a
user's JSONL/parquet file) as a sequence of :class:`CodeValidationItem`. Labels were
decided by running the tests in :func:`run_in_sandbox`; ``docs/dataset.md`` explains the
build, the difficulty tiers and the counts.
"""

from nip.data._dataset import CodeValidationDataset
from nip.data._errors import DatasetFormatError
from nip.data._records import CodeValidationItem, Counterexample, Mutation
from nip.data.checking import CheckResult, CheckSuite, StepResult, check_solution
from nip.data.loader import SHIPPED_DATASETS, load_code_validation_dataset
from nip.data.sandbox import SandboxResult, run_in_sandbox

__all__ = [
    "SHIPPED_DATASETS",
    "CheckResult",
    "CheckSuite",
    "CodeValidationDataset",
    "CodeValidationItem",
    "Counterexample",
    "DatasetFormatError",
    "Mutation",
    "SandboxResult",
    "StepResult",
    "check_solution",
    "load_code_validation_dataset",
    "run_in_sandbox",
]
