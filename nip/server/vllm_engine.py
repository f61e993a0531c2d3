"""The GPU engine: a supervised vLLM process serving the base model and LoRA adapters.

vLLM listens on loopback behind the nip server, which holds its only key and is the only caller
of its admin endpoints (``/v1/load_lora_adapter``; ``/sleep`` and ``/wake_up``, exposed only with
``VLLM_SERVER_DEV_MODE=1`` and not protected by its key). The supervisor starts a
:class:`~nip.backends.local.vllm_process.VllmProcess`, loads every registered adapter, and
restarts vLLM (up to ``vllm_max_restarts`` times) if it dies, loading the adapters again; the
process, its adapters and its stop are :class:`~nip.backends.local.vllm_process.VllmProcess`'s,
the one owner of vLLM that the ``Local`` provider's vLLM engine uses too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from pathlib import Path
from typing import Any

from nip.backends.local.vllm_process import (
    VllmAdapterError,
    VllmLaunch,
    VllmProcess,
    VllmStartError,
    check_servable,
)
from nip.errors import UnservableAdapterError
from nip.server.config import ServerConfig
from nip.server.engine import Endpoint, EngineError, EngineReply, EngineState, EngineStatus
from nip.utils.precision import cpu_dtype

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
        self.pid_path = log_dir / "vllm.pid"
        self.paused_wait_s = paused_wait_s
        self.restart_backoff_s = restart_backoff_s
        launch = vllm_launch(config, model, config.vllm_python or sys.executable)
        self.vllm = VllmProcess(
            launch, log_dir / "vllm.log", port=config.vllm_port, pid_path=self.pid_path
        )
        self._state: EngineState = "stopped"
        self._error: str | None = None
        self._restarts = 0
        self._want_pause = False
        self._usable = asyncio.Event()  # ready and awake
        self._supervisor: asyncio.Task | None = None
        self._client: Any = None

    def restart_delay_s(self, restart: int) -> float:
        """The wait before restart number ``restart`` (1 for the first) after a crash."""
        return min(30.0, self.restart_backoff_s * 2.0 ** (restart - 1))

    @property
    def _sleeps(self) -> bool:
        return self.config.gpu_sharing == "pause" and self.config.resolved_device == "cuda"

    def status(self) -> EngineStatus:
        name, adapters = self.config.base_model_name, sorted(self.vllm.adapters)
        return EngineStatus(self.kind, self._state, name, adapters, self._restarts, self._error)

    async def start(self) -> None:
        import httpx

        self.pid_path.parent.mkdir(parents=True, exist_ok=True)
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(600.0, connect=5.0),
            headers={"Authorization": f"Bearer {self.vllm.token}"},
        )
        self._state = "starting"
        self._supervisor = asyncio.create_task(self._supervise())

    async def stop(self) -> None:
        supervisor, self._supervisor = self._supervisor, None
        if supervisor is not None:
            supervisor.cancel()
            await asyncio.gather(supervisor, return_exceptions=True)
        await self.vllm.stop(30.0)
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        self._state = "stopped"
        self._usable.clear()

    async def _supervise(self) -> None:
        while True:
            try:
                await self.vllm.start(self.config.vllm_startup_timeout_s)
            except VllmStartError as error:
                if error.returncode is None:  # gave up waiting for it to start
                    self._error = str(error)
                    await self.vllm.stop(30.0)
                    self._state = "failed"  # only once the process and its pid file are gone
                    return
                code = error.returncode
            else:
                await self._ready()
                code = await self.vllm.wait_for_exit()
            self._usable.clear()
            self._state = "crashed"  # until the restart is ready
            self._restarts += 1
            self._error = f"vLLM exited with status {code}:\n{self.vllm.log_tail(2000)}"
            log.error("vLLM exited with status %s (restart %s)", code, self._restarts)
            if self._restarts > self.config.vllm_max_restarts:
                self._state = "failed"
                return
            await asyncio.sleep(self.restart_delay_s(self._restarts))

    async def _ready(self) -> None:
        """A started vLLM: serving every adapter, asleep if a pause was asked for meanwhile."""
        self._state = "ready"  # _error keeps the last failure for /health
        for name in list(self.vllm.adapters):
            with contextlib.suppress(EngineError):  # recorded in _error; retried on use
                await self._load(name)
        if self._want_pause:
            await self._sleep()
        else:
            self._usable.set()

    async def load_adapter(self, name: str, path: str) -> None:
        """Serve the adapter in ``path`` as ``name``; a stack is served as the one adapter
        equal to it (vLLM applies one adapter per request).

        Raises:
            EngineError: The stack cannot be one adapter vLLM serves (its ranks add up to more
                than ``--max-lora-rank``).
        """
        try:
            await asyncio.to_thread(check_servable, name, path, self.config.max_lora_rank)
        except UnservableAdapterError as error:
            raise EngineError(f"{error} (nip serve --max-lora-rank)") from error
        self.vllm.register_adapter(name, path)
        if self._state in ("ready", "paused"):
            await self._load(name)

    async def _load(self, name: str) -> None:
        try:
            await self.vllm.adapter(name)
        except (VllmAdapterError, UnservableAdapterError) as error:  # a dead vLLM is restarted
            self._error = f"loading adapter {name!r} failed: {error}"
            raise EngineError(self._error) from None

    async def pause(self) -> None:
        if self._sleeps:  # else fraction sharing, or vLLM on the CPU: nothing to free
            self._want_pause = True
            if self._state == "ready":
                await self._sleep()

    async def resume(self) -> None:
        if self._sleeps:
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

        async with self.vllm.lock():
            if not self.vllm.running:
                return
            try:
                (await self.vllm.admin(path, params=params)).raise_for_status()
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
        if body.get("model") in self.vllm.adapters:
            try:
                await self._load(body["model"])
            except EngineError as error:
                return EngineReply.error(500, str(error))
        request = self._client.build_request("POST", self.vllm.url(f"/v1/{endpoint}"), json=body)
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
        port, state = self.vllm.port, self._state
        return f"VllmEngine(model={str(self.model)!r}, port={port}, state={state!r})"
