"""One owner per folder: a second is refused naming the first; a dead owner's place is taken."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from nip.runs.ownership import LOCK_FILE, DirectoryInUseError, current_owner, owning

pytestmark = pytest.mark.timeout(60)

#: A process that owns the folder argv[1] and, with "fork", forks a child that outlives it.
HOLDER = """
import os, sys, time
from nip.runs.ownership import owning
with owning(sys.argv[1], "a test's holder"):
    child = os.fork() if sys.argv[2:] == ["fork"] else None
    if child == 0:
        time.sleep(60)
        os._exit(0)
    print("holding", child or "", flush=True)
    time.sleep(60)
"""


def _holder(folder: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(folder), *extra], stdout=subprocess.PIPE, env=env
    )
    line = process.stdout.readline().split()
    assert line[0] == b"holding"
    process.child = int(line[1]) if len(line) > 1 else None  # type: ignore[attr-defined]
    return process


def _kill(process: subprocess.Popen) -> None:
    process.kill()
    process.wait(timeout=10)


def test_a_second_owner_is_refused_naming_the_first_by_pid_host_and_time(tmp_path):
    holder = _holder(tmp_path / "run")
    try:
        with pytest.raises(DirectoryInUseError) as refused, owning(tmp_path / "run", "training"):
            pass
        message = str(refused.value)
        assert f"pid {holder.pid} on {socket.gethostname()} since 20" in message
        assert "a test's holder" in message and "\n" not in message
        assert current_owner(tmp_path / "run").pid == holder.pid
    finally:
        _kill(holder)


def test_the_owner_of_a_process_killed_with_sigkill_is_taken_over(tmp_path):
    holder = _holder(tmp_path / "run")
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(timeout=10)
    assert current_owner(tmp_path / "run") is None
    with owning(tmp_path / "run", "training") as ownership:
        assert ownership.taken_over_from.pid == holder.pid
        assert current_owner(tmp_path / "run").pid == os.getpid()
    assert (tmp_path / "run" / LOCK_FILE).read_text() == ""  # a clean release names nobody
    with owning(tmp_path / "run", "training") as ownership:
        assert ownership.taken_over_from is None


def test_a_child_forked_by_the_owner_does_not_keep_its_folder_after_it_dies(tmp_path):
    holder = _holder(tmp_path / "run", "fork")
    _kill(holder)  # its child sleeps on, with copies of its descriptors
    try:
        os.kill(holder.child, 0)  # alive
        # The child closes its copies as it starts (the ownership module's fork hook); on a
        # busy machine it may not have run yet. A child keeping the lock would hold it a minute.
        with owning(tmp_path / "run", "training", wait_s=20) as ownership:
            assert ownership.taken_over_from.pid == holder.pid
    finally:
        os.kill(holder.child, signal.SIGKILL)


def test_claims_nest_within_a_task_and_its_tasks_but_another_thread_is_refused(tmp_path):
    refused: list[BaseException] = []

    def other_thread() -> None:
        try:
            with owning(tmp_path, "a second trainer"):
                pass
        except DirectoryInUseError as error:
            refused.append(error)

    async def nested() -> int:
        with owning(tmp_path, "training") as inner:
            return inner.owner.pid

    with owning(tmp_path, "an extension") as outer:
        with owning(tmp_path, "changing its parameters") as inner:
            assert inner is outer
        assert asyncio.run(nested()) == os.getpid()
        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()
    assert len(refused) == 1 and "an extension by pid" in str(refused[0])
    with owning(tmp_path, "training"):  # released: free again
        pass


def test_two_tasks_of_one_loop_are_two_owners(tmp_path):
    async def claim(delay: float) -> str:
        await asyncio.sleep(delay)
        try:
            with owning(tmp_path, "a sweep"):
                await asyncio.sleep(0.2)
        except DirectoryInUseError:
            return "refused"
        return "owned"

    async def both() -> list[str]:
        return await asyncio.gather(claim(0), claim(0.05))

    assert asyncio.run(both()) == ["owned", "refused"]


def test_a_waiting_claim_gets_the_folder_when_its_owner_dies(tmp_path):
    holder = _holder(tmp_path / "run")
    threading.Timer(0.5, holder.kill).start()
    started = time.monotonic()
    with owning(tmp_path / "run", "a retried cell", wait_s=20) as ownership:
        assert ownership.taken_over_from.pid == holder.pid
    assert time.monotonic() - started < 20
    holder.wait(timeout=10)


# ------------------------------------------------------------ two sweeps on one folder
GRID = """
name: owned
base: base.yaml
axes:
  interaction_protocol: [nip, debate]
  seed: [0, 1]
"""


@pytest.fixture
def paid_grid(dummy_params, tmp_path) -> Path:
    """A 2 x 2 grid whose agents call an OpenAI-compatible server (the test server, below);
    too few examples to fine-tune, so every cell warns and only chat requests are made."""
    params = dummy_params(model_provider="OpenAI", model_name="gpt-test")
    params.text_rl.min_fine_tune_examples = 1000
    params.save(tmp_path / "base.yaml")
    (tmp_path / "grid.yaml").write_text(GRID)
    return tmp_path / "grid.yaml"


@pytest.fixture
def chat_server():
    """The test server; its answers wait while ``server.gate`` is closed (cleared)."""
    from nip.backends import DummyBackend, DummyPolicy
    from nip.testing.server import create_app, serve

    gate = threading.Event()
    gate.set()

    class GatedBackend(DummyBackend):
        async def generate(self, request):
            while not gate.is_set():
                await asyncio.sleep(0.01)
            return await super().generate(request)

    server = serve(create_app(GatedBackend(DummyPolicy(decide_on_turn=2)), latency_s=0.02))
    server.gate = gate
    yield server
    gate.set()
    server.stop()


def _sweep(grid: Path, sweep_dir: Path, server) -> subprocess.Popen:
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(__file__).parents[1]),
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": "sk-test",
        "WANDB_MODE": "disabled",
    }
    command = [sys.executable, "-m", "nip.cli", "sweep", str(grid), "--sweep-dir", str(sweep_dir)]
    command += ["--cache", "off", "--max-parallel", "2"]
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def _wait_for(condition, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def _turns(sweep_dir: Path) -> int:
    """Every turn of every dialogue the sweep's cells saved: one chat request each."""
    import json

    return sum(
        len(json.loads(line)["turns"])
        for path in sweep_dir.glob("cells/*/rollouts/*.jsonl")
        for line in path.read_text().splitlines()
    )


@pytest.mark.timeout(240)
def test_a_second_sweep_on_the_folder_is_refused_and_every_cell_runs_once(
    paid_grid, tmp_path, chat_server
):
    from nip.runs.sweep_dir import sweep_status

    sweep_dir = tmp_path / "sweep"
    chat_server.gate.clear()  # the first sweep's cells wait for their first answers
    first = _sweep(paid_grid, sweep_dir, chat_server)
    try:
        _wait_for(lambda: chat_server.stats().requests > 0)
        time.sleep(1)
        second = _sweep(paid_grid, sweep_dir, chat_server)
        _, err = second.communicate(timeout=120)
        assert second.returncode == 2, err
        assert err.count("\n") == 1 and "Traceback" not in err
        assert f"in use: a sweep by pid {first.pid} on {socket.gethostname()} since" in err
        chat_server.gate.set()
        _, err = first.communicate(timeout=180)
    finally:
        first.kill()
    assert first.returncode == 0, err[-2000:]
    assert {c.stage for c in sweep_status(sweep_dir)} == {"done"}
    assert chat_server.stats().requests == _turns(sweep_dir) > 0  # no cell ran twice
    # Warnings of parallel cells name their cell and read as nip's other lines.
    warned = [line for line in err.splitlines() if "too few examples" in line]
    assert {line.split(":")[0] for line in warned} == {
        "nip_seed0",
        "nip_seed1",
        "debate_seed0",
        "debate_seed1",
    }
    assert all(": warning: group '" in line for line in warned)
    assert "UserWarning" not in err and ".py:" not in err


@pytest.mark.timeout(240)
def test_a_sweep_killed_with_sigkill_is_taken_over_by_the_next_one(
    paid_grid, tmp_path, chat_server
):
    from nip.runs.sweep_dir import sweep_status

    sweep_dir = tmp_path / "sweep"
    killed = _sweep(paid_grid, sweep_dir, chat_server)
    try:
        _wait_for(lambda: any(sweep_dir.glob("cells/*/state.json")))
        chat_server.gate.clear()  # killed in the middle: no cell can finish meanwhile
    finally:
        os.kill(killed.pid, signal.SIGKILL)
        killed.communicate(timeout=30)
    assert {c.stage for c in sweep_status(sweep_dir)} != {"done"}
    chat_server.gate.set()
    third = _sweep(paid_grid, sweep_dir, chat_server)
    out, err = third.communicate(timeout=180)
    assert third.returncode == 0, err[-2000:]
    assert f"taking over from a sweep by pid {killed.pid}" in out
    assert {c.stage for c in sweep_status(sweep_dir)} == {"done"}


# ------------------------------------------------- every command and its Python API
@pytest.fixture(scope="module")
def owned(tmp_path_factory, dummy_params) -> dict[str, Path]:
    """A finished run, a finished sweep and their config and grid files."""
    from nip.settings import ExperimentSettings
    from nip.sweeps.run import GridSpec, run_sweep
    from nip.training.trainer import build_trainer

    root = tmp_path_factory.mktemp("owned")
    params = dummy_params()
    params.rl.num_iterations = 1
    params.save(root / "base.json")
    quiet = {"show_progress": False, "wandb_mode": "disabled"}
    build_trainer(params, ExperimentSettings(run_dir=root / "run", **quiet)).train()
    (root / "grid.yaml").write_text(GRID.replace("base.yaml", "base.json"))
    spec = GridSpec.load(root / "grid.yaml")
    run_sweep(spec, root / "sweep", ExperimentSettings(**quiet), echo=False)
    return {"root": root, "run": root / "run", "sweep": root / "sweep"}


#: Each command, with the folder a running copy of it owns.
SECOND_COPIES = {
    "nip run": (["run", "{root}/base.json", "--run-dir", "{run}", "--overwrite"], "{run}"),
    "nip resume": (["resume", "{run}"], "{run}"),
    "nip extend": (["extend", "{run}", "--iterations", "1"], "{run}"),
    "nip retest": (["retest", "{run}"], "{run}/retest/test-1x"),
    "nip sweep": (["sweep", "{root}/grid.yaml", "--sweep-dir", "{sweep}"], "{sweep}"),
    "nip sweep resume": (["sweep", "resume", "{sweep}"], "{sweep}"),
}


@pytest.mark.parametrize("command", list(SECOND_COPIES))
def test_a_second_copy_of_a_command_is_refused_naming_the_first(owned, command, capsys):
    from nip.cli import main

    argv, folder = SECOND_COPIES[command]
    places = {k: str(v) for k, v in owned.items()}
    holder = _holder(Path(folder.format(**places)))
    try:
        before = {p: p.read_bytes() for p in owned["root"].rglob("*") if p.is_file()}
        assert main([a.format(**places) for a in argv]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"by pid {holder.pid} on {socket.gethostname()}" in err
        after = {p: p.read_bytes() for p in owned["root"].rglob("*") if p.is_file()}
        assert after == before
    finally:
        _kill(holder)


def test_the_python_api_takes_the_same_lock(owned):
    from nip.experiments.extend import extend_run
    from nip.experiments.retest import retest
    from nip.parameters import HyperParameters
    from nip.runs.changes import change_saved_parameters
    from nip.settings import ExperimentSettings
    from nip.sweeps.run import GridSpec, prepare_sweep, run_sweep
    from nip.training.trainer import PureTextEiTrainer, build_trainer

    settings = ExperimentSettings(show_progress=False, wandb_mode="disabled")
    params = HyperParameters.load(owned["root"] / "base.json")
    spec = GridSpec.load(owned["root"] / "grid.yaml")
    holder = _holder(owned["run"])
    try:
        for attempt in (
            lambda: build_trainer(params, ExperimentSettings(run_dir=owned["run"]), overwrite=True),
            lambda: PureTextEiTrainer.resume(owned["run"], settings),
            lambda: extend_run(owned["run"], 1, settings),
            lambda: change_saved_parameters(owned["run"], {"seed": 9}, accept=True),
        ):
            with pytest.raises(DirectoryInUseError, match=f"pid {holder.pid}"):
                attempt()
    finally:
        _kill(holder)
    trainer = PureTextEiTrainer.resume(owned["run"], settings)  # free again: it opens
    holder = _holder(owned["run"])
    try:  # opened before another process took the folder: training is refused
        with pytest.raises(DirectoryInUseError, match=f"pid {holder.pid}"):
            trainer.train()
    finally:
        _kill(holder)
    holder = _holder(owned["run"] / "retest" / "test-1x")
    try:
        with pytest.raises(DirectoryInUseError, match=f"pid {holder.pid}"):
            retest(owned["run"], settings=settings)
    finally:
        _kill(holder)
    holder = _holder(owned["sweep"])
    try:
        for attempt in (
            lambda: run_sweep(spec, owned["sweep"], settings, echo=False),
            lambda: prepare_sweep(spec, owned["sweep"]),
        ):
            with pytest.raises(DirectoryInUseError, match=f"pid {holder.pid}"):
                attempt()
    finally:
        _kill(holder)


def test_a_new_owner_removes_the_temporary_files_of_interrupted_writes_and_nothing_else(tmp_path):
    run = tmp_path / "sweep"
    stale = [run / ".sweep.json.ab3_x9zq.tmp", run / "metrics" / ".train_it0000.json.k2m4n6p8.tmp"]
    kept = [
        run / "sweep.json",
        run / ".hidden.tmp",  # not an atomic write's name
        run / ".control.json.abcdefgh.tmp",  # control.json is written by others than its owner
        run / "jobs" / "job-1" / ".status.json.abcdefgh.tmp",  # a training process's
        run / "serve" / ".model.json.abcdefgh.tmp",  # a nip serve's
        run / "cells" / "a" / LOCK_FILE,
        run / "cells" / "a" / ".state.json.abcdefgh.tmp",  # the cell's owner cleans it
    ]
    for path in stale + kept:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
    with owning(run, "a sweep resuming"):
        assert [p for p in stale if p.exists()] == []
        assert [p for p in kept if not p.exists()] == []
    with owning(run / "cells" / "a", "a cell resuming"):
        assert not (run / "cells" / "a" / ".state.json.abcdefgh.tmp").exists()
