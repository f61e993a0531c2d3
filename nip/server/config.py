"""Settings of ``nip serve``: where it listens, which engine serves the model, how GPUs are shared.
The bearer token is not a field (``--api-key`` or ``$NIP_SERVER_API_KEY`` only), so a saved
configuration never holds a secret."""

from __future__ import annotations

import ipaddress
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from nip.backends.local.vllm_python import VLLM_LORA_RANKS
from nip.backends.self_hosted import API_KEY_ENV
from nip.errors import InvalidParameterError, NipError
from nip.parameters._base import BaseParameters, param
from nip.parameters.agents import DEFAULT_LOCAL_MODEL

EngineKind = Literal["auto", "vllm", "transformers", "none"]
GpuSharing = Literal["fraction", "pause"]
Device = Literal["auto", "cuda", "cpu"]
Quantization = Literal["none", "bitsandbytes"]

#: Environment variable holding the server's bearer token (read by server and clients).


class InsecureServerError(NipError):
    """The server would listen beyond this machine without a bearer token."""


@dataclass
class ServerConfig(BaseParameters):
    """Settings of the language-model server (``nip serve``)."""

    host: str = param("127.0.0.1", doc="Interface to listen on (loopback by default).")
    port: int = param(5000, doc="Port of the server's API.", ge=0, le=65535)
    storage_dir: str | None = param(
        None, doc="Files, jobs, adapters and logs (None: <user data dir>/nip/server)."
    )
    model: str = param(
        DEFAULT_LOCAL_MODEL, doc="Base model: a Hugging Face model folder or an embedded model."
    )
    served_model_name: str | None = param(
        None, doc="The name clients use for the base model (None: the model folder's name)."
    )
    engine: EngineKind = param(
        "auto",
        doc="Inference engine: vllm, transformers, none, or auto (vLLM with a GPU, else "
        "transformers).",
    )
    device: Device = param("auto", doc="Where inference runs: cuda, cpu or auto (detected).")
    vllm_python: str | None = param(
        None, doc="Interpreter with vLLM installed (None: the one running the server)."
    )
    vllm_port: int = param(
        8000, doc="Port vLLM listens on, on loopback (0: any free port).", ge=0, le=65535
    )
    vllm_startup_timeout_s: float = param(
        900.0, doc="Give up on a vLLM start that is not ready by then.", gt=0
    )
    vllm_max_restarts: int = param(3, doc="Restarts of a crashed vLLM before giving up.", ge=0)
    max_lora_rank: int = param(64, doc="Largest LoRA rank vLLM can serve.")
    max_loras: int = param(4, doc="Adapters vLLM can use in one batch.", ge=1)
    max_cpu_loras: int | None = param(
        None, doc="Adapters vLLM keeps in CPU memory (None: 4 x max_loras).", ge=1
    )
    gpu_sharing: GpuSharing = param(
        "fraction",
        doc="fraction: vLLM keeps a share of GPU memory while jobs train; pause: vLLM sleeps "
        "while jobs train.",
    )
    gpu_memory_utilization: float | None = param(
        None,
        doc="vLLM's share of GPU memory (None: 0.5 with fraction, 0.9 with pause).",
        gt=0.0,
        le=1.0,
    )
    tensor_parallel_size: int = param(1, doc="GPUs one vLLM replica spans.", ge=1)
    data_parallel_size: int = param(1, doc="vLLM replicas behind one endpoint.", ge=1)
    dtype: str = param(
        "auto",
        doc="vLLM's --dtype (auto, bfloat16, float16, float32); auto is float32 on a CPU "
        "without native bfloat16 (emulated it is several times slower), or NIP_CPU_DTYPE.",
    )
    quantization: Quantization = param(
        "none",
        doc="vLLM's --quantization for the served weights: none or bitsandbytes (GPU only).",
    )
    max_model_len: int | None = param(None, doc="vLLM's --max-model-len.", ge=1)
    enforce_eager: bool = param(False, doc="vLLM's --enforce-eager (faster start, slower).")
    vllm_args: list[str] = param(default_factory=list, doc="Extra vLLM command-line arguments.")
    cpu_kv_cache_gib: int = param(
        1, doc="KV cache of vLLM's CPU build, in GiB (VLLM_CPU_KVCACHE_SPACE).", ge=1
    )
    inference_devices: str | None = param(
        None, doc="CUDA_VISIBLE_DEVICES of vLLM (None: inherited)."
    )
    training_devices: str | None = param(
        None, doc="CUDA_VISIBLE_DEVICES of training jobs (None: inherited)."
    )
    max_concurrent_jobs: int = param(1, doc="Fine-tuning jobs that train at once.", ge=1)
    training_processes: int = param(
        1, doc="Processes per job; above 1, jobs run under accelerate launch.", ge=1
    )
    accelerate_config: str | None = param(
        None, doc="An accelerate config file for training jobs (implies accelerate launch)."
    )
    poll_interval_s: float = param(1.0, doc="How often running jobs are checked.", gt=0)

    def validate(self) -> None:
        if self.quantization != "none" and (self.engine == "transformers" or self.device == "cpu"):
            raise InvalidParameterError(
                "quantization",
                self.quantization,
                "'none' unless vLLM serves on a GPU",
                reason=(
                    "bitsandbytes quantizes on CUDA only; this server would run "
                    f"engine={self.engine!r} on device={self.device!r}"
                ),
            )
        if self.max_lora_rank not in VLLM_LORA_RANKS:
            raise InvalidParameterError(
                "max_lora_rank", self.max_lora_rank, f"one of {VLLM_LORA_RANKS}"
            )
        if self.max_cpu_loras is not None and self.max_cpu_loras < self.max_loras:
            raise InvalidParameterError(
                "max_cpu_loras",
                self.max_cpu_loras,
                f"at least max_loras={self.max_loras}",
            )
        if self.storage_dir is not None and Path(self.storage_dir).expanduser().is_file():
            raise InvalidParameterError("storage_dir", self.storage_dir, "a folder, not a file")

    # ------------------------------------------------------------- derived values
    @property
    def storage_path(self) -> Path:
        """``storage_dir``, or ``<user data dir>/nip/server``."""
        if self.storage_dir is not None:
            return Path(self.storage_dir).expanduser()
        import platformdirs

        return Path(platformdirs.user_data_dir("nip")) / "server"

    @property
    def resolved_device(self) -> Literal["cuda", "cpu"]:
        """``device``, with auto meaning cuda when an NVIDIA driver is installed."""
        if self.device != "auto":
            return self.device
        return "cuda" if shutil.which("nvidia-smi") else "cpu"

    @property
    def resolved_gpu_memory_utilization(self) -> float:
        if self.gpu_memory_utilization is not None:
            return self.gpu_memory_utilization
        return 0.9 if self.gpu_sharing == "pause" else 0.5

    def model_folder(self) -> Path:
        """The base model's folder, an embedded model converted once, offline
        (:class:`ModelNotFoundError` for neither)."""
        from nip.backends.local.model_store import ensure_local_model

        return ensure_local_model(self.model)

    @property
    def base_model_name(self) -> str:
        """The name clients use for the base model."""
        return self.served_model_name or Path(self.model).name


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only (``localhost``, 127.x, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name (or "" = every interface): assume it is reachable


def check_exposure(host: str, api_key: str | None) -> None:
    """Refuse (:class:`InsecureServerError`) to serve beyond loopback without a bearer token."""
    if not is_loopback(host) and not api_key:
        raise InsecureServerError(
            f"refusing to listen on {host!r} without a bearer token: anyone who can reach it "
            f"could train and query models. Pass --api-key or set {API_KEY_ENV} (clients send "
            f"it as 'Authorization: Bearer ...' and read it from {API_KEY_ENV} too), or listen "
            "on 127.0.0.1 and tunnel (ssh -L)."
        )
