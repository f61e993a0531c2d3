"""The GPU engine: a supervised vLLM process serving the base model and LoRA adapters.

vLLM listens on loopback behind the nip server, which holds its only key and is the only caller
of its admin endpoints (``/v1/load_lora_adapter``; ``/sleep`` and ``/wake_up``, exposed only with
``VLLM_SERVER_DEV_MODE=1`` and not protected by its key). The supervisor starts a
:class:`~nip.backends.local.vllm_process.VllmProcess`, loads every registered adapter, and
restarts vLLM (up to ``vllm_max_restarts`` times) if it dies, loading the adapters again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import sys
from pathlib import Path
from typing import Any

from nip.backends.local.vllm_process import (
    VllmAdapterError,
    VllmLaunch,
    VllmProcess,
    VllmStartError,
    stop_stale_vllm,
)
from nip.backends.local.vllm_python import vllm_ranks_up_to
from nip.errors import UnservableAdapterError
from nip.server.config import ServerConfig
from nip.server.engine import Endpoint, EngineError, EngineReply, EngineState, EngineStatus
from nip.utils.precision import cpu_dtype
from nip.utils.processes import end_of_file, free_port

log = logging.getLogger(__name__)


def vllm_dtype(config: ServerConfig) -> str:
    """vLLM's ``--dtype`` for ``config``: on a CPU, "auto" is
    :func:`~nip.utils.precision.cpu_dtype` (vLLM's own "auto" picks bfloat16, emulated and
    several times slower without AVX512-BF16 or AMX)."""
    if config.dtype != "auto" or config.resolved_device == "cuda":
        return config.dtype
    return cpu_dtype(fast=True)


def vllm_launch(config: ServerConfig, model: Path, python: str) -> VllmLaunch:
    """What ``nip serve`` starts vLLM with, for ``config``."""
    options = ["--max-cpu-loras", str(config.max_cpu_loras or 4 * config.max_loras)]
    if config.max_model_len is not None:
        options += ["--max-model-len", str(config.max_model_len)]
    if config.quantization != "none":
        options += ["--quantization", config.quantization]
    if config.enforce_eager:
        options.append("--enforce-eager")
    if config.tensor_parallel_size > 1:
        options += ["--tensor-parallel-size", str(config.tensor_parallel_size)]
    if config.data_parallel_size > 1:
        options += ["--data-parallel-size", str(config.data_parallel_size)]
    environment = {}
    if config.resolved_device == "cuda":
        options += ["--gpu-memory-utilization", str(config.resolved_gpu_memory_utilization)]
        if config.gpu_sharing == "pause":
            options.append("--enable-sleep-mode")
            environment["VLLM_SERVER_DEV_MODE"] = "1"  # exposes /sleep and /wake_up
    else:
        environment["VLLM_CPU_KVCACHE_SPACE"] = str(config.cpu_kv_cache_gib)  # the setting wins
    if config.inference_devices is not None:
        environment["CUDA_VISIBLE_DEVICES"] = config.inference_devices
    return VllmLaunch(
        python,
        model,
        config.base_model_name,
        dtype=vllm_dtype(config),
        max_lora_rank=config.max_lora_rank,
        max_loras=config.max_loras,
        options=(*options, *config.vllm_args),
        environment=environment,
    )


class VllmEngine:
    """Runs and supervises ``python -m vllm.entrypoints.openai.api_server`` for ``config``, logging
    to ``log_dir`` (``vllm.log``, ``vllm.pid``). A request waits ``paused_wait_s`` for a paused or
    starting engine before a 503; restarts wait ``restart_backoff_s``, doubled each time, up to
    30 s."""

    kind = "vllm"

    def __init__(
        self,
        config: ServerConfig,
        model: Path,
        log_dir: Path,
        *,
        paused_wait_s: float = 60.0,
        restart_backoff_s: float = 2.0,
    ):
        self.config = config
        self.model = model
        self.python = config.vllm_python or sys.executable
        self.log_path = log_dir / "vllm.log"
        self.pid_path = log_dir / "vllm.pid"
        self.paused_wait_s = paused_wait_s
        self.restart_backoff_s = restart_backoff_s
        self.port: int | None = None
        self._token = secrets.token_urlsafe(24)
        self._adapters: dict[str, str] = {}
        self._loaded: set[str] = set()
        self._state: EngineState = "stopped"
        self._error: str | None = None
        self._restarts = 0
        self._want_pause = False
        self._usable = asyncio.Event()  # ready and awake
        self._process: VllmProcess | None = None
        self._supervisor: asyncio.Task | None = None
        self._client: Any = None
        self._lock = asyncio.Lock()  # one adapter load / sleep / wake at a time

    def restart_delay_s(self, restart: int) -> float:
        """The wait before restart number ``restart`` (1 for the first) after a crash."""
        return min(30.0, self.restart_backoff_s * 2.0 ** (restart - 1))

    @property
    def _sleeps(self) -> bool:
        return self.config.gpu_sharing == "pause" and self.config.resolved_device == "cuda"

    def status(self) -> EngineStatus:
        return EngineStatus(
            self.kind,
            self._state,
            self.config.base_model_name,
            sorted(self._adapters),
            self._restarts,
            self._error,
        )

    async def start(self) -> None:
        import httpx

        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._kill_stale()
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(600.0, connect=5.0),
            headers={"Authorization": f"Bearer {self._token}"},
        )
        self._state = "starting"
        self._supervisor = asyncio.create_task(self._supervise())

    async def stop(self) -> None:
        supervisor, self._supervisor = self._supervisor, None
        if supervisor is not None:
            supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await supervisor
        await self._terminate()
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        self._state = "stopped"
        self._usable.clear()

    async def _supervise(self) -> None:
        while True:
            self._loaded.clear()
            code = await self._run_once()
            self._usable.clear()
            if code is None:  # gave up waiting for it to start
                return
            self._state = "crashed"  # until the restart is ready
            self._restarts += 1
            self._error = f"vLLM exited with status {code}:\n{end_of_file(self.log_path)}"
            log.error("vLLM exited with status %s (restart %s)", code, self._restarts)
            if self._restarts > self.config.vllm_max_restarts:
                self._state = "failed"
                return
            await asyncio.sleep(self.restart_delay_s(self._restarts))

    async def _run_once(self) -> int | None:
        """Start vLLM, make it usable, and wait for it to exit; None if it never started."""
        if (previous := self._process) is not None:  # it exited: its workers may live on
            await previous.astop(0.0)
        self.port = self.config.vllm_port or free_port()
        launch = vllm_launch(self.config, self.model, self.python)
        process = VllmProcess(
            launch, self.port, self.log_path, token=self._token, pid_path=self.pid_path
        )
        self._process = process
        process.start()
        try:
            await process.wait_until_ready(self.config.vllm_startup_timeout_s)
        except VllmStartError as error:
            if error.returncode is not None:
                return error.returncode
            self._error = str(error)
            await self._terminate()
            self._state = "failed"  # only once the process and its pid file are gone
            return None
        self._state = "ready"  # _error keeps the last failure for /health
        for name in list(self._adapters):
            with contextlib.suppress(EngineError):  # recorded in _error; retried on use
                await self._load(name)
        if self._want_pause:
            await self._sleep()
        else:
            self._usable.set()
        return await process.wait_for_exit()

    async def _terminate(self, grace_s: float = 30.0) -> None:
        """End vLLM's process group (SIGKILL after ``grace_s``) and its pid file, even if
        cancelled half-way (then at once)."""
        process, self._process = self._process, None
        if process is not None:
            await process.astop(grace_s)

    def _kill_stale(self) -> None:
        """End a vLLM left running by a server that was killed (it would hold the port)."""
        if (pid := stop_stale_vllm(self.pid_path)) is not None:
            log.warning("stopped a vLLM (pid %s) left by an earlier server", pid)

    def _url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def load_adapter(self, name: str, path: str) -> None:
        """Serve the adapter in ``path`` as ``name``; a stack is served as the one adapter
        equal to it (vLLM applies one adapter per request).

        Raises:
            EngineError: The stack cannot be one adapter vLLM serves (its ranks add up to more
                than ``--max-lora-rank``).
        """
        path = await asyncio.to_thread(self._servable_path, Path(path))
        self._adapters[name] = path
        if self._state in ("ready", "paused"):
            await self._load(name)

    def _servable_path(self, path: Path) -> str:
        from nip.backends.local.adapters import predecessors, read_adapter_stack
        from nip.backends.local.stacked_adapters import write_concatenated_adapter

        if not predecessors(path):
            return str(path)
        allowed = vllm_ranks_up_to(self.config.max_lora_rank)
        out = path.with_name(f"{path.name}-for-vllm")
        try:
            write_concatenated_adapter(read_adapter_stack(path), out, allowed_ranks=allowed)
        except UnservableAdapterError as error:
            raise EngineError(f"{error} (nip serve --max-lora-rank)") from error
        return str(out)

    async def _load(self, name: str) -> None:

        async with self._lock:
            if name in self._loaded:
                return
            if (process := self._process) is None:
                raise EngineError(f"loading adapter {name!r} failed: vLLM is not running")
            try:
                await process.load_adapter(name, self._adapters[name])
            except VllmAdapterError as error:  # a dead vLLM is restarted by the supervisor
                self._error = f"loading adapter {name!r} failed: {error}"
                raise EngineError(self._error) from None
            self._loaded.add(name)

    async def pause(self) -> None:
        if not self._sleeps:  # fraction sharing, or vLLM on the CPU: nothing to free
            return
        self._want_pause = True
        if self._state == "ready":
            await self._sleep()

    async def resume(self) -> None:
        if not self._sleeps:
            return
        self._want_pause = False
        if self._state == "paused":
            await self._call_admin("/wake_up", {})
            self._state = "ready"
            self._usable.set()

    async def _sleep(self) -> None:
        self._usable.clear()
        await self._call_admin("/sleep", {"level": "1"})  # weights to CPU memory, KV cache dropped
        self._state = "paused"

    async def _call_admin(self, path: str, params: dict[str, str]) -> None:
        import httpx

        async with self._lock:
            if self._process is None:
                return
            try:
                reply = await self._process.admin(path, params=params)
                reply.raise_for_status()
            except httpx.HTTPError as error:  # the supervisor notices a dead vLLM
                log.warning("vLLM %s failed: %s", path, error)

    async def forward(self, endpoint: Endpoint, body: dict[str, Any]) -> EngineReply:
        import httpx

        if self._state in ("failed", "stopped"):
            return EngineReply.error(503, f"vLLM is {self._state}: {self._error or ''}".strip())
        try:
            await asyncio.wait_for(self._usable.wait(), self.paused_wait_s)
        except TimeoutError:
            why = "paused for training" if self._state == "paused" else self._state
            return EngineReply.error(503, f"vLLM is {why}", **{"retry-after": "30"})
        model = body.get("model")
        if model in self._adapters and model not in self._loaded:
            try:
                await self._load(model)
            except EngineError as error:
                return EngineReply.error(500, str(error))
        request = self._client.build_request("POST", self._url(f"/v1/{endpoint}"), json=body)
        try:
            reply = await self._client.send(request, stream=bool(body.get("stream")))
        except httpx.HTTPError as error:
            return EngineReply.error(503, f"vLLM did not answer: {error}", **{"retry-after": "5"})
        media_type = reply.headers.get("content-type", "application/json")
        if not body.get("stream") or reply.status_code != 200:
            await reply.aread()
            return EngineReply(reply.status_code, reply.content, media_type=media_type)

        async def chunks():
            try:
                async for chunk in reply.aiter_raw():
                    yield chunk
            finally:
                await reply.aclose()

        return EngineReply(200, stream=chunks(), media_type=media_type)

    def __repr__(self) -> str:
        return f"VllmEngine(model={str(self.model)!r}, port={self.port}, state={self._state!r})"
