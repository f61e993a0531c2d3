"""nip's one owner of a vLLM server (:class:`VllmProcess`): started, watched, given adapters and
stopped in one place.

nip never imports vLLM: it runs ``python -m vllm.entrypoints.openai.api_server`` on a loopback
port with a random key. Both users (:class:`~nip.backends.local.vllm_backend.LocalVllmBackend`
and :class:`~nip.server.vllm_engine.VllmEngine`) describe what they want in a
:class:`VllmLaunch`; a :class:`VllmProcess` starts it (again after a crash), waits for ``/health``
(reporting a death or hang with the end of its log), loads each registered LoRA adapter on first
use (a stack as the one adapter equal to it) and ends its whole process group.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import secrets
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nip.backends.local.adapters import predecessors, read_adapter_stack
from nip.backends.local.stacked_adapters import concatenated_rank, write_concatenated_adapter
from nip.backends.local.vllm_python import vllm_rank_at_least, vllm_ranks_up_to
from nip.errors import BackendUnavailableError, GenerationError, UnservableAdapterError
from nip.utils.processes import OwnedProcess, free_port

log = logging.getLogger(__name__)

#: The module ``python -m`` runs: vLLM's OpenAI-compatible server.
API_SERVER = "vllm.entrypoints.openai.api_server"

#: ``python -c`` running :data:`API_SERVER` as ``-m`` does, beside a watchdog that kills its whole
#: process group once the owner (``{owner}``, its parent) is gone, even by ``kill -9``: vLLM
#: knows nothing of nip, and an orphan would hold its port and memory.
OWNED_API_SERVER = (
    "import os, runpy, signal, threading, time\n"
    "def watch():\n"
    "    while os.getppid() == {owner}:\n"
    "        time.sleep(0.5)\n"
    "    os.killpg(0, signal.SIGKILL)\n"
    "threading.Thread(target=watch, daemon=True).start()\n"
    f"runpy.run_module({API_SERVER!r}, run_name='__main__', alter_sys=True)\n"
)


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

    def command(self, port: int, owner: int | None = None) -> list[str]:
        """vLLM's command line, listening on loopback ``port``, LoRA adapters enabled; with
        ``owner`` (the pid of its parent), ended with it (:data:`OWNED_API_SERVER`)."""
        run = ["-m", API_SERVER] if owner is None else ["-c", OWNED_API_SERVER.format(owner=owner)]
        return [
            self.python, *run,
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
        if "VLLM_CPU_OMP_THREADS_BIND" not in env:
            if self.one_worker:
                # vLLM's CPU build otherwise runs an engine-core process that spins on shared
                # memory beside the worker: one process for both is faster and starts sooner.
                env.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
            if env.get("VLLM_ENABLE_V1_MULTIPROCESSING") != "0":
                # vLLM binds its CPU workers to cores: an inherited thread count oversubscribes.
                for name in THREAD_COUNT_VARIABLES:
                    env.pop(name, None)
        env.update(self.environment)
        env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
        env["VLLM_API_KEY"] = token
        return env


def check_servable(name: str, path: str | os.PathLike[str], max_lora_rank: int) -> None:
    """Raises UnservableAdapterError: vLLM started with ``--max-lora-rank max_lora_rank`` cannot
    serve the adapter in ``path`` (a stack: as one adapter, of its ranks' sum)."""
    path = Path(path)
    if below := predecessors(path):
        rank, what = concatenated_rank(read_adapter_stack(path)), f" and the {len(below)} below it"
    else:
        config = path / "adapter_config.json"
        rank, what = json.loads(config.read_text()).get("r", 0) if config.is_file() else 0, ""
    if rank > max_lora_rank:
        raise UnservableAdapterError(
            f"The adapter {name!r}{what} has rank {rank}, above the {max_lora_rank} vLLM was "
            f"started for; serve it with a larger max_lora_rank "
            f"(max_lora_rank={vllm_rank_at_least(rank)} or more)"
        )


class _LoopLock:
    """An ``asyncio.Lock`` for the running event loop (notebooks may use several loops)."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock: asyncio.Lock | None = None

    def __call__(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        if self._lock is None or self._loop is not loop:
            self._loop, self._lock = loop, asyncio.Lock()
        return self._lock


class VllmProcess:
    """A vLLM server on loopback ``port`` (0: a free one at each start): :meth:`start` (again after
    a crash), adapters by :meth:`register_adapter` and :meth:`adapter`, :meth:`stop`. Its output is
    appended to ``log_path``; ``token`` is its API key (default random); ``pid_path`` holds its pid
    while it runs (:func:`stop_stale_vllm`); a stack is written as one adapter under
    ``stacks_dir`` (None: beside its top, ``<folder>-for-vllm``). Stopped at garbage collection
    or interpreter exit if nobody stops it."""

    def __init__(
        self,
        launch: VllmLaunch,
        log_path: Path,
        *,
        port: int = 0,
        token: str | None = None,
        pid_path: Path | None = None,
        stacks_dir: Path | None = None,
    ):
        self.launch = launch
        self.log_path = Path(log_path)
        self.requested_port = port
        self.port: int | None = None
        self.token = token or secrets.token_urlsafe(24)
        self.pid_path = pid_path
        self.stacks_dir = stacks_dir
        #: Each adapter name: its folder and the name vLLM serves it under.
        self.adapters: dict[str, tuple[Path, str]] = {}
        self._loaded: dict[str, str] = {}  # in the running vLLM: name -> the name it serves
        self._owned: OwnedProcess | None = None
        self.lock = _LoopLock()  # one adapter load or admin call at a time

    @property
    def pid(self) -> int | None:
        """The pid of the latest vLLM started (None before the first start)."""
        return self._owned.pid if self._owned is not None else None

    @property
    def returncode(self) -> int | None:
        """Its exit status; None while it runs (or before it started)."""
        return self._owned.returncode if self._owned is not None else None

    @property
    def running(self) -> bool:
        return self._owned is not None and self._owned.running

    def url(self, path: str = "") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def log_tail(self, size: int = 3000) -> str:
        return self._owned.log_tail(size) if self._owned is not None else ""

    async def start(self, timeout_s: float | None) -> None:
        """Start vLLM in a process group of its own (its workers join it: one kill ends all),
        after ending the previous one's group and a stale one's, and wait until ``/health``
        answers: :class:`VllmStartError` (ending with its log) if it exits or is not ready
        within ``timeout_s`` (then it keeps running: the caller decides)."""
        import httpx

        await self.stop(0.0)  # it exited: its workers may live on
        if self.pid_path is not None and (pid := stop_stale_vllm(self.pid_path)) is not None:
            log.warning("stopped a vLLM (pid %s) left by an earlier owner", pid)
        self.port = self.requested_port or free_port()
        self._loaded.clear()
        forget = functools.partial(self.pid_path.unlink, missing_ok=True) if self.pid_path else None
        self._owned = owned = OwnedProcess(
            self.launch.command(self.port, owner=os.getpid()),
            self.log_path,
            self.launch.environment_for(self.token),
            grace_s=10.0,
            terminate_group=True,
            then=forget,
        )
        if self.pid_path is not None:
            self.pid_path.write_text(str(owned.pid))
        with httpx.Client(timeout=2.0) as client:  # one TLS context for every poll
            healthy = functools.partial(self._healthy, client)
            why = await asyncio.to_thread(owned.wait_until, healthy, timeout_s)
        if why is not None:
            raise VllmStartError(
                f"vLLM {why} while starting; its log ended with:\n{self.log_tail()}",
                returncode=owned.returncode,
            )

    def _healthy(self, client: Any) -> bool:
        import httpx

        # RuntimeError: the client closed under a wait that was cancelled.
        with contextlib.suppress(httpx.HTTPError, RuntimeError):
            return client.get(self.url("/health")).status_code == 200
        return False

    async def wait_for_exit(self, poll_s: float = 0.2) -> int:
        """Its exit status, once it has exited (polled: works in any event loop)."""
        assert self._owned is not None, "not started"
        while (code := self._owned.returncode) is None:
            await asyncio.sleep(poll_s)
        return code

    def kill(self) -> None:
        """End its process group at once and remove its pid file (safe to call twice)."""
        if self._owned is not None:
            self._owned.stop(0.0)

    async def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM its process group, SIGKILL after ``grace_s`` (workers too), off the event loop;
        cancelled half-way, it kills the group at once. Removes the pid file; safe to call twice."""
        if self._owned is None:
            return
        try:
            await asyncio.to_thread(self._owned.stop, grace_s)
        finally:
            self.kill()

    def register_adapter(
        self, name: str, path: str | os.PathLike[str], served_as: str | None = None
    ) -> None:
        """Serve the adapter in ``path`` as ``served_as`` (default ``name``) from the next
        :meth:`adapter` call for ``name`` on."""
        self.adapters[name] = (Path(path), served_as or name)

    async def adapter(self, name: str) -> str:
        """The name vLLM serves adapter ``name`` under, loading it first where needed (after a
        start, or with new weights: the previous ones are unloaded).

        Raises:
            UnservableAdapterError: It is a stack that cannot be written as one adapter.
            VllmAdapterError: vLLM refused it or did not answer.
        """
        path, served = self.adapters[name]
        async with self.lock():
            if self._loaded.get(name) == served:
                return served
            if (previous := self._loaded.pop(name, None)) is not None:
                await self._adapter_call("unload", {"lora_name": previous})
            if predecessors(path):  # vLLM applies one adapter per request: the stack's sum
                path = await asyncio.to_thread(self._write_stack, path, served)
            await self._adapter_call("load", {"lora_name": served, "lora_path": str(path)})
            self._loaded[name] = served
        return served

    def _write_stack(self, path: Path, served: str) -> Path:
        out = path.with_name(f"{path.name}-for-vllm")
        if self.stacks_dir is not None:
            out = self.stacks_dir / served
        allowed = vllm_ranks_up_to(self.launch.max_lora_rank)
        write_concatenated_adapter(read_adapter_stack(path), out, allowed_ranks=allowed)
        return out

    async def admin(
        self, path: str, *, json: dict[str, Any] | None = None, params: dict[str, str] | None = None
    ) -> Any:
        """POST to one of vLLM's endpoints with its key; the ``httpx.Response``."""
        import httpx

        headers = {"Authorization": f"Bearer {self.token}"}
        async with httpx.AsyncClient(timeout=300.0, headers=headers) as client:
            return await client.post(self.url(path), json=json, params=params)

    async def _adapter_call(self, verb: str, body: dict[str, Any]) -> None:
        """Load (already loaded counts) or unload an adapter; :class:`VllmAdapterError` when vLLM
        refuses or does not answer."""
        import httpx

        try:
            reply = await self.admin(f"/v1/{verb}_lora_adapter", json=body)
        except httpx.HTTPError as error:
            raise VllmAdapterError(f"vLLM did not answer {verb}: {error!r}") from None
        # "already been loaded": a load that raced with a restart's reload.
        if reply.status_code != 200 and not (verb == "load" and "already" in reply.text):
            raise VllmAdapterError(
                f"vLLM refused to {verb} adapter {body['lora_name']!r}: {reply.text[:500]}"
            )

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
        cmdline = b""
    pid_path.unlink(missing_ok=True)
    if API_SERVER.encode() not in cmdline:
        return None
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    return pid
