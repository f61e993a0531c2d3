"""Run untrusted Python code in a separate, resource-limited subprocess.

Each :func:`run_in_sandbox` call gets a fresh directory and interpreter with ``resource``
limits, a wall-clock timeout (the process group is killed), an empty network namespace where
``unshare -rn`` works, and an audit hook (``_sandbox_boot.py``) against processes, sockets and
writes outside its directory. It contains accidents, not code written to escape: run hostile
code in a container or VM as well.
"""

from __future__ import annotations

import functools
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from nip.utils.processes import stop_process_group

SandboxStatus = Literal["ok", "error", "timeout", "memory", "violation", "killed"]
"""How a sandboxed run ended: ``error`` is an exception or non-zero exit, ``violation`` a
forbidden operation, ``killed`` another signal (e.g. the file-size limit)."""

_BOOT_FILE = Path(__file__).with_name("_sandbox_boot.py")
_VIOLATION_EXIT_CODE = 97  # kept equal to _sandbox_boot.VIOLATION_EXIT_CODE
_VIOLATION_MARK = "nip-sandbox-violation:"
_MAX_CAPTURE_CHARS = 1_000_000


@dataclass(frozen=True)
class SandboxResult:
    """What happened to one sandboxed run.

    Attributes:
        reason: One line explaining ``status`` (empty when ``ok``).
        returncode: The exit status; negative for a signal; ``None`` if unknown.
        stdout: What the code printed (about 1 MB at most is kept; the same for stderr).
    """

    status: SandboxStatus
    reason: str
    returncode: int | None
    stdout: str
    stderr: str
    wall_s: float

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def run_in_sandbox(
    code: str,
    *,
    timeout_s: float = 10.0,
    cpu_s: float | None = None,
    memory_mb: int = 512,
    max_file_mb: int = 16,
    files: Mapping[str, str | bytes] | None = None,
    hash_seed: int | None = 0,
    site_packages: bool = False,
    isolate_network: bool = True,
) -> SandboxResult:
    """Run ``code`` as the main script of a fresh, confined Python process.

    Args:
        cpu_s: CPU-time limit in seconds (defaults to ``timeout_s``).
        memory_mb: Address-space limit, in MiB; ``max_file_mb`` the largest file written.
        files: Extra files to place in the working directory first (name -> content).
        hash_seed: ``PYTHONHASHSEED`` of the child; ``None`` for random hashing.
        site_packages: Whether the child may import installed third-party packages.

    Returns:
        A :class:`SandboxResult`; nothing the code does raises here.
    """
    cpu_limit = max(1, round(cpu_s if cpu_s is not None else timeout_s))
    with tempfile.TemporaryDirectory(prefix="nip-sandbox-") as tmp:
        workdir = Path(tmp)
        shutil.copyfile(_BOOT_FILE, workdir / "_nip_boot.py")
        for name, content in {"_nip_code.py": code, **(files or {})}.items():
            data = content if isinstance(content, bytes) else content.encode("utf-8")
            (workdir / name).write_bytes(data)
        site = [] if site_packages else ["-S"]
        command = [sys.executable, "-s", "-P", "-B", *site, "_nip_boot.py"]
        if isolate_network and _network_isolation_available():
            command = ["unshare", "-rn", *command]
        env = {"PATH": os.defpath, "LC_ALL": "C.UTF-8", "HOME": tmp}
        env["PYTHONHASHSEED"] = "random" if hash_seed is None else str(hash_seed)
        limits = functools.partial(_limit, cpu_limit, memory_mb * 2**20, max_file_mb * 2**20)
        out_path, err_path = workdir / "_nip_stdout", workdir / "_nip_stderr"
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            start = time.perf_counter()
            process = subprocess.Popen(
                command,
                cwd=tmp,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
                preexec_fn=limits,
            )
            timed_out = False
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
            stop_process_group(process, grace_s=0)  # and anything it left behind
            returncode = process.returncode
            wall_s = time.perf_counter() - start
        stdout, stderr = _read_capped(out_path), _read_capped(err_path)
    status, reason = _classify(returncode, stderr, timed_out, timeout_s, cpu_limit, memory_mb)
    return SandboxResult(status, reason, returncode, stdout, stderr, wall_s)


def _limit(cpu_s: int, address_space: int, file_size: int) -> None:
    """Resource limits applied in the child between ``fork`` and ``exec``."""
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # No effect for root, but stops fork bombs for ordinary users.
    resource.setrlimit(resource.RLIMIT_NPROC, (64, 64))


def _classify(
    returncode: int, stderr: str, timed_out: bool, timeout_s: float, cpu_s: int, memory_mb: int
) -> tuple[SandboxStatus, str]:
    if timed_out:
        return "timeout", f"wall-clock limit of {timeout_s:g} s reached"
    if returncode == _VIOLATION_EXIT_CODE and _VIOLATION_MARK in stderr:
        line = stderr[stderr.rindex(_VIOLATION_MARK) :].splitlines()[0]
        return "violation", "blocked " + line[len(_VIOLATION_MARK) :].strip()
    if returncode == 0:
        return "ok", ""
    if returncode in (-signal.SIGXCPU, -signal.SIGKILL) and "MemoryError" not in stderr:
        return "timeout", f"CPU-time limit of {cpu_s} s reached"
    if "MemoryError" in stderr:
        return "memory", f"memory limit of {memory_mb} MiB reached"
    if returncode == -signal.SIGXFSZ:
        return "killed", "file-size limit reached (output too large)"
    if returncode < 0:
        return "killed", f"killed by signal {signal.Signals(-returncode).name}"
    last = stderr.strip().splitlines()[-1] if stderr.strip() else ""
    return "error", last[:300] or f"exit status {returncode}"


def _read_capped(path: Path) -> str:
    with open(path, "rb") as file:
        data = file.read(_MAX_CAPTURE_CHARS)
    return data.decode("utf-8", "replace")


@functools.cache
def _network_isolation_available() -> bool:
    """Whether ``unshare -rn`` works here (user and network namespaces); checked once."""
    if shutil.which("unshare") is None:
        return False
    try:
        probe = subprocess.run(["unshare", "-rn", "true"], capture_output=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return False
    return probe.returncode == 0
