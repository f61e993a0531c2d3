"""A Ray cluster of this machine's own for the length of a block (``nip sweep --ray local``).

Started with ``ray start --head`` and the agents' ports chosen here, rather than ``ray.init()``,
whose raylet aborts when its dashboard agent takes over 15 s to start (as on a busy 2-core
machine).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from nip.utils.processes import OwnedProcess, end_of_file, free_port

#: How long the cluster may take to come up (several times a loaded 2-core machine's 20 s).
START_TIMEOUT_S = 300.0
#: What ``ray start`` prints once its node is up.
_STARTED = "Ray runtime started"
#: The ports ``ray start`` would otherwise leave to its processes to choose and report.
_PORT_OPTIONS = (
    "--port",
    "--dashboard-agent-grpc-port",
    "--dashboard-agent-listen-port",
    "--runtime-env-agent-port",
    "--metrics-export-port",
)


@contextmanager
def local_ray_cluster(
    *, num_cpus: int | None = None, start_timeout_s: float = START_TIMEOUT_S
) -> Iterator[None]:
    """This process joined to a new Ray cluster on this machine (``num_cpus``: None, Ray counts), up
    within ``start_timeout_s`` (else RuntimeError with the end of Ray's logs) and stopped when the
    block ends. Its files are in a folder of its own (no other ``ray.init()`` joins it), it uses
    token authentication unless ``RAY_AUTH_MODE`` says otherwise, and only its own processes are
    stopped (never ``ray stop``). ``RAY_ADDRESS``, where set, still wins."""
    import ray

    # Short: Ray's socket paths under it must stay within 107 bytes.
    folder = Path(tempfile.mkdtemp(prefix="nip-ray-"))
    process = None
    try:
        env = _environment(start_timeout_s)
        ray_cli = [sys.executable, "-c", "from ray.scripts.scripts import main; main()"]
        if env["RAY_AUTH_MODE"] == "token":  # as ray.init() does: a token in ~/.ray/auth_token
            subprocess.run(
                [*ray_cli, "get-auth-token", "--generate"],
                env=env,
                stdout=subprocess.DEVNULL,  # the token itself
                stderr=subprocess.DEVNULL,
                check=True,
                timeout=start_timeout_s,
            )
        command = [
            *ray_cli,
            "start",
            "--head",
            "--block",
            f"--temp-dir={folder}",
            "--include-dashboard=false",
            "--include-log-monitor=false",
            "--no-monitor",  # the autoscaler's: a node of its own has nothing to scale
            "--disable-usage-stats",
            *(f"{option}={free_port()}" for option in _PORT_OPTIONS),
            *([f"--num-cpus={num_cpus}"] if num_cpus is not None else []),
        ]
        log = folder / "start.log"
        process = OwnedProcess(command, log, env, grace_s=60)  # it stops its node on SIGTERM
        up = lambda: _STARTED in log.read_text(errors="replace")  # noqa: E731
        if (why := process.wait_until(up, start_timeout_s)) is not None:
            raylet = end_of_file(folder / "session_latest" / "logs" / "raylet.out", 1500)
            raise RuntimeError(f"Ray's local node {why}:\n{process.log_tail(2000)}\n{raylet}")
        ray.init(_temp_dir=str(folder))  # found through the folder's ray_current_cluster
        try:
            yield
        finally:
            ray.shutdown()
    finally:
        if process is not None:
            process.stop()
        shutil.rmtree(folder, ignore_errors=True)


def _environment(start_timeout_s: float) -> dict[str, str]:
    """The cluster's environment: this one, with token authentication and the raylet's wait
    for the runtime-env agent raised."""
    env = dict(os.environ)
    env.setdefault("RAY_AUTH_MODE", "token")
    # The raylet asks the runtime-env agent for each worker's environment: let it wait too.
    env.setdefault("RAY_agent_register_timeout_ms", str(int(start_timeout_s * 1000)))
    return env
