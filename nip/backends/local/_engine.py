"""The model side of :class:`~nip.backends.local.LocalBackend`; runs only in its worker thread.

Everything that touches torch, the tokenizer or the PEFT model is called from one thread, so
adapter switching never races with generation. Every adapter folder is loaded once into one
PEFT model, keyed by the hash of its files; a stack is served by activating its predecessors
with it (LoRA updates add up: ``W + delta_1 + ... + delta_k``), without a base-model copy.
"""

from __future__ import annotations

import contextlib
import inspect
import random
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache, GenerationConfig

from nip.backends._types import Completion, GenerationRequest, GenerationResult, TokenUsage
from nip.backends.local._memory import release_free_memory
from nip.backends.local._prefix_cache import PrefixCache
from nip.backends.local._quiet import quiet_libraries
from nip.backends.local._sampling import RowSampler, RowSettings, RowStop
from nip.backends.local.adapters import AdapterLayer, AdapterStack
from nip.backends.local.model_store import ensure_local_model
from nip.errors import GenerationError, ModelNotFoundError
from nip.utils.imports import heavy_imports
from nip.utils.precision import cpu_dtype
from nip.utils.seeding import derive_seed


@dataclass(frozen=True)
class BatchReport:
    """What one call of :meth:`Engine.run` did: one result (or the error to raise) per request, in
    order; ``model.generate`` calls; completion tokens; seconds in ``generate``; prompt tokens, and
    of those the ones whose keys and values came from the prefix cache."""

    results: list[GenerationResult | BaseException]
    generate_calls: int
    completion_tokens: int
    seconds: float
    prompt_tokens: int = 0
    reused_prompt_tokens: int = 0


@dataclass(frozen=True)
class _Prepared:
    index: int
    request: GenerationRequest
    prompt_ids: list[int]
    rows: list[RowSettings]


def _cache_of(output) -> DynamicCache:
    """The key-value cache a forward pass or ``generate`` returned (under either name)."""
    cache = getattr(output, "cache", None)
    return cache if cache is not None else output.past_key_values


def resolve_device(device: str) -> torch.device:
    """``"auto"`` is CUDA when available, else CPU; anything else is passed to torch."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def resolve_dtype(dtype: str | torch.dtype, device: torch.device) -> torch.dtype:
    """``"auto"`` is bfloat16 on a GPU that supports it, else float32 (exact on every CPU),
    or on a CPU what ``NIP_CPU_DTYPE`` says."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float32
        return getattr(torch, cpu_dtype(fast=False))
    resolved = getattr(torch, dtype, None)
    if not isinstance(resolved, torch.dtype):
        raise GenerationError(f"Unknown dtype {dtype!r}; use 'auto', 'float32' or 'bfloat16'.")
    return resolved


class Engine:
    """A loaded base model with its tokenizer and LoRA adapters.

    Args:
        model: Model name or folder (see :func:`~nip.backends.local.ensure_local_model`).
        device: ``"auto"``, ``"cpu"``, ``"cuda"``, ``"cuda:1"``...
        dtype: ``"auto"``, a torch dtype or its name.
        cache_dir: Cache root for converted models.
        default_max_tokens: Token limit of requests that set none.
        stop: When set (from any thread), running generation ends at the next token.
        prefix_cache_mb: Memory for reusable prompt keys and values (0: none;
            :mod:`nip.backends.local._prefix_cache`).
    """

    def __init__(
        self,
        model: str,
        *,
        device: str = "auto",
        dtype: str | torch.dtype = "auto",
        cache_dir: str | Path | None = None,
        default_max_tokens: int = 512,
        stop: threading.Event | None = None,
        prefix_cache_mb: float = 0.0,
    ):
        self.stop = stop or threading.Event()
        self.prefix_cache = (
            PrefixCache(int(prefix_cache_mb * 2**20)) if prefix_cache_mb > 0 else None
        )
        self.folder = ensure_local_model(model, cache_dir)
        self.device = resolve_device(device)
        self.dtype = resolve_dtype(dtype, self.device)
        self.default_max_tokens = default_max_tokens
        with quiet_libraries():
            self.tokenizer = AutoTokenizer.from_pretrained(self.folder, local_files_only=True)
            base = AutoModelForCausalLM.from_pretrained(
                self.folder, dtype=self.dtype, local_files_only=True
            )
        if not getattr(self.tokenizer, "chat_template", None):
            raise GenerationError(f"The model in {self.folder} has no chat template.")
        # WordPiece's space clean-up strips spaces before punctuation from a BPE model's text;
        # transformers >= 5.17 skips it and warns at the first decode, earlier versions apply
        # it. Off: the model's own text, the same under every version, and no warning.
        self.tokenizer.clean_up_tokenization_spaces = False
        self.base = base.to(self.device).eval()
        # The weights as loaded, before PEFT wraps any layer: a training job in this process
        # builds its model on these very tensors (see LocalBackend.loaded_base_weights).
        self.base_weights: Mapping[str, torch.Tensor] = MappingProxyType(
            dict(self.base.state_dict())
        )
        self.peft_model = None  # a PeftModel wrapping self.base once an adapter is loaded
        self._layer_keys: dict[str, str] = {}  # adapter fingerprint -> peft key
        self._name_layers: dict[str, tuple[str, ...]] = {}  # name -> fingerprints it uses
        self._adapter_counter = 0
        self.eos_ids = self._stop_token_ids()
        pad = self.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else min(self.eos_ids)
        self.max_positions = getattr(self.base.config, "max_position_embeddings", None)
        # transformers 5 renamed the key-value cache argument; the old name warns there.
        forward = inspect.signature(type(self.base).forward).parameters
        self._cache_kwarg = "cache" if "cache" in forward else "past_key_values"
        self._entropy = random.SystemRandom()
        release_free_memory(generation=None)  # what converting and loading freed

    def run(
        self, requests: list[GenerationRequest], adapters: Mapping[str, AdapterStack]
    ) -> BatchReport:
        """Generate every request, one ``model.generate`` per model or adapter; the results in
        request order, with counts. ``adapters``: the LoRA stacks by model name (every other
        ``model`` is a base name)."""
        groups: dict[str | None, list[int]] = {}
        for index, request in enumerate(requests):
            model = request.model if request.model in adapters else None
            groups.setdefault(model, []).append(index)
        results: list[GenerationResult | BaseException | None] = [None] * len(requests)
        calls, tokens, seconds, prompt_tokens = 0, 0, 0.0, 0
        reused_before = self.prefix_cache.reused_tokens if self.prefix_cache else 0
        for adapter, members in groups.items():
            prepared = []
            for index in members:
                try:
                    prepared.append(self._prepare(index, requests[index]))
                except GenerationError as error:
                    results[index] = error
            if not prepared:
                continue
            stack = adapters.get(adapter) if adapter else None
            try:
                with self._activate(adapter, stack):
                    start = time.perf_counter()
                    done = self._generate(prepared, stack.fingerprint if stack else "base")
                    seconds += time.perf_counter() - start
            except GenerationError as error:
                done = [(p.index, error) for p in prepared]
            except Exception as error:
                failure = GenerationError(f"Local generation failed: {error!r}")
                failure.__cause__ = error
                done = [(p.index, failure) for p in prepared]
            else:
                calls += 1
                prompt_tokens += sum(len(p.prompt_ids) * len(p.rows) for p in prepared)
            for index, result in done:
                results[index] = result
                if isinstance(result, GenerationResult):
                    tokens += result.usage.completion_tokens
        reused = (self.prefix_cache.reused_tokens if self.prefix_cache else 0) - reused_before
        return BatchReport(results, calls, tokens, seconds, prompt_tokens, reused)  # type: ignore[arg-type]

    def _prepare(self, index: int, request: GenerationRequest) -> _Prepared:
        messages = [dict(m) for m in request.messages]
        text = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=False
        )
        prompt_ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        limit = request.max_tokens if request.max_tokens is not None else self.default_max_tokens
        if limit < 1 or request.n < 1:
            raise GenerationError(
                f"max_tokens and n must be at least 1 (got {request.max_tokens}, {request.n})."
            )
        if self.max_positions is not None and len(prompt_ids) + limit > self.max_positions:
            limit = self.max_positions - len(prompt_ids)
            if limit < 1:
                raise GenerationError(
                    f"The prompt has {len(prompt_ids)} tokens; the model takes at most "
                    f"{self.max_positions}."
                )
        greedy = request.temperature == 0 or (request.temperature is None and request.top_p is None)
        base_seed = request.seed if request.seed is not None else self._entropy.getrandbits(62)
        # Greedy completions are identical, so one row serves all n of them.
        rows = [
            RowSettings(
                greedy=greedy,
                temperature=1.0 if request.temperature is None else request.temperature,
                top_p=1.0 if request.top_p is None else request.top_p,
                repetition_penalty=request.repetition_penalty or 1.0,
                max_new_tokens=limit,
                seed=derive_seed("local-backend", base_seed, sample),
            )
            for sample in range(1 if greedy else request.n)
        ]
        return _Prepared(index, request, prompt_ids, rows)

    def _generate(
        self, prepared: list[_Prepared], model_key: str
    ) -> list[tuple[int, GenerationResult]]:
        rows = [row for p in prepared for row in p.rows]
        prompts = [p.prompt_ids for p in prepared for _ in p.rows]
        width = max(len(ids) for ids in prompts)
        pad_lengths = [width - len(ids) for ids in prompts]
        input_ids = torch.tensor(
            [[self.pad_id] * pad + ids for pad, ids in zip(pad_lengths, prompts, strict=True)],
            device=self.device,
        )
        attention_mask = torch.tensor(
            [[0] * pad + [1] * len(ids) for pad, ids in zip(pad_lengths, prompts, strict=True)],
            device=self.device,
        )
        limits = [row.max_new_tokens for row in rows]
        reuse = self.prefix_cache is not None and min(map(len, prompts)) > 1
        config = GenerationConfig(
            return_dict_in_generate=reuse,
            max_new_tokens=max(limits),
            do_sample=False,
            num_beams=1,
            repetition_penalty=1.0,
            no_repeat_ngram_size=0,
            pad_token_id=self.pad_id,
            eos_token_id=sorted(self.eos_ids),
        )
        model = self.peft_model if self.peft_model is not None else self.base
        with torch.inference_mode():
            reused = {}
            if reuse:
                reused[self._cache_kwarg] = self._prefill(model, model_key, prompts, pad_lengths)
            output = model.generate(
                input_ids=input_ids,
                attention_mask=attention_mask,
                **reused,
                generation_config=config,
                logits_processor=[RowSampler(rows, pad_lengths, self.device)],
                stopping_criteria=[RowStop(limits, width, self.stop, self.device)],
            )
        sequences = output.sequences if reuse else output
        generated = sequences[:, width:].tolist()
        if reuse:
            self._remember(model_key, prompts, generated, pad_lengths, _cache_of(output))
        done, cursor = [], 0
        for p in prepared:
            completions, used = [], 0
            for row in p.rows:
                completion, count = self._completion(generated[cursor], row.max_new_tokens)
                completions.append(completion)
                used += count
                cursor += 1
            if len(completions) < p.request.n:  # greedy: one row, n identical completions
                completions *= p.request.n
                used *= p.request.n
            usage = TokenUsage(prompt_tokens=len(p.prompt_ids), completion_tokens=used)
            result = GenerationResult(tuple(completions), usage=usage, model=p.request.model)
            done.append((p.index, result))
        return done

    def _prefill(
        self, model, model_key: str, prompts: list[list[int]], pad_lengths: list[int]
    ) -> DynamicCache:
        """The batch's keys and values for every prompt token but the last, left-padded: each row
        reuses its longest cached prefix and runs only the rest, unpadded."""
        rows: list[list[tuple[torch.Tensor, torch.Tensor]]] = []
        for ids in prompts:
            hit = self.prefix_cache.lookup(model_key, ids)
            start = hit.tokens if hit is not None else 0
            cache = DynamicCache(ddp_cache_data=hit.layers) if hit is not None else DynamicCache()
            todo = torch.tensor([ids[start:-1]], device=self.device)
            if todo.shape[1]:
                # Only the keys and values are wanted: skip the vocabulary projection
                # (a fifth of the model's arithmetic) for all but one position.
                output = model(
                    input_ids=todo, use_cache=True, logits_to_keep=1, **{self._cache_kwarg: cache}
                )
                cache = _cache_of(output)
            rows.append([(layer.keys, layer.values) for layer in cache.layers])
        padded = [
            [[torch.nn.functional.pad(t, (0, 0, pad, 0)) for t in layer] for layer in row]
            for row, pad in zip(rows, pad_lengths, strict=True)
        ]  # each row's layers' keys and values; concatenated along the batch, layer by layer
        by_layer = zip(*padded, strict=True)
        layers = [tuple(map(torch.cat, zip(*layer, strict=True))) for layer in by_layer]
        return DynamicCache(ddp_cache_data=layers)

    def _remember(
        self,
        model_key: str,
        prompts: list[list[int]],
        generated: list[list[int]],
        pad_lengths: list[int],
        cache: DynamicCache,
    ) -> None:
        """Keep each row's prompt and completion keys and values for later rounds."""
        width = len(prompts[0]) + pad_lengths[0]
        cached = cache.get_seq_length()  # the last generated token has no keys yet
        for row, (prompt, tokens, pad) in enumerate(
            zip(prompts, generated, pad_lengths, strict=True)
        ):
            stop = next((i for i, t in enumerate(tokens) if t in self.eos_ids), len(tokens) - 1)
            end = min(width + stop + 1, cached)
            kept = prompt + tokens[: end - width]
            layers = [
                (layer.keys[row : row + 1, :, pad:end], layer.values[row : row + 1, :, pad:end])
                for layer in cache.layers
            ]
            self.prefix_cache.store(model_key, kept, layers)

    def _completion(self, tokens: list[int], limit: int) -> tuple[Completion, int]:
        tokens = tokens[:limit]  # rows stopped early are padded to the longest row
        stop = next((i for i, t in enumerate(tokens) if t in self.eos_ids), None)
        if stop is None:
            # Cut at the token limit, the last tokens may hold only part of a character's
            # bytes; like vLLM's detokenizer, leave that part out instead of writing U+FFFD.
            text = self.tokenizer.decode(tokens, skip_special_tokens=True).rstrip("\ufffd")
            return Completion(text=text, finish_reason="length"), len(tokens)
        text = self.tokenizer.decode(tokens[:stop], skip_special_tokens=True)
        return Completion(text=text, finish_reason="stop"), stop + 1

    def _stop_token_ids(self) -> set[int]:
        configured = self.base.generation_config.eos_token_id
        ids = {configured} if isinstance(configured, int) else set(configured or ())
        if self.tokenizer.eos_token_id is not None:
            ids.add(self.tokenizer.eos_token_id)
        # ChatML models end a turn with <|im_end|> even when their eos token is another one.
        im_end = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        if isinstance(im_end, int) and im_end != self.tokenizer.unk_token_id:
            ids.add(im_end)
        if not ids:
            raise GenerationError(f"The model in {self.folder} defines no end-of-turn token.")
        return ids

    @contextlib.contextmanager
    def _activate(self, adapter: str | None, stack: AdapterStack | None) -> Iterator[None]:
        """Make the base model (``adapter`` None) or the named adapter (stack) generate."""
        if adapter is None or stack is None:
            if self.peft_model is None:
                yield
            else:
                with self.peft_model.disable_adapter():
                    yield
            return
        keys = self._load_stack(adapter, stack)
        # PeftModel keeps one "active" adapter for its config; the LoRA layers take a list.
        self.peft_model.set_adapter(keys[-1], inference_mode=True)
        self.peft_model.base_model.set_adapter(keys, inference_mode=True)
        yield

    def _load_stack(self, name: str, stack: AdapterStack) -> list[str]:
        """Load every layer of ``stack`` not loaded yet; returns their PEFT keys in order."""
        keys = [self._load_layer(name, layer) for layer in stack.layers]
        used = tuple(layer.fingerprint for layer in stack.layers)
        before = self._name_layers.get(name, ())
        self._name_layers[name] = used
        # Re-registered with new weights: drop layers that no name uses any more.
        still_used = {f for layers in self._name_layers.values() for f in layers}
        for fingerprint in set(before) - still_used:
            self.peft_model.delete_adapter(self._layer_keys.pop(fingerprint))
        return keys

    def _load_layer(self, name: str, layer: AdapterLayer) -> str:
        key = self._layer_keys.get(layer.fingerprint)
        if key is not None:
            return key
        with heavy_imports():
            from peft import PeftModel

        self._adapter_counter += 1
        key = f"adapter_{self._adapter_counter}"  # peft keys become module names: no dots
        try:
            with quiet_libraries():
                if self.peft_model is None:
                    self.peft_model = PeftModel.from_pretrained(
                        self.base, str(layer.path), adapter_name=key, is_trainable=False
                    )
                    self.peft_model.eval()
                else:
                    self.peft_model.load_adapter(
                        str(layer.path), adapter_name=key, is_trainable=False
                    )
        except Exception as error:
            raise ModelNotFoundError(
                f"Could not load the LoRA adapter {name!r} from {layer.path}: {error}"
            ) from error
        self._layer_keys[layer.fingerprint] = key
        return key
