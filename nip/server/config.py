"""Settings of ``nip serve``: where it listens, which engine serves the model, how GPUs are shared.
The bearer token is not a field (``--api-key`` or ``$NIP_SERVER_API_KEY`` only), so a saved
configuration never holds a secret."""

from __future__ import annotations

import ipaddress
import shutil
from pathlib import Path
from typing import Literal

from pydantic import Field

from nip.backends.local.vllm_python import VLLM_LORA_RANKS
from nip.backends.self_hosted import API_KEY_ENV
from nip.errors import InvalidParameterError, NipError
from nip.parameters._base import BaseParameters
from nip.parameters.agents import DEFAULT_LOCAL_MODEL

EngineKind = Literal["auto", "vllm", "transformers", "none"]
GpuSharing = Literal["fraction", "pause"]
Device = Literal["auto", "cuda", "cpu"]
Quantization = Literal["none", "bitsandbytes"]


class InsecureServerError(NipError):
    """The server would listen beyond this machine without a bearer token."""


class ServerConfig(BaseParameters):
    """Settings of the language-model server (``nip serve``)."""

    host: str = Field("127.0.0.1", description="Interface to listen on (loopback by default).")
    port: int = Field(5000, description="Port of the server's API.", ge=0, le=65535)
    storage_dir: str | None = Field(
        None, description="Files, jobs, adapters and logs (None: <user data dir>/nip/server)."
    )
    model: str = Field(
        DEFAULT_LOCAL_MODEL,
        description="Base model: a Hugging Face model folder or an embedded model.",
    )
    served_model_name: str | None = Field(
        None, description="The name clients use for the base model (None: the model folder's name)."
    )
    engine: EngineKind = Field(
        "auto",
        description="Inference engine: vllm, transformers, none, or auto (vLLM with a GPU, else "
        "transformers).",
    )
    device: Device = Field(
        "auto", description="Where inference runs: cuda, cpu or auto (detected)."
    )
    vllm_python: str | None = Field(
        None, description="Interpreter with vLLM installed (None: the one running the server)."
    )
    vllm_port: int = Field(
        8000, description="Port vLLM listens on, on loopback (0: any free port).", ge=0, le=65535
    )
    vllm_startup_timeout_s: float = Field(
        900.0, description="Give up on a vLLM start that is not ready by then.", gt=0
    )
    vllm_max_restarts: int = Field(
        3, description="Restarts of a crashed vLLM before giving up.", ge=0
    )
    max_lora_rank: int = Field(64, description="Largest LoRA rank vLLM can serve.")
    max_loras: int = Field(4, description="Adapters vLLM can use in one batch.", ge=1)
    max_cpu_loras: int | None = Field(
        None, description="Adapters vLLM keeps in CPU memory (None: 4 x max_loras).", ge=1
    )
    gpu_sharing: GpuSharing = Field(
        "fraction",
        description="fraction: vLLM keeps a share of GPU memory while jobs train; pause: vLLM "
        "sleeps while jobs train.",
    )
    gpu_memory_utilization: float | None = Field(
        None,
        description="vLLM's share of GPU memory (None: 0.5 with fraction, 0.9 with pause).",
        gt=0.0,
        le=1.0,
    )
    tensor_parallel_size: int = Field(1, description="GPUs one vLLM replica spans.", ge=1)
    data_parallel_size: int = Field(1, description="vLLM replicas behind one endpoint.", ge=1)
    dtype: str = Field(
        "auto",
        description="vLLM's --dtype (auto, bfloat16, float16, float32); auto is float32 on a CPU "
        "without native bfloat16 (emulated it is several times slower), or NIP_CPU_DTYPE.",
    )
    quantization: Quantization = Field(
        "none",
        description="vLLM's --quantization for the served weights: none or bitsandbytes (GPU "
        "only).",
    )
    max_model_len: int | None = Field(None, description="vLLM's --max-model-len.", ge=1)
    enforce_eager: bool = Field(False, description="vLLM's --enforce-eager (faster start, slower).")
    vllm_args: list[str] = Field(
        default_factory=list, description="Extra vLLM command-line arguments."
    )
    cpu_kv_cache_gib: int = Field(
        1, description="KV cache of vLLM's CPU build, in GiB (VLLM_CPU_KVCACHE_SPACE).", ge=1
    )
    inference_devices: str | None = Field(
        None, description="CUDA_VISIBLE_DEVICES of vLLM (None: inherited)."
    )
    training_devices: str | None = Field(
        None, description="CUDA_VISIBLE_DEVICES of training jobs (None: inherited)."
    )
    max_concurrent_jobs: int = Field(1, description="Fine-tuning jobs that train at once.", ge=1)
    training_processes: int = Field(
        1, description="Processes per job; above 1, jobs run under accelerate launch.", ge=1
    )
    accelerate_config: str | None = Field(
        None, description="An accelerate config file for training jobs (implies accelerate launch)."
    )
    poll_interval_s: float = Field(1.0, description="How often running jobs are checked.", gt=0)

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
