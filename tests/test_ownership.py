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
        with owning(tmp_path / "run", "training") as ownership:
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
