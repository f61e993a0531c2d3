"""Runtime settings of an experiment: where things go and how they run, not what is studied."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

CacheMode = Literal["auto", "on", "off"]
WandbMode = Literal["auto", "online", "offline", "disabled"]
#: The engines of the ``Local`` provider (``nip.backends.local.engines.LOCAL_ENGINES``).
LocalEngine = Literal["transformers", "vllm", "auto"]


@dataclass
class ExperimentSettings:
    """Settings that do not change results (unlike :class:`~nip.parameters.HyperParameters`).

    Attributes:
        run_dir: Where the run's state, rollouts and metrics are saved (None: not saved).
        cache: The response cache: "on", "off", or "auto" (on for every backend but dummy).
        cache_path: The cache's SQLite file (None: ``<user cache dir>/nip/responses.sqlite``).
        max_concurrency: Override every backend's limit on requests in flight.
        show_progress: Show progress bars (they are also off when TQDM_DISABLE is set).
        dummy_latency_s: Simulated latency of the dummy backend.
        wandb_mode: Weights & Biases logging: "auto" (online with a key, else offline),
            "online", "offline" or "disabled". ``WANDB_MODE`` overrides it.
        wandb_project: The W&B project.
        wandb_group: The W&B group of the run (a sweep's cells share one, named after it).
        local_engine: What runs the ``Local`` provider's model: "transformers" in this
            process (the default), "vllm" (a vLLM process started for the run), or "auto"
            (vLLM on a CUDA device where it is installed, else transformers).
        server_ready_timeout_s: How long a trainer (and ``serve``) waits for the
            language-model servers its agents use to be ready.
        serve: The run or sweep owns its servers: it starts the ``nip serve`` its
            ``SelfHosted`` agents need (one per base model), points them at it, and stops it
            when it ends, fails or is killed (``--serve``, :func:`nip.server.serving`).
        serve_config: A :class:`~nip.server.ServerConfig` file (YAML/JSON) the servers that
            ``serve`` starts are built from (None: the defaults).
        servers: The URL of the ``nip serve`` of each base model, by model name (filled in
            by ``serve``; ``SelfHosted`` agents of that model talk to it).
        prices_usd_per_1m: API prices in USD per 1M ``(input, output)`` tokens by model
            (``"ft:gpt-4o-mini"``: no snapshot date), over the providers' published prices.
        gpu_hour_usd: What a GPU-hour of ``nip serve`` costs, pricing its jobs' GPU time in
            the run's spend (None: their cost is unknown; the hours are shown).
        extra: Free-form settings for extensions.
    """

    run_dir: Path | None = None
    cache: CacheMode = "auto"
    cache_path: Path | None = None
    max_concurrency: int | None = None
    show_progress: bool = True
    dummy_latency_s: float = 0.0
    wandb_mode: WandbMode = "auto"
    wandb_project: str = "nip"
    wandb_group: str | None = None
    local_engine: LocalEngine = "transformers"
    server_ready_timeout_s: float = 600.0
    serve: bool = False
    serve_config: Path | None = None
    servers: dict[str, str] = field(default_factory=dict)
    prices_usd_per_1m: dict[str, tuple[float, float]] = field(default_factory=dict)
    gpu_hour_usd: float | None = None
    extra: dict[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.run_dir is not None:
            self.run_dir = Path(self.run_dir)
        if self.cache_path is not None:
            self.cache_path = Path(self.cache_path)
        if self.serve_config is not None:
            self.serve_config = Path(self.serve_config)
        for name, kind in (("cache", CacheMode), ("local_engine", LocalEngine)):
            if getattr(self, name) not in get_args(kind):
                from nip.errors import InvalidParameterError

                *others, last = map(repr, get_args(kind))
                allowed = f"{', '.join(others)} or {last}"
                raise InvalidParameterError(name, getattr(self, name), allowed)
