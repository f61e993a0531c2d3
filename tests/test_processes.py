"""Helpers for the processes nip starts: free ports, log tails, stopping a process group."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import pytest

from nip.utils.processes import end_of_file, free_port, stop_process_group


def _gone(pid: int) -> bool:
    """The process has exited (reaped, or a zombie waiting for its new parent)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")
    except FileNotFoundError:
        return True


def _leader_with_a_worker(trap_term: bool) -> tuple[subprocess.Popen, int]:
    """A process in a session of its own that started a worker; the worker's pid."""
    trap = "trap '' TERM; " if trap_term else ""
    process = subprocess.Popen(
        ["bash", "-c", f"{trap}sleep 300 & echo $!; wait"],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    return process, int(process.stdout.readline())


@pytest.mark.timeout(30)
@pytest.mark.parametrize("terminate_group", [False, True])
def test_stopping_a_process_also_stops_the_workers_it_left_behind(terminate_group):
    process, worker = _leader_with_a_worker(trap_term=False)

    stop_process_group(process, grace_s=5, terminate_group=terminate_group)

    assert process.returncode is not None
    deadline = time.monotonic() + 5
    while not _gone(worker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(worker)


@pytest.mark.timeout(30)
def test_a_process_that_ignores_sigterm_is_killed_after_the_grace_period():
    process, worker = _leader_with_a_worker(trap_term=True)
    started = time.monotonic()

    stop_process_group(process, grace_s=0.5)

    assert process.returncode is not None and time.monotonic() - started < 10
    stop_process_group(process, grace_s=0.5)  # a second call does nothing
    time.sleep(0.2)
    assert _gone(worker)


def test_a_free_port_can_be_bound():
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_the_end_of_a_log_is_its_last_bytes_and_a_missing_log_is_empty(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("a" * 5000 + "the end\n")

    assert end_of_file(log, size=8) == "the end\n"
    assert end_of_file(tmp_path / "missing.log") == ""


@pytest.mark.timeout(60)
def test_an_owned_process_is_waited_for_until_ready_exited_refused_or_timed_out(tmp_path):
    from nip.utils.processes import OwnedProcess

    log = tmp_path / "child.log"
    up = OwnedProcess(["bash", "-c", "echo listening; sleep 300"], log, grace_s=5)
    assert up.wait_until(lambda: "listening" in log.read_text(), timeout_s=30) is None
    assert up.wait_until(lambda: "the engine failed", timeout_s=30) == "the engine failed"
    assert up.wait_until(lambda: False, timeout_s=0.2) == "was not ready after 0.2 s"
    up.stop()
    up.stop()  # a second stop does nothing
    assert not up.running and _gone(up.pid)
    crashing = OwnedProcess(["bash", "-c", "echo out of memory; exit 3"], log, grace_s=5)
    assert crashing.wait_until(lambda: False, timeout_s=30) == "exited with status 3"
    assert "out of memory" in crashing.log_tail()
