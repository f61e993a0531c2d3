"""One vLLM server process (:class:`VllmProcess`), started, watched and stopped in one place.

nip never imports vLLM: it runs ``python -m vllm.entrypoints.openai.api_server`` on a loopback
port with a random key. Both owners (:class:`~nip.backends.local.vllm_backend.LocalVllmBackend`
and :class:`~nip.server.vllm_engine.VllmEngine`) describe what they want in a
:class:`VllmLaunch`; this module starts it, waits for ``/health`` (reporting a death or hang with
the end of its log), loads and unloads LoRA adapters and ends its whole process group.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import secrets
import signal
import subprocess
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nip.errors import BackendUnavailableError, GenerationError
from nip.utils.processes import end_of_file, start_logged, stop_at_exit, stop_process_group

#: The module ``python -m`` runs: vLLM's OpenAI-compatible server.
API_SERVER = "vllm.entrypoints.openai.api_server"


class VllmStartError(BackendUnavailableError):
    """vLLM exited (``returncode`` set) or was not ready in time (None) while starting."""

    def __init__(self, message: str, *, returncode: int | None):
        super().__init__(message)
        self.returncode = returncode


class VllmAdapterError(GenerationError):
    """vLLM refused to load or unload an adapter, or did not answer."""


#: Thread counts not handed on to vLLM's bound CPU workers (``environment`` still sets them).
THREAD_COUNT_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")

#: Options that give vLLM more than one worker (above 1): it then keeps its worker processes.
MULTI_WORKER_OPTIONS = (
    "--tensor-parallel-size",
    "-tp",
    "--pipeline-parallel-size",
    "-pp",
    "--data-parallel-size",
    "-dp",
)


@dataclass(frozen=True)
class VllmLaunch:
    """What one vLLM server is started with: an interpreter with vLLM, the base model's folder, the
    name it is served under, ``--dtype``, ``--max-lora-rank`` (one of vLLM's ranks),
    ``--max-loras``, more ``options`` after nip's, and ``environment`` over nip's
    (:meth:`environment_for`).
    """

    python: str
    model: Path
    served_model_name: str
    dtype: str = "auto"
    max_lora_rank: int = 16
    max_loras: int = 4
    options: tuple[str, ...] = ()
    environment: Mapping[str, str] = field(default_factory=dict)

    def command(self, port: int) -> list[str]:
        """vLLM's command line, listening on loopback ``port``, LoRA adapters enabled."""
        return [
            self.python, "-m", API_SERVER,
            "--model", str(self.model),
            "--served-model-name", self.served_model_name,
            "--host", "127.0.0.1",
            "--port", str(port),
            "--dtype", self.dtype,
            "--enable-lora",
            "--max-lora-rank", str(self.max_lora_rank),
            "--max-loras", str(self.max_loras),
            *self.options,
        ]  # fmt: skip

    @property
    def one_worker(self) -> bool:
        """Whether no tensor, pipeline or data parallelism among ``options`` asks for workers."""
        options = list(self.options)
        for index, option in enumerate(options):
            name, _, value = option.partition("=")
            if name in MULTI_WORKER_OPTIONS:
                value = value or (options[index + 1] if index + 1 < len(options) else "")
                if value != "1":
                    return False
        return True

    def environment_for(self, token: str) -> dict[str, str]:
        """vLLM's environment: key ``token``, run-time adapters, no hub, no usage reports, 1 GiB
        of CPU KV cache unless set."""
        env = dict(os.environ)
        env.setdefault("HF_HUB_OFFLINE", "1")
        env.setdefault("VLLM_NO_USAGE_STATS", "1")
        env.setdefault("DO_NOT_TRACK", "1")
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        if "VLLM_CPU_OMP_THREADS_BIND" not in env and self.one_worker:
            # vLLM's CPU build otherwise runs an engine-core process that spins on shared memory
            # beside the worker: one process for both is faster and starts sooner.
            env.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        if (
            "VLLM_CPU_OMP_THREADS_BIND" not in env
            and env.get("VLLM_ENABLE_V1_MULTIPROCESSING") != "0"
        ):
            # vLLM binds CPU workers to cores itself: an inherited OMP_NUM_THREADS oversubscribes.
            for name in THREAD_COUNT_VARIABLES:
                env.pop(name, None)
        env.update(self.environment)
        env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
        env["VLLM_API_KEY"] = token
        return env


class VllmProcess:
    """One vLLM server process on loopback ``port``: :meth:`start`, :meth:`wait_until_ready`,
    adapters, :meth:`stop`. Its output is appended to ``log_path``; ``token`` is its API key
    (default random); ``pid_path`` holds its pid while it runs (for :func:`stop_stale_vllm`).
    Stopped at garbage collection or interpreter exit if nobody stops it."""

    def __init__(
        self,
        launch: VllmLaunch,
        port: int,
        log_path: Path,
        *,
        token: str | None = None,
        pid_path: Path | None = None,
    ):
        self.launch = launch
        self.port = port
        self.log_path = Path(log_path)
        self.token = token or secrets.token_urlsafe(24)
        self.pid_path = pid_path
        self._popen: subprocess.Popen | None = None
        self._finalizer: weakref.finalize | None = None

    @property
    def pid(self) -> int | None:
        return self._popen.pid if self._popen is not None else None

    @property
    def returncode(self) -> int | None:
        """Its exit status; None while it runs (or before it started)."""
        return self._popen.poll() if self._popen is not None else None

    @property
    def running(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    def url(self, path: str = "") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def log_tail(self, size: int = 3000) -> str:
        return end_of_file(self.log_path, size)

    def start(self) -> None:
        """Start vLLM in a process group of its own (its workers join it: one kill ends all)."""
        if self._popen is not None:
            raise RuntimeError("this VllmProcess has been started already")
        self._popen = start_logged(
            self.launch.command(self.port), self.log_path, self.launch.environment_for(self.token)
        )
        forget = functools.partial(self.pid_path.unlink, missing_ok=True) if self.pid_path else None
        self._finalizer = stop_at_exit(self, self._popen, 10.0, terminate_group=True, then=forget)
        if self.pid_path is not None:
            self.pid_path.write_text(str(self._popen.pid))

    async def wait_until_ready(self, timeout_s: float | None) -> None:
        """Wait until ``/health`` answers 200; :class:`VllmStartError` (ending with its log) if it
        exits or is not ready within ``timeout_s`` (then it keeps running: the caller decides)."""
        import httpx

        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        poll_s = 0.05  # doubling to 0.5 s: a quick start is seen at once, a slow one cheaply
        async with httpx.AsyncClient(timeout=2.0) as client:
            while True:
                if (code := self.returncode) is not None or self._popen is None:
                    raise VllmStartError(
                        f"vLLM exited with status {code} while starting; its log ended "
                        f"with:\n{self.log_tail()}",
                        returncode=code,
                    )
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get(self.url("/health"))).status_code == 200:
                        return
                if deadline is not None and loop.time() >= deadline:
                    raise VllmStartError(
                        f"vLLM was not ready after {timeout_s:g} s; its log ended with:\n"
                        f"{self.log_tail()}",
                        returncode=None,
                    )
                await asyncio.sleep(poll_s)
                poll_s = min(0.5, 2 * poll_s)

    async def wait_for_exit(self, poll_s: float = 0.2) -> int:
        """Its exit status, once it has exited (polled: works in any event loop)."""
        assert self._popen is not None, "not started"
        while (code := self._popen.poll()) is None:
            await asyncio.sleep(poll_s)
        return code

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM its process group, SIGKILL after ``grace_s`` (workers too); removes the pid file.
        Blocks; safe to call twice."""
        if self._finalizer is not None and self._finalizer.alive:
            assert self._popen is not None
            stop_process_group(self._popen, grace_s, terminate_group=True)
            self._finalizer()  # removes the pid file; never again at exit

    async def astop(self, grace_s: float = 10.0) -> None:
        """:meth:`stop` off the event loop; cancelled half-way, it kills the group at once."""
        if self._popen is None:
            return
        try:
            await asyncio.to_thread(stop_process_group, self._popen, grace_s, terminate_group=True)
        finally:
            if self._popen.poll() is None:  # cancelled while waiting: no more grace
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self._popen.pid, signal.SIGKILL)
            self.stop()

    async def admin(
        self, path: str, *, json: dict[str, Any] | None = None, params: dict[str, str] | None = None
    ) -> Any:
        """POST to one of vLLM's endpoints with its key; the ``httpx.Response``."""
        import httpx

        headers = {"Authorization": f"Bearer {self.token}"}
        async with httpx.AsyncClient(timeout=300.0, headers=headers) as client:
            return await client.post(self.url(path), json=json, params=params)

    async def load_adapter(self, name: str, path: str | os.PathLike[str]) -> None:
        """Serve the LoRA adapter in ``path`` as ``name`` (already loaded counts); raises
        :class:`VllmAdapterError` when vLLM refuses or does not answer."""
        body = {"lora_name": name, "lora_path": str(path)}
        reply = await self._admin_or_raise("/v1/load_lora_adapter", body)
        # "already been loaded": a load that raced with a restart's reload.
        if reply.status_code != 200 and "already" not in reply.text:
            raise VllmAdapterError(f"vLLM refused to load adapter {name!r}: {reply.text[:500]}")

    async def unload_adapter(self, name: str) -> None:
        """Stop serving adapter ``name``; :class:`VllmAdapterError` if vLLM refuses."""
        reply = await self._admin_or_raise("/v1/unload_lora_adapter", {"lora_name": name})
        if reply.status_code != 200:
            raise VllmAdapterError(f"vLLM refused to unload adapter {name!r}: {reply.text[:500]}")

    async def _admin_or_raise(self, path: str, body: dict[str, Any]) -> Any:
        import httpx

        try:
            return await self.admin(path, json=body)
        except httpx.HTTPError as error:
            raise VllmAdapterError(f"vLLM did not answer {path}: {error!r}") from None

    def __repr__(self) -> str:
        state = "running" if self.running else f"exited ({self.returncode})"
        return f"VllmProcess(pid={self.pid}, port={self.port}, {state})"


def stop_stale_vllm(pid_path: Path) -> int | None:
    """Kill the vLLM whose pid ``pid_path`` holds (left by a killed owner), remove the file;
    its pid, or None."""
    try:
        pid = int(pid_path.read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ValueError, OSError):
        pid_path.unlink(missing_ok=True)
        return None
    pid_path.unlink(missing_ok=True)
    if API_SERVER.encode() not in cmdline:
        return None
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    return pid
