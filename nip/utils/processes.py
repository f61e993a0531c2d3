"""The lifecycle of the processes nip starts (vLLM, ``nip serve``, training, Ray): a free port,
a start in a session of its own with its output in a log, the end of that log, and a stop of its
whole process group (when asked, or when its owner goes)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def end_of_file(path: Path, size: int = 2000) -> str:
    """The last ``size`` bytes of a (possibly large) log file as text; "" if it is missing."""
    try:
        with path.open("rb") as file:
            file.seek(max(0, file.seek(0, os.SEEK_END) - size))
            return file.read().decode(errors="replace")
    except FileNotFoundError:
        return ""


def stop_process_group(
    process: subprocess.Popen, grace_s: float, *, terminate_group: bool = False
) -> None:
    """Stop a process started with ``start_new_session=True``, and everything it started.

    SIGTERM goes to the process (``nip serve`` stops vLLM itself), or its group with
    ``terminate_group``; after ``grace_s``, and after any exit, the group is killed.
    """
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            if terminate_group:
                os.killpg(process.pid, signal.SIGTERM)
            else:
                process.send_signal(signal.SIGTERM)
        try:
            process.wait(grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    with contextlib.suppress(ProcessLookupError, PermissionError):  # workers left behind
        os.killpg(process.pid, signal.SIGKILL)


def start_logged(
    command: Sequence[str], log_path: str | os.PathLike[str], env: Mapping[str, str] | None = None
) -> subprocess.Popen:
    """Start ``command`` in a session of its own (Ctrl-C in the owner's terminal does not reach
    it; its workers join its group), stdout and stderr appended to ``log_path``, no stdin."""
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        return subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )


def stop_at_exit(
    owner: object,
    process: subprocess.Popen,
    grace_s: float,
    *,
    terminate_group: bool = False,
    then: Callable[[], object] | None = None,
) -> weakref.finalize:
    """Stop ``process`` (:func:`stop_process_group`), then run ``then``, once: when the returned
    finalizer is called, ``owner`` is garbage-collected, or the interpreter exits."""
    return weakref.finalize(owner, _stop_then, process, grace_s, terminate_group, then)


def _stop_then(
    process: subprocess.Popen,
    grace_s: float,
    terminate_group: bool,
    then: Callable[[], object] | None,
) -> None:
    stop_process_group(process, grace_s, terminate_group=terminate_group)
    if then is not None:
        then()
