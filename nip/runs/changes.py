"""Changing a saved run's parameters before it continues (``nip resume --set``, ``nip extend``).

A run's parameters are in its ``hyper_params.json``; a change is written there (the old file
kept beside it as ``hyper_params.before-<n>.json``) only when the caller accepts it, so that a
resumed run never silently becomes a different experiment.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nip.errors import IncompatibleParametersError
from nip.parameters import HyperParameters
from nip.parameters.overrides import changed_paths
from nip.runs.ownership import owning
from nip.runs.run_dir import RunDirectory

__all__ = ["SavedParametersChangedError", "change_saved_parameters", "saved_parameters"]


class SavedParametersChangedError(IncompatibleParametersError):
    """Overrides would change a saved run's parameters, and the change was not accepted."""


def saved_parameters(run_dir: str | Path) -> HyperParameters:
    """The parameters saved in a run directory (:class:`NotARunDirectoryError` where none are)."""
    return HyperParameters.from_dict(RunDirectory.of_run(run_dir).read_json("hyper_params.json"))


def change_saved_parameters(
    run_dir: str | Path,
    overrides: Mapping[str, Any],
    *,
    accept: bool = False,
    from_text: bool = False,
) -> dict[str, tuple[Any, Any]]:
    """Apply ``overrides`` to the run's saved parameters; returns what changed (repeating saved
    values is always allowed).

    Raises:
        InvalidParameterError: An override names no parameter or is not allowed.
        SavedParametersChangedError: Something would change and ``accept`` is False.
    """
    directory = RunDirectory.of_run(run_dir)
    with owning(directory.path, "a change of its parameters"):
        saved = directory.read_json("hyper_params.json")
        before = HyperParameters.from_dict(saved)
        after = before.with_overrides(overrides, from_text=from_text)
        changes = changed_paths(before.to_dict(), after.to_dict())
        if not changes:
            return {}
        if not accept:
            listed = "; ".join(f"{p}: {old!r} -> {new!r}" for p, (old, new) in changes.items())
            raise SavedParametersChangedError(
                f"{directory.path} was run with other parameters ({listed}); pass "
                "--accept-changes (accept=True) to continue it as a changed run"
            )
        number = 0
        while directory.exists(f"hyper_params.before-{number}.json"):
            number += 1
        directory.write_json(f"hyper_params.before-{number}.json", saved)
        directory.write_json("hyper_params.json", after.to_dict())
    return changes
