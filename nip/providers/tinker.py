"""Tinker (Thinking Machines): open-weight models sampled and LoRA-trained through the
``tinker`` SDK (``pip install 'nip[tinker]'``, ``$TINKER_API_KEY``), and its prices.

Generation goes through the SDK's ``SamplingClient`` (one per model: a base model by name,
an adapter by its ``tinker://.../sampler_weights/...`` path), not Tinker's OpenAI-compatible
endpoint: the SDK answers with the sampled tokens themselves (counted exactly, as Tinker
bills them: the prompt once, each sample's tokens), takes the prompt as tokens rendered with
the model's own chat template (its tokenizer, ``get_tokenizer()``), the one the training
renders with, and serves a just-saved adapter at once, with no endpoint of its own (the
OpenAI-compatible endpoint is in beta). An agent's ``temperature``, ``top_p``,
``max_tokens_per_message`` and the request's seed are sent (``SamplingParams``);
``repetition_penalty`` has no Tinker counterpart and is refused before anything is sent.
The model is checked against the server's list (``RestClient.get_server_capabilities``)
before the first dialogue. Transient failures are retried by nip's retry policy
(:mod:`nip.backends._retry`); a refusal ends the request at once.

Training is nip's own loop driving Tinker (:mod:`nip.jobs.tinker`).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from nip.backends import capability
from nip.backends._retry import RetryableError, RetryPolicy, call_with_retries, error_for_status
from nip.backends._types import Completion, GenerationRequest, GenerationResult, TokenUsage
from nip.errors import InvalidParameterError
from nip.jobs._types import FineTuneSpec
from nip.jobs.tinker import TinkerClients, TinkerFineTuneBackend, check_model, connect
from nip.jobs.tinker_data import chat_tokens
from nip.parameters import PROVIDER_FACTS
from nip.providers._provider import Prices, Provider


class TinkerChatBackend:
    """Chat generation through Tinker's ``SamplingClient``s (see the module docstring).

    Args:
        base_model: The agents' base model (checked before the first dialogue).
        clients: Tinker's clients (default: :func:`~nip.jobs.tinker.connect`).
        train: Its agents are trained: the model must be one Tinker trains, too.
        retry_policy: How transient failures are retried.
    """

    name = "tinker"

    def __init__(
        self,
        base_model: str,
        clients: TinkerClients | None = None,
        *,
        train: bool = False,
        retry_policy: RetryPolicy | None = None,
    ):
        self.base_model = base_model
        self.train = train
        self._clients = clients
        self._policy = retry_policy or RetryPolicy()
        self._rng = random.Random()  # jitter only
        self._samplers: dict[str, Any] = {}
        self._checked = False

    @property
    def clients(self) -> TinkerClients:
        """Tinker's clients, made when first needed (a missing key is refused then)."""
        if self._clients is None:
            self._clients = connect()
        return self._clients

    async def wait_for_ready(self, timeout_s: float | None = None) -> None:
        """Refuse a model Tinker does not offer (or cannot train, for trained agents) before
        anything is sampled."""
        if not self._checked:
            await check_model(self.clients, self.base_model, train=self.train)
            self._checked = True

    async def sampler(self, model: str) -> Any:
        """The sampling client of ``model``: a base model or a ``tinker://`` sampler path."""
        if model not in self._samplers:  # one client per model, however many ask at once
            # A base model by name, an adapter by its sampler path.
            source = "model_path" if model.startswith("tinker://") else "base_model"
            opening = self.clients.service.create_sampling_client(**{source: model})
            self._samplers[model] = asyncio.ensure_future(opening)
        try:
            return await self._samplers[model]
        except Exception:
            self._samplers.pop(model, None)  # asked again, it is opened again
            raise

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        from tinker import types

        started = time.monotonic()
        sampler = await self.sampler(request.model)
        tokenizer = sampler.get_tokenizer()
        prompt = chat_tokens(tokenizer, request.messages, prompt=True)
        params = types.SamplingParams(
            max_tokens=request.max_tokens,
            seed=request.seed,
            temperature=1.0 if request.temperature is None else request.temperature,
            top_p=1.0 if request.top_p is None else request.top_p,
        )

        async def attempt() -> Any:
            try:
                return await sampler.sample(
                    prompt=types.ModelInput.from_ints(prompt),
                    num_samples=request.n,
                    sampling_params=params,
                )
            except Exception as error:
                raise _nip_error(error) from error

        response, attempts = await call_with_retries(
            attempt, self._policy, self._rng, what=f"Tinker sampling from {request.model!r}"
        )
        sequences = response.sequences
        completions = tuple(
            Completion(tokenizer.decode(s.tokens, skip_special_tokens=True), s.stop_reason)
            for s in sequences
        )
        usage = TokenUsage(len(prompt), sum(len(s.tokens) for s in sequences))
        return GenerationResult(
            completions,
            usage=usage,
            latency_s=time.monotonic() - started,
            model=request.model,
            attempts=attempts,
        )

    async def aclose(self) -> None:
        self._samplers.clear()

    def __repr__(self) -> str:
        return f"TinkerChatBackend(base_model={self.base_model!r})"


def _nip_error(error: Exception) -> Exception:
    """The SDK's exception as nip's: retryable (rate limits, server errors, time-outs, lost
    connections) or final (a refusal, a bad key, an unknown model)."""
    import tinker

    if isinstance(error, tinker.APIStatusError):
        return error_for_status(error.status_code, str(error.message))
    if isinstance(error, tinker.APITimeoutError):
        return RetryableError(f"Tinker: {error}", cause="timeout")
    if isinstance(error, tinker.APIConnectionError):
        return RetryableError(f"Tinker: {error}", cause="connection")
    return error


def _chat(params, settings) -> TinkerChatBackend:
    if params.repetition_penalty is not None:
        raise InvalidParameterError(
            "repetition_penalty",
            params.repetition_penalty,
            "None for a Tinker agent",
            reason="Tinker's SamplingParams have no repetition penalty",
        )
    return TinkerChatBackend(params.model_name, train=not params.freeze_agent)


def _fine_tune(params, settings, chat) -> TinkerFineTuneBackend:
    sampling = capability(chat, TinkerChatBackend) if chat is not None else None
    if sampling is None:
        sampling = TinkerChatBackend(params.model_name)
    root = Path(settings.run_dir) if settings.run_dir else Path.cwd() / "runs" / "adhoc"
    return TinkerFineTuneBackend(root / "jobs", sampling)


def job_settings(spec: FineTuneSpec) -> dict[str, Any]:
    """What a Tinker job trains with (the run plan shows it; the loop sends it step by step)."""
    return {
        "base_model": spec.base_model,
        "method": spec.method,
        "lora_rank": spec.lora_rank,
        "num_epochs": spec.num_epochs,
        "batch_size": spec.batch_size,
        "learning_rate": spec.learning_rate,
        "continues_from_previous_state": spec.previous_adapter is not None,
        **({"dpo_beta": spec.dpo_beta} if spec.method == "dpo" else {}),
    }


# ------------------------------------------------------------------------------ prices
#: Tinker bills per 1M tokens, by model: prefill (prompt tokens), sampling (generated
#: tokens) and training (tokens through forward_backward). These figures are NOT read from
#: Tinker's page (thinkingmachines.ai/tinker, its pricing table; no network where this was
#: written): Qwen3-8B's are as reported in January 2026 by third parties. Check them there
#: before a paid run and correct them with ``ExperimentSettings(prices_usd_per_1m=...)`` and
#: ``estimate_cost(fine_tuning_prices=...)``; an unlisted model is left unpriced.
PRICES_READ_ON = "2026-01 (reported, unverified)"
PRICES_SOURCE = "thinkingmachines.ai/tinker (pricing), as reported by third parties"

#: USD per 1M ``(prefill, sampling, training)`` tokens, by model.
USD_PER_1M: Mapping[str, tuple[float, float, float]] = MappingProxyType(
    {"Qwen/Qwen3-8B": (0.13, 0.40, 0.40)}
)


def _rates(model: str) -> tuple[float, float, float] | None:
    return USD_PER_1M.get(model.removeprefix("ft:"))


def _inference(model: str) -> tuple[float, float] | None:
    rates = _rates(model)
    return None if rates is None else rates[:2]


def _training(model: str, method: str, lora: bool) -> float | None:
    """SFT: the training rate. DPO adds two passes at the prefill rate: the custom loss's
    forward pass and the reference model's log-probabilities."""
    rates = _rates(model)
    if rates is None:
        return None
    prefill, _, train = rates
    return train + 2 * prefill if method == "dpo" else train


def _notes(model: str) -> list[str]:
    priced = "priced" if _rates(model) else "not in nip's table, so not priced"
    return [
        f"Tinker: prices {PRICES_READ_ON} from {PRICES_SOURCE}; {model!r} is {priced}; "
        "an adapter samples at its base model's prices; storage (per GB-month) is not counted"
    ]


PRICES = Prices(
    source=PRICES_SOURCE,
    read_on=PRICES_READ_ON,
    inference=_inference,
    training=_training,
    notes=_notes,
    adapter_prefix="tinker://",
)

PROVIDER = Provider(
    "Tinker",
    PROVIDER_FACTS["Tinker"],
    # Trained agents' backend checks that Tinker trains the model; frozen agents' does not.
    endpoint_key=lambda params: (
        f"tinker:{params.model_name}" + ("" if params.freeze_agent else ":trained")
    ),
    chat=_chat,
    fine_tune=_fine_tune,
    job_settings=job_settings,
    prices=PRICES,
)
