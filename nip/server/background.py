"""``nip serve`` owned by a notebook or a script: started in the background, stopped with it.

::

    with serve_in_background(model="/models/tiny-chat", engine="transformers") as server:
        verifier = server.agent_params(lora_rank=8)   # SelfHosted, pointed at this server

The child (``nip serve --config FILE --owner-pid PID``, an
:class:`~nip.utils.processes.OwnedProcess`) is stopped by the ``with`` block,
:meth:`ServerHandle.stop`, garbage collection, interpreter exit, and, through its watchdog
(:func:`~nip.utils.processes.exit_with_owner`), when the owner is killed outright (``kill -9``, a
kernel restart). ``--serve`` (:mod:`nip.server.run_servers`) and a Ray sweep's server slots
(:mod:`nip.sweeps.ray_servers`) own their servers this way too.
"""

from __future__ import annotations

import contextlib
import functools
import html
import os
import re
import shutil
import sys
import tempfile
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nip.backends.local.vllm_python import HOW_TO_GET_VLLM, VLLM_PYTHON_ENV, find_vllm_python
from nip.backends.self_hosted import API_KEY_ENV
from nip.errors import InvalidParameterError, NipError
from nip.extras import require
from nip.parameters.agents import DEFAULT_LOCAL_MODEL
from nip.server.config import EngineKind, ServerConfig, is_loopback
from nip.utils.html import caption_table
from nip.utils.processes import OwnedProcess, free_port

if TYPE_CHECKING:
    from nip.parameters import PureTextAgentParameters

#: Seconds a stopping server gets to shut down (and stop vLLM) before it is killed.
STOP_GRACE_S = 30.0


class ServerStartError(NipError):
    """A background server exited, or its engine failed, before it was ready."""


#: Access-log lines of the handle's own readiness polls, left out of the log tail.
_OWN_POLLS = '"GET /health HTTP'


#: Terminal colour codes (vLLM colours its log even into a file).
_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _tail(path: Path, lines: int) -> str:
    if not path.exists():
        return ""
    with path.open(errors="replace") as file:
        tail = deque((line for line in file if _OWN_POLLS not in line), maxlen=lines)
    return _ANSI_ESCAPE.sub("", "".join(tail))


class ServerHandle:
    """A ``nip serve`` process this interpreter owns; see :func:`serve_in_background`.

    Attributes:
        config: The server's settings (``port`` and ``vllm_port`` as chosen).
        process: The server process (its own process group).
        engine: The engine asked for, ``auto`` resolved (:attr:`engine_kind`: ``/health``'s).
        log_path: The server's log (stdout and stderr).
    """

    def __init__(self, config: ServerConfig, *, temporary_storage: bool = False):
        self.config = config
        self.engine = config.engine
        self.storage = config.storage_path
        self.log_path = self.storage / "logs" / "serve.log"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        config_path = config.save(self.storage / "background-server.json")
        command = [sys.executable, "-m", "nip.cli", "serve", "--config", str(config_path)]
        command += ["--owner-pid", str(os.getpid())]
        remove = functools.partial(shutil.rmtree, self.storage, ignore_errors=True)
        self._owned = OwnedProcess(
            command,
            self.log_path,
            {**os.environ, "PYTHONUNBUFFERED": "1"},
            grace_s=STOP_GRACE_S,
            then=remove if temporary_storage else None,
        )
        self.process = self._owned.popen
        self._health: dict[str, Any] = {}
        self._ssl_context: Any = None  # built once: each health check building one cost ~30 ms

    @property
    def host(self) -> str:
        """The host clients use (loopback when the server listens on every interface)."""
        host = self.config.host
        if host in ("", "0.0.0.0", "::"):
            return "127.0.0.1"
        return f"[{host}]" if ":" in host else host

    @property
    def port(self) -> int:
        return self.config.port

    @property
    def url(self) -> str:
        """The server's root URL (the OpenAI API is under ``/v1``)."""
        return f"http://{self.host}:{self.port}"

    @property
    def model_name(self) -> str:
        """The name clients send for the base model."""
        return self.config.base_model_name

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def running(self) -> bool:
        """Whether the server process is alive."""
        return self._owned.running

    @property
    def engine_kind(self) -> str | None:
        """The engine ``/health`` last reported ("vllm", "transformers"); None before ready."""
        return self._health.get("engine", {}).get("kind")

    def agent_params(self, **overrides: Any) -> PureTextAgentParameters:
        """``SelfHosted`` agent parameters that talk to this server's base model (``overrides``: any
        other :class:`~nip.parameters.PureTextAgentParameters` field)."""
        from nip.parameters import PureTextAgentParameters

        settings: dict[str, Any] = {
            "model_provider": "SelfHosted",
            "model_name": self.model_name,
            "language_model_server_scheme_host": f"http://{self.host}",
            "language_model_server_port": self.port,
        }
        return PureTextAgentParameters(**{**settings, **overrides})

    def health(self, timeout_s: float = 2.0) -> dict[str, Any]:
        """The server's ``GET /health`` answer (engine state, adapters, jobs); raises
        ``httpx.HTTPError`` when it does not answer."""
        import httpx

        key = os.environ.get(API_KEY_ENV)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        if self._ssl_context is None:
            self._ssl_context = httpx.create_ssl_context()
        reply = httpx.get(
            f"{self.url}/health", headers=headers, timeout=timeout_s, verify=self._ssl_context
        )
        reply.raise_for_status()
        self._health = reply.json()
        return self._health

    def log_tail(self, lines: int = 20, *, vllm: bool = False) -> str:
        """The last ``lines`` lines of the server's (or vLLM's) log, without ``/health`` polls."""
        return _tail(self.storage / "logs" / "vllm.log" if vllm else self.log_path, lines)

    def wait_until_ready(self, timeout_s: float = 900.0, *, show_progress: bool = True) -> None:
        """Block until the engine is ready, with a progress bar of the phase and the last log line.

        Raises:
            ServerStartError: The process exited, the engine failed or ``timeout_s`` passed (the
                message holds the end of the log); the server is stopped.
        """
        import httpx
        from tqdm.auto import tqdm

        bar = tqdm(total=2, desc="nip serve: starting", disable=not show_progress or None)

        def ready() -> bool | str:
            with contextlib.suppress(httpx.HTTPError):  # else not answering yet
                engine = self.health()["engine"]
                if engine["state"] == "failed":
                    return f"has a failed engine: {engine.get('error')}"
                bar.n = 1 if engine["state"] != "ready" else 2
                bar.set_description(f"nip serve: {engine['kind']} engine {engine['state']}")
            bar.set_postfix_str(self.url if bar.n == 2 else self.log_tail(1).strip()[-60:])
            return bar.n == 2

        try:
            problem = self._owned.wait_until(ready, timeout_s)
        finally:
            bar.refresh()
            bar.close()
        if problem is not None:
            self.stop()
            raise ServerStartError(
                f"the background server ({self.engine} engine, {self.config.model}) "
                f"{problem}; the end of {self.log_path}:\n{self.log_tail(30)}"
            )

    def stop(self) -> None:
        """Stop the server (SIGTERM: it stops vLLM; SIGKILL after 30 s). Idempotent."""
        self._owned.stop()

    def __enter__(self) -> ServerHandle:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _state(self) -> str:
        if not self.running:
            return f"stopped (exit status {self.process.returncode})"
        return "running"

    def __repr__(self) -> str:
        return (
            f"ServerHandle(url={self.url!r}, model={self.model_name!r}, "
            f"engine={self.engine_kind or self.engine!r}, pid={self.pid}, {self._state()})"
        )

    def _repr_html_(self) -> str:
        adapters: list[str] = []
        state = self._state()
        if self.running:
            with contextlib.suppress(Exception):
                engine = self.health(timeout_s=1.0)["engine"]
                adapters, state = engine.get("adapters", []), f"running, engine {engine['state']}"
        rows = {
            "url": self.url,
            "model": self.model_name,
            "engine": self.engine_kind or self.engine,
            "pid": str(self.pid),
            "state": state,
            "adapters": ", ".join(adapters) or "none yet",
        }
        logs = [("server log", self.log_tail(12))]
        if self.engine == "vllm":
            logs.append(("vLLM log", self.log_tail(8, vllm=True)))
        pre = "".join(
            f"<div style='color:#666;margin-top:.4em'>{title}</div><pre style='max-height:12em;"
            f"overflow:auto;background:#f6f6f6;padding:.4em;margin:0;font-size:85%'>"
            f"{html.escape(text) or '(empty)'}</pre>"
            for title, text in logs
        )
        return (
            "<div style='border:1px solid #ddd;border-radius:6px;padding:.6em;max-width:60em'>"
            f"{caption_table('nip serve', rows)}{pre}</div>"
        )


def serve_in_background(
    model: str = DEFAULT_LOCAL_MODEL,
    *,
    engine: EngineKind = "auto",
    port: int | None = None,
    storage_dir: str | os.PathLike[str] | None = None,
    ready_timeout_s: float = 900.0,
    show_progress: bool = True,
    **settings: Any,
) -> ServerHandle:
    """Start ``nip serve`` as a child process and wait until its engine is ready.

    Args:
        model: The base model: a Hugging Face model folder or an embedded model name.
        engine: "vllm", "transformers", or "auto": vLLM where :func:`find_vllm_python` finds it
            (its CPU build counts), else transformers.
        port: The server's port (None: a free one).
        storage_dir: Files, jobs, adapters and logs (None: a temporary folder, removed with it).
        ready_timeout_s: Give up (and stop the server) when it is not ready by then.
        settings: Any other :class:`~nip.server.config.ServerConfig` field (``vllm_port``
            defaults to a free port).

    Returns:
        The ready server's handle; use it as a context manager, or call ``stop()``.

    Raises:
        InvalidParameterError: A setting is not allowed.
        ServerStartError: ``engine="vllm"`` and no vLLM is found, or the server did not get
            ready (the message holds the end of its log).
        MissingExtraError: ``nip[server]`` is not installed here.
    """
    require("server")  # the child process is this interpreter's `nip serve`
    if engine not in ("auto", "vllm", "transformers"):
        raise InvalidParameterError("engine", engine, "'auto', 'vllm' or 'transformers'")
    python = settings.pop("vllm_python", None)
    if engine != "transformers":
        python = find_vllm_python(python)
        if python is None and engine == "vllm":
            raise ServerStartError(
                f"engine='vllm' but no interpreter with vLLM was found: {HOW_TO_GET_VLLM}"
            )
        engine = "vllm" if python is not None else "transformers"
    temporary = storage_dir is None
    storage = tempfile.mkdtemp(prefix="nip-serve-") if temporary else str(storage_dir)
    host = settings.get("host", "127.0.0.1")
    config = ServerConfig.from_dict(
        {
            "vllm_port": 0,
            **settings,
            "model": model,
            "engine": engine,
            "vllm_python": python,
            "port": port or free_port(host if is_loopback(host) else "0.0.0.0"),
            "storage_dir": storage,
        }
    )
    handle = ServerHandle(config, temporary_storage=temporary)
    handle.wait_until_ready(ready_timeout_s, show_progress=show_progress)
    return handle


__all__ = [
    "STOP_GRACE_S",
    "VLLM_PYTHON_ENV",
    "ServerHandle",
    "ServerStartError",
    "find_vllm_python",
    "free_port",
    "serve_in_background",
]
