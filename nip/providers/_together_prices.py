"""Together AI's published prices as nip recorded them, for the dry run, and whether it
fine-tunes a model (see :mod:`nip.providers.together`)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from types import MappingProxyType

from nip.providers._provider import Prices
from nip.providers._together_api import API_KEY_ENV, _sdk

#: The day these prices were recorded (training tokens = n_epochs x the file's tokens). Check
#: them before a paid run; correct them with ``ExperimentSettings(prices_usd_per_1m=...)`` and
#: ``estimate_cost(fine_tuning_prices=...)``.
PRICES_READ_ON = "2026-11-27"
PRICES_SOURCE = "together.ai/pricing; docs.together.ai/docs/fine-tuning/pricing"

#: Serverless inference in USD per 1M ``(input, output)`` tokens, by model (a LoRA adapter is
#: priced as its base model; ``-Reference`` models at Together's per-size rates).
INFERENCE_USD_PER_1M: Mapping[str, tuple[float, float]] = MappingProxyType(
    {
        "meta-llama/Meta-Llama-3.1-8B-Instruct-Reference": (0.20, 0.20),
        "meta-llama/Meta-Llama-3.1-8B-Instruct-Turbo": (0.18, 0.18),
        "meta-llama/Meta-Llama-3.1-70B-Instruct-Reference": (0.90, 0.90),
        "meta-llama/Llama-3.3-70B-Instruct-Turbo": (0.88, 0.88),
        "Qwen/Qwen2.5-72B-Instruct": (1.20, 1.20),
    }
)

#: Fine-tuning in USD per 1M training tokens, by model-size bracket (upper bound in billions
#: of parameters), then (method, LoRA) -> rate.
FINE_TUNING_USD_PER_1M: tuple[tuple[float, str, Mapping[tuple[str, bool], float]], ...] = (
    (16, "up to 16B", {("supervised", True): 0.48, ("supervised", False): 0.54,
                       ("dpo", True): 1.20, ("dpo", False): 1.35}),
    (69, "16.1-69B", {("supervised", True): 1.50, ("supervised", False): 1.65,
                      ("dpo", True): 3.75, ("dpo", False): 4.12}),
    (100, "69.1-100B", {("supervised", True): 2.90, ("supervised", False): 3.20,
                        ("dpo", True): 7.25, ("dpo", False): 8.00}),
)  # fmt: skip

_SIZE = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?)[bB](?![a-zA-Z])")


def model_size_b(model: str) -> float | None:
    """Billions of parameters, read from a model's name (``...-8B-...`` -> 8; a mixture of
    experts' total, ``235B-A22B`` -> 235); None when the name does not say."""
    found = _SIZE.search(model.removeprefix("ft:"))
    return float(found.group(1)) if found else None


def _bracket(model: str) -> tuple[str, Mapping[tuple[str, bool], float]] | None:
    size = model_size_b(model)
    if size is None:
        return None
    return next(((name, rates) for top, name, rates in FINE_TUNING_USD_PER_1M if size <= top), None)


def _inference(model: str) -> tuple[float, float] | None:
    return INFERENCE_USD_PER_1M.get(model.removeprefix("ft:"))


def _priced_as(model: str) -> str | None:
    """The base model a fine-tuned ``<account>/<base model>-<suffix>-<id>`` is billed as (the
    base with or without its organisation); None for a priced model or an unknown base."""
    if model in INFERENCE_USD_PER_1M or "/" not in model:
        return None
    name = model.split("/", 1)[1]
    bases = [
        base
        for base in INFERENCE_USD_PER_1M
        if name.startswith((f"{base}-", f"{base.rsplit('/', 1)[-1]}-"))
    ]
    return max(bases, key=len, default=None)


def _training(model: str, method: str, lora: bool) -> float | None:
    bracket = _bracket(model)
    return None if bracket is None else bracket[1].get((method, lora))


def _notes(model: str) -> list[str]:
    bracket = _bracket(model)
    size = (
        f"{model!r} is priced in the {bracket[0]} size bracket (its size read from its name)"
        if bracket
        else f"{model!r} has no size in its name, so its fine-tuning is not priced"
    )
    return [
        f"Together AI: prices recorded {PRICES_READ_ON} from {PRICES_SOURCE}; {size}; a job's "
        "training tokens are its file's tokens times n_epochs (no validation file); a "
        "fine-tuned adapter is priced as its base model, served serverless (a dedicated "
        f"endpoint, billed by the minute, is not counted); {fine_tunable(model)}"
    ]


def fine_tunable(model: str) -> str:
    """Whether Together fine-tunes ``model``, as its limits say (one free request with
    ``$TOGETHER_API_KEY``)."""
    key = os.environ.get(API_KEY_ENV)
    if not key:
        return f"whether Together fine-tunes {model} is not checked ({API_KEY_ENV} not set)"
    together = _sdk()
    client = together.Together(api_key=key, max_retries=1, timeout=10.0)
    try:
        limits = client.fine_tuning.model_limits(model_name=model)
    except together.NotFoundError:
        return f"Together AI does not fine-tune {model}: freeze its agents or choose another"
    except together.APIError as error:
        return f"whether Together fine-tunes {model} could not be checked ({type(error).__name__})"
    finally:
        client.close()
    return f"Together fine-tunes {model} (LoRA rank up to {limits.lora_training.max_rank})"


PRICES = Prices(
    source=PRICES_SOURCE,
    read_on=PRICES_READ_ON,
    inference=_inference,
    training=_training,
    notes=_notes,
    priced_as=_priced_as,
)
