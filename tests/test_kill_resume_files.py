"""A run and a sweep killed with SIGKILL at seeded moments and resumed end with exactly the
files of uninterrupted ones: names and contents.

A moment is the k-th file replacement of an atomic write (``nip.utils.files``): the process
kills itself there with SIGKILL, after the temporary file is written and before it is renamed
into place, the moment that leaves a ``.<name>.<random>.tmp`` behind. The k are drawn with a
seeded generator among the writes an uninterrupted run makes, so the test neither waits nor
depends on the machine's speed; the child is a real ``nip run`` / ``nip sweep`` process.

What legitimately differs between the two folders, and is left out of the comparison:

- the ``created`` time in ``meta.json`` and ``sweep.json``, and the ``updated`` time in
  ``run_status.json`` and ``stage_progress.json``: when they were written;
- the sweep's ``events.jsonl``: its log of each cell's attempts (a killed sweep starts its
  cells more than once, and says so, with times).

Every other file must be there in both, with the same bytes: the rollouts, the fine-tuning
datasets, the metrics, ``state.json``, ``plan.json``, ``owner.lock`` (empty once released)...
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
#: Files whose time of writing is a field of theirs, and which field.
TIMESTAMPED = {
    "meta.json": "created",
    "sweep.json": "created",
    "run_status.json": "updated",
    "stage_progress.json": "updated",
}
#: Files that are logs of what happened, kills included.
LOGS = {"events.jsonl"}
#: How many kills each interrupted run or sweep suffers before it is resumed to the end.
KILLS = 3

#: ``CHILD KILL_AT COUNT_FILE NIP_ARGS...``: ``nip NIP_ARGS`` in this process, which kills
#: itself with SIGKILL at its KILL_AT-th atomic replacement (0: never) and writes the number
#: of replacements it made to COUNT_FILE when it ends normally.
CHILD = """
import os, signal, sys
import nip.utils.files as files
from nip.cli import main

kill_at, count_file, made = int(sys.argv[1]), sys.argv[2], [0]

class KillingOs:
    def __getattr__(self, name):
        return getattr(os, name)

    def replace(self, source, target):
        made[0] += 1
        if made[0] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        os.replace(source, target)

files.os = KillingOs()
code = main(sys.argv[3:])
open(count_file, "w").write(str(made[0]))
sys.exit(code)
"""


def _nip(tmp_path: Path, kill_at: int, *args: str) -> tuple[int, int | None]:
    """Run ``nip ARGS`` killed at its ``kill_at``-th replacement: its exit code, and the
    replacements it made when it was not killed."""
    count = tmp_path / "replacements"
    count.unlink(missing_ok=True)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "WANDB_MODE": "disabled",
        "NIP_CACHE_DIR": str(tmp_path / "cache"),
    }
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(kill_at), str(count), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode in (0, -signal.SIGKILL), done.stderr[-3000:]
    return done.returncode, int(count.read_text()) if count.exists() else None


def files_of(folder: Path) -> dict[str, object]:
    """Every file under ``folder`` by relative path: its text, or its JSON without its time
    of writing (see the module's docstring)."""
    found: dict[str, object] = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        if path.name in LOGS:
            continue
        text = path.read_text()
        if path.name in TIMESTAMPED:
            data = json.loads(text)
            data.pop(TIMESTAMPED[path.name], None)
            found[path.relative_to(folder).as_posix()] = data
        else:
            found[path.relative_to(folder).as_posix()] = text
    return found


def kill_and_resume(
    tmp_path: Path, start: list[str], resume: list[str], seed: int, after_kill=None
) -> int:
    """Start with ``start``, kill it at a seeded moment, resume with ``resume`` (killed again
    at another moment), KILLS times, then resume to the end; ``after_kill()`` is called after
    each kill. Returns the kills."""
    _, total = _nip(tmp_path / "probe", 0, *start[:-1], str(tmp_path / "probe" / "dir"))
    assert total and total > 20
    # Moments spread over the whole run: the resumed process is killed at about the next one.
    moments = sorted(random.Random(seed).sample(range(2, total), KILLS))
    command, kills = start, 0
    for kill_at in (b - a for a, b in zip([0, *moments], moments, strict=False)):
        code, _ = _nip(tmp_path, kill_at, *command)
        if code == 0:
            return kills
        command, kills = resume, kills + 1
        if after_kill is not None:
            after_kill()
    assert _nip(tmp_path, 0, *resume)[0] == 0
    return kills


@pytest.fixture(scope="module")
def config(make_tiny_dataset, tmp_path_factory) -> Path:
    """Two iterations of Expert Iteration on the dummy API, both fine-tuning and testing."""
    from nip.parameters import HyperParameters, PureTextAgentParameters

    folder = tmp_path_factory.mktemp("config")
    HyperParameters(
        dataset=str(make_tiny_dataset(items=12, train=8)),
        agents={a: PureTextAgentParameters(use_dummy_api=True) for a in ("prover", "verifier")},
        rl={"num_iterations": 2, "rollouts_per_iteration": 4},
        text_rl={"min_fine_tune_examples": 1, "test_scheme": "all"},
        nip_protocol={"max_message_rounds": 3},
        pure_text_ei={"reward_threshold": 0.0},
    ).save(folder / "base.yaml")
    grid = {"name": "killed", "base": "base.yaml", "axes": {"seed": [0, 1]}}
    (folder / "grid.yaml").write_text(yaml.safe_dump(grid))
    return folder


@pytest.mark.timeout(600)
@pytest.mark.parametrize("seed", [0, 1])
def test_a_run_killed_at_seeded_moments_and_resumed_has_the_files_of_an_uninterrupted_one(
    config, tmp_path, seed
):
    base = str(config / "base.yaml")
    assert (
        _nip(tmp_path, 0, "run", base, "--quiet", "--run-dir", str(tmp_path / "straight"))[0] == 0
    )
    killed = str(tmp_path / "killed")
    assert (
        kill_and_resume(
            tmp_path,
            ["run", base, "--quiet", "--run-dir", killed],
            ["resume", killed, "--quiet"],
            seed,
        )
        >= 1
    )
    straight, resumed = files_of(tmp_path / "straight"), files_of(tmp_path / "killed")
    assert sorted(resumed) == sorted(straight)
    assert resumed == straight


@pytest.mark.timeout(600)
def test_a_sweep_killed_at_seeded_moments_and_resumed_has_the_files_of_an_uninterrupted_one(
    config, tmp_path
):
    grid = str(config / "grid.yaml")
    options = ["--quiet", "--max-parallel", "2"]
    straight = str(tmp_path / "straight")
    assert _nip(tmp_path, 0, "sweep", grid, *options, "--sweep-dir", straight)[0] == 0
    killed = str(tmp_path / "killed")
    assert (
        kill_and_resume(
            tmp_path,
            ["sweep", grid, *options, "--sweep-dir", killed],
            ["sweep", "resume", killed, *options],
            seed=2,
        )
        >= 1
    )
    before, after = files_of(tmp_path / "straight"), files_of(tmp_path / "killed")
    assert sorted(after) == sorted(before)
    assert after == before
