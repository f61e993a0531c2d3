"""The lifecycle of the processes nip starts (vLLM, ``nip serve``, training, Ray): a free port,
a start in a session of its own with its output in a log, a wait until it is up, the end of that
log, and a stop of its whole process group (when asked, or when its owner goes):
:class:`OwnedProcess` holds them together."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
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


class OwnedProcess:
    """A child process this interpreter owns: started by :func:`start_logged`, waited for by
    :meth:`wait_until`, and stopped (:func:`stop_process_group`, ``grace_s`` and
    ``terminate_group`` as there), then ``then`` run, once: by :meth:`stop`, at garbage collection
    or at interpreter exit."""

    def __init__(
        self,
        command: Sequence[str],
        log_path: str | os.PathLike[str],
        env: Mapping[str, str] | None = None,
        *,
        grace_s: float,
        terminate_group: bool = False,
        then: Callable[[], object] | None = None,
    ):
        self.log_path = Path(log_path)
        self.popen = start_logged(command, self.log_path, env)
        self.terminate_group = terminate_group
        self._finalizer = weakref.finalize(
            self, _stop_then, self.popen, grace_s, terminate_group, then
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        """Its exit status; None while it runs."""
        return self.popen.poll()

    @property
    def running(self) -> bool:
        return self.popen.poll() is None

    def log_tail(self, size: int = 3000) -> str:
        """The end of its log (:func:`end_of_file`)."""
        return end_of_file(self.log_path, size)

    def wait_until(
        self, ready: Callable[[], bool | str], timeout_s: float | None, *, poll_s: float = 0.5
    ) -> str | None:
        """Poll ``ready`` (first after 50 ms, doubling up to ``poll_s``) until it is True: None;
        else why not: the string it returned (it never will be), "exited with status N" or "was
        not ready after T s" (it keeps running: the caller decides)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        delay = min(0.05, poll_s)
        while True:
            if (code := self.returncode) is not None:
                return f"exited with status {code}"
            if answer := ready():
                return None if answer is True else str(answer)
            if deadline is not None and time.monotonic() > deadline:
                return f"was not ready after {timeout_s:g} s"
            time.sleep(delay)
            delay = min(poll_s, 2 * delay)

    def stop(self, grace_s: float | None = None) -> None:
        """Stop it and its group (SIGKILL after ``grace_s``, None: the one it was started with),
        then run ``then``; a second call does nothing."""
        if grace_s is not None and self._finalizer.alive:
            stop_process_group(self.popen, grace_s, terminate_group=self.terminate_group)
        self._finalizer()


def _stop_then(
    process: subprocess.Popen,
    grace_s: float,
    terminate_group: bool,
    then: Callable[[], object] | None,
) -> None:
    stop_process_group(process, grace_s, terminate_group=terminate_group)
    if then is not None:
        then()


def exit_with_owner(owner_pid: int, interval_s: float = 0.5, grace_s: float = 60.0) -> None:
    """The child's side of ownership, for a child its owner may not outlive stopping it (``kill
    -9``, a kernel restart): a daemon thread sends this process SIGTERM once ``owner_pid`` is no
    longer its parent, and ends it ``grace_s`` later if it is still there."""

    def watch() -> None:
        while os.getppid() == owner_pid:
            time.sleep(interval_s)
        os.kill(os.getpid(), signal.SIGTERM)  # e.g. uvicorn's handler: a graceful shutdown
        time.sleep(grace_s)
        os._exit(1)  # the shutdown hung: leave anyway rather than run ownerless

    threading.Thread(target=watch, name="nip-owner-watchdog", daemon=True).start()
