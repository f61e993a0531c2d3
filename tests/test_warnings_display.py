"""nip's warnings read as nip's other lines: one line, the run (a sweep's cell) first, no
file path or source line; standard output in a notebook. (``tests/test_ownership.py`` sees
them on a real sweep's standard error.)"""

from __future__ import annotations

import asyncio
import warnings

import pytest

from nip.utils import notices
from nip.utils.notices import NipWarning, labelled, warn


def _shown(record: warnings.WarningMessage) -> str:
    return warnings.formatwarning(record.message, record.category, record.filename, record.lineno)


def test_a_warning_is_one_plain_line_naming_its_cell():
    with pytest.warns(NipWarning) as records, labelled("nip_seed0"):
        warn("group 'prover': too few examples to fine-tune")
    assert _shown(records[0]) == (
        "nip_seed0: warning: group 'prover': too few examples to fine-tune\n"
    )
    assert issubclass(records[0].category, UserWarning)  # filters treat it as any warning


def test_a_warning_outside_a_sweep_says_it_is_nips():
    with pytest.warns(NipWarning) as records:
        warn("W&B could not start")
    assert _shown(records[0]) == "nip: warning: W&B could not start\n"


def test_each_cell_of_a_sweep_names_itself_in_tasks_it_runs_concurrently():
    async def cell(name: str) -> None:
        with labelled(name):
            await asyncio.sleep(0.01)
            await asyncio.to_thread(warn, "group 'prover': too few examples")

    async def sweep() -> None:
        await asyncio.gather(cell("nip_seed0"), cell("debate_seed0"))

    with pytest.warns(NipWarning) as records, warnings.catch_warnings():
        warnings.simplefilter("default")  # once per text: the two cells' texts differ
        asyncio.run(sweep())
    assert sorted(str(r.message) for r in records) == [
        "debate_seed0: group 'prover': too few examples",
        "nip_seed0: group 'prover': too few examples",
    ]


def test_in_a_notebook_the_line_goes_to_standard_output(monkeypatch, capsys):
    monkeypatch.setattr(notices, "in_notebook", lambda: True)
    with pytest.warns(NipWarning) as records:
        warn("W&B could not start")
    assert _shown(records[0]) == ""  # nothing for Python to write to standard error
    assert capsys.readouterr().out == "nip: warning: W&B could not start\n"


def test_other_warnings_keep_pythons_format():
    with pytest.warns(NipWarning):
        warn("installs the format")
    with pytest.warns(DeprecationWarning) as records:
        warnings.warn("old", DeprecationWarning, stacklevel=1)
    assert "test_warnings_display.py" in _shown(records[0])


def test_a_sweeps_cells_warn_in_one_plain_line_each_naming_the_cell(dummy_params, tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    params = dummy_params()
    params.text_rl.min_fine_tune_examples = 1000  # every cell: too few examples to fine-tune
    params.save(tmp_path / "base.json")
    grid = tmp_path / "grid.yaml"
    grid.write_text("base: base.json\naxes:\n  interaction_protocol: [nip, debate]\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1]), "WANDB_MODE": "disabled"}
    command = [sys.executable, "-m", "nip.cli", "sweep", str(grid), "--sweep-dir"]
    done = subprocess.run(
        [*command, str(tmp_path / "s"), "--quiet"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stderr.splitlines()
    assert lines and all(": warning: group '" in line for line in lines), done.stderr
    assert {line.split(":")[0] for line in lines} == {"nip", "debate"}
    assert "UserWarning" not in done.stderr and ".py:" not in done.stderr
