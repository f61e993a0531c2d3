"""A stand-in for Tinker's SDK clients: a tiny real causal LM on the CPU with a real PEFT LoRA.

It takes and returns the SDK's own ``tinker.types`` objects and futures
(``AwaitableConcurrentFuture``), duck-typing ``ServiceClient``, ``TrainingClient``,
``SamplingClient`` and ``RestClient`` as nip calls them (0.38: awaiting the plain method
names). ``forward_backward`` computes real gradients of the weighted token cross-entropy,
``optim_step`` is AdamW with the ``AdamParams`` sent, checkpoints are the adapter's weights
on disk (``tinker://<run>/weights/<name>``, ``.../sampler_weights/<name>``), and a sampling
client of an adapter samples from the base model with that adapter.

nip reaches it through its one seam, ``NIP_TINKER_CLIENTS=doubles.tinker_standin:clients``
(``tests/`` on the path). Options, by environment variable (so a ``nip run`` subprocess sees
them too):

* ``NIP_TINKER_STANDIN_DIR``: where checkpoints are kept (shared by a killed run and its
  resume); a temporary folder when unset.
* ``NIP_TINKER_STANDIN_FAIL_RUNS``: the first N training runs (counted in that folder) fail
  at their first step, as a job whose request failed on Tinker does.

Every model of :data:`MODELS` is the same tiny Llama (2 layers, a byte-level BPE of 300
tokens and a ChatML template), built from a fixed seed: each process builds the same one.
"""

from __future__ import annotations

import copy
import functools
import itertools
import json
import os
import tempfile
import uuid
import zlib
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import httpx
import tinker
import torch
import torch.nn.functional as F
from tinker import types
from tinker.lib.public_interfaces.api_future import AwaitableConcurrentFuture

# One thread: the tiny model's matrices are small, and on a shared machine more threads than
# cores made each training step ten times slower.
torch.set_num_threads(1)

#: The models the stand-in offers: name -> (sampleable, trainable).
MODELS = {"Qwen/Qwen3-8B": (True, True), "tiny/sample-only": (True, False)}
#: The highest LoRA rank it trains (a higher one is refused, as Tinker refuses).
MAX_RANK = 64
CHATML = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + "
    "'<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
#: What the tiny model says: its tokenizer is trained on these, and it is their bigram model.
REPLIES = (
    "Decision: accept",
    "Decision: reject",
    "Question: does the function return x + 1?",
    "The function returns x + 1, so the code is right.",
)


def _done(value: Any) -> AwaitableConcurrentFuture:
    future: Future = Future()
    future.set_result(value)
    return AwaitableConcurrentFuture(future)


def _turn(reply: str) -> str:
    return f"<|im_start|>assistant\n{reply}<|im_end|>\n"


@functools.cache
def tokenizer() -> Any:
    """The tiny byte-level BPE tokenizer with ChatML (the same in every process)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<|im_start|>", "<|im_end|>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator(REPLIES, trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<pad>")
    tok.chat_template = CHATML
    return tok


def tiny_base() -> Any:
    """A new copy of the tiny Llama: the bigram model of :data:`REPLIES` as ChatML turns.

    Built, not trained, so every machine builds the same weights: one-hot embeddings (the
    hidden size is the vocabulary's), every layer's output projections zero (the residual
    stream stays the token's own embedding) and an output layer of log bigram frequencies
    (scaled by the final RMS norm's factor), so after ``assistant\n`` it writes one of the
    replies, each about as often. Its attention and MLP weights are random (seed 0): a LoRA
    on them changes what it writes.
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = tokenizer()
    vocab = len(tok)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=vocab,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=vocab // 2,
        max_position_embeddings=2048,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    counts = torch.full((vocab, vocab), 1e-5)
    for reply in REPLIES:
        ids = tok(_turn(reply), add_special_tokens=False)["input_ids"]
        for current, following in itertools.pairwise(ids):
            counts[current, following] += 1.0
    with torch.no_grad():
        model.model.embed_tokens.weight.copy_(torch.eye(vocab))
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        bigram = torch.log(counts / counts.sum(1, keepdim=True))
        model.lm_head.weight.copy_(bigram.T / vocab**0.5)
    return model


def with_lora(rank: int, seed: int | None, weights: dict[str, torch.Tensor] | None = None) -> Any:
    """The base model with a new LoRA adapter of ``rank`` (B = 0: it starts as the base), or
    with the adapter ``weights`` saved by a checkpoint."""
    from peft import LoraConfig, get_peft_model, set_peft_model_state_dict

    torch.manual_seed(seed or 0)
    config = LoraConfig(r=rank, lora_alpha=rank, target_modules="all-linear", lora_dropout=0.0)
    model = get_peft_model(tiny_base(), config)
    if weights is not None:
        set_peft_model_state_dict(model, weights)
    return model


def token_logprobs(model: Any, tokens: list[int], targets: list[int]) -> torch.Tensor:
    """log p(targets[i] | tokens[: i + 1]) for each i (with the graph, for gradients)."""
    logits = model(input_ids=torch.tensor([tokens])).logits[0].float()
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(targets)[:, None])[:, 0]


# ----------------------------------------------------------------------------- store
class Store:
    """Where checkpoints are kept, and the count of training runs made."""

    def __init__(self) -> None:
        folder = os.environ.get("NIP_TINKER_STANDIN_DIR") or tempfile.mkdtemp(prefix="tinker-")
        self.root = Path(folder)
        self.root.mkdir(parents=True, exist_ok=True)

    def file(self, path: str) -> Path:
        return self.root / (path.removeprefix("tinker://") + ".pt")

    def save(self, path: str, model: Any, rank: int) -> None:
        from peft import get_peft_model_state_dict

        target = self.file(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        weights = {k: v.detach().clone() for k, v in get_peft_model_state_dict(model).items()}
        torch.save({"rank": rank, "weights": weights}, target)

    def load(self, path: str) -> dict[str, Any]:
        if not self.file(path).exists():
            raise _status_error(tinker.NotFoundError, 404, f"no checkpoint {path}")
        return torch.load(self.file(path))

    def new_run(self) -> tuple[str, bool]:
        """A new training run's id, and whether it is one of the runs set to fail."""
        counter = self.root / "runs.json"
        made = json.loads(counter.read_text()) if counter.exists() else 0
        counter.write_text(json.dumps(made + 1))
        failing = int(os.environ.get("NIP_TINKER_STANDIN_FAIL_RUNS") or 0)
        return f"run-{uuid.uuid4().hex[:12]}", made < failing


def _status_error(kind: type, status: int, message: str) -> Exception:
    request = httpx.Request("POST", "https://tinker.example/api/v1")
    return kind(message, response=httpx.Response(status, request=request), body=None)


# --------------------------------------------------------------------------- clients
class TrainingStandin:
    """A ``TrainingClient``: one LoRA adapter, trained by the steps sent."""

    def __init__(self, store: Store, rank: int, model: Any, run: tuple[str, bool]):
        self.store, self.rank, self.model = store, rank, model
        self.model_id, self._fails = run
        self.model.train()
        params = [p for p in self.model.parameters() if p.requires_grad]
        self._optimizer = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.0)
        self.steps: list[str] = []  # what was sent, in order

    def get_tokenizer(self) -> Any:
        return tokenizer()

    def _forward(self, data: list[types.Datum]) -> tuple[list[torch.Tensor], list[Any]]:
        if self._fails:
            raise tinker.RequestFailedError(
                "the training request failed on the server", "req-1", "server"
            )
        logprobs = [
            token_logprobs(
                self.model, d.model_input.to_ints(), d.loss_fn_inputs["target_tokens"].data
            )
            for d in data
        ]
        outputs = [{"logprobs": types.TensorData.from_torch(lp.detach())} for lp in logprobs]
        return logprobs, outputs

    def forward_backward(
        self, data: list[types.Datum], loss_fn: str, loss_fn_config: Any = None
    ) -> AwaitableConcurrentFuture:
        assert loss_fn == "cross_entropy", loss_fn
        self.steps.append("forward_backward")
        logprobs, outputs = self._forward(data)
        loss = sum(
            -(lp * d.loss_fn_inputs["weights"].to_torch().float()).sum()
            for d, lp in zip(data, logprobs, strict=True)
        )
        loss.backward()
        return _done(
            types.ForwardBackwardOutput(
                loss_fn_output_type="target_token_logprobs",
                loss_fn_outputs=outputs,
                metrics={"loss:sum": float(loss.detach())},
            )
        )

    def forward_backward_custom(self, data: list[types.Datum], loss_fn: Any) -> Any:
        """The custom loss on the log-probabilities, differentiated through the model (the
        SDK sends its gradient as cross-entropy weights: the same gradient)."""
        self.steps.append("forward_backward_custom")
        logprobs, outputs = self._forward(data)
        loss, metrics = loss_fn(data, logprobs)
        loss.backward()
        return _done(
            types.ForwardBackwardOutput(
                loss_fn_output_type="target_token_logprobs",
                loss_fn_outputs=outputs,
                metrics={**metrics, "loss:sum": float(loss.detach())},
            )
        )

    def optim_step(self, adam: types.AdamParams) -> AwaitableConcurrentFuture:
        self.steps.append("optim_step")
        for group in self._optimizer.param_groups:
            group.update(
                lr=adam.learning_rate,
                betas=(adam.beta1, adam.beta2),
                eps=adam.eps,
                weight_decay=adam.weight_decay,
            )
        self._optimizer.step()
        self._optimizer.zero_grad()
        return _done(types.OptimStepResponse(metrics={}))

    def save_state(self, name: str) -> AwaitableConcurrentFuture:
        path = f"tinker://{self.model_id}/weights/{name}"
        self.store.save(path, self.model, self.rank)
        return _done(types.SaveWeightsResponse(path=path))

    def save_weights_for_sampler(self, name: str) -> AwaitableConcurrentFuture:
        path = f"tinker://{self.model_id}/sampler_weights/{name}"
        self.store.save(path, self.model, self.rank)
        return _done(types.SaveWeightsForSamplerResponse(path=path))


class SamplingStandin:
    """A ``SamplingClient`` of the base model or of a saved adapter."""

    def __init__(self, model: Any):
        self.model = model.eval()

    def get_tokenizer(self) -> Any:
        return tokenizer()

    @torch.no_grad()
    def sample(
        self, prompt: types.ModelInput, num_samples: int, sampling_params: types.SamplingParams
    ) -> AwaitableConcurrentFuture:
        # The prompt is in the seed: the bigram model reads only the last token, and a real
        # model's samples depend on the whole prompt (MALT's sibling subtrees differ).
        tokens = prompt.to_ints()
        seed = (sampling_params.seed or 0) + zlib.crc32(json.dumps(tokens).encode())
        generator = torch.Generator().manual_seed(seed)
        eos = tokenizer().eos_token_id
        sequences = []
        first = self.model(input_ids=torch.tensor([tokens]), use_cache=True)
        for i in range(num_samples):
            logits, cache = first.logits[0, -1].float(), copy.deepcopy(first.past_key_values)
            out, reason = [], "length"
            for _ in range(sampling_params.max_tokens or 16):
                token = _draw(logits, sampling_params, generator)
                out.append(token)
                if token == eos:
                    reason = "stop"
                    break
                step = self.model(
                    input_ids=torch.tensor([[token]]), past_key_values=cache, use_cache=True
                )
                logits, cache = step.logits[0, -1].float(), step.past_key_values
            sequences.append(
                types.SampledSequence(stop_reason=reason, sequence_id=f"seq-{i}", _tokens_list=out)
            )
        return _done(types.SampleResponse(sequences=sequences))

    @torch.no_grad()
    def compute_logprobs(self, prompt: types.ModelInput) -> AwaitableConcurrentFuture:
        tokens = prompt.to_ints()
        logprobs = token_logprobs(self.model, tokens[:-1], tokens[1:])
        return _done([None, *map(float, logprobs)])


def _draw(logits: torch.Tensor, params: types.SamplingParams, generator: torch.Generator) -> int:
    if params.temperature == 0:
        return int(logits.argmax())
    probs = F.softmax(logits / params.temperature, -1)
    if params.top_p < 1:
        ordered, index = probs.sort(descending=True)
        keep = ordered.cumsum(0) - ordered < params.top_p
        probs = torch.zeros_like(probs).scatter(0, index[keep], ordered[keep])
    return int(torch.multinomial(probs, 1, generator=generator))


class ServiceStandin:
    """A ``ServiceClient``: opens training and sampling clients."""

    def __init__(self, store: Store):
        self.store = store
        self.training_clients: list[TrainingStandin] = []

    def create_lora_training_client(
        self, base_model: str, rank: int = 32, seed: int | None = None, **_: Any
    ) -> AwaitableConcurrentFuture:
        if not MODELS.get(base_model, (False, False))[1]:
            raise _status_error(tinker.BadRequestError, 400, f"cannot train {base_model}")
        if rank > MAX_RANK:
            raise _status_error(
                tinker.BadRequestError, 400, f"LoRA rank {rank} exceeds the maximum {MAX_RANK}"
            )
        client = TrainingStandin(self.store, rank, with_lora(rank, seed), self.store.new_run())
        self.training_clients.append(client)
        return _done(client)

    def create_training_client_from_state(self, path: str, **_: Any) -> AwaitableConcurrentFuture:
        saved = self.store.load(path)
        model = with_lora(saved["rank"], 0, saved["weights"])
        client = TrainingStandin(self.store, saved["rank"], model, self.store.new_run())
        self.training_clients.append(client)
        return _done(client)

    def create_sampling_client(
        self, model_path: str | None = None, base_model: str | None = None, **_: Any
    ) -> AwaitableConcurrentFuture:
        if model_path is not None:
            saved = self.store.load(model_path)
            return _done(SamplingStandin(with_lora(saved["rank"], 0, saved["weights"])))
        return _done(SamplingStandin(tiny_base()))


class RestStandin:
    """A ``RestClient``: the models offered and each training run's checkpoints."""

    def __init__(self, store: Store):
        self.store = store

    def get_server_capabilities(self) -> AwaitableConcurrentFuture:
        models = [
            types.SupportedModel(model_name=name, sampleable=s, trainable=t)
            for name, (s, t) in MODELS.items()
        ]
        return _done(types.GetServerCapabilitiesResponse(supported_models=models))

    def list_checkpoints(self, training_run_id: str) -> AwaitableConcurrentFuture:
        folder = self.store.root / training_run_id
        checkpoints = [
            types.Checkpoint(
                checkpoint_id=f"{kind}/{file.stem}",
                checkpoint_type="sampler" if kind == "sampler_weights" else "training",
                time="2026-12-01T00:00:00Z",
                tinker_path=f"tinker://{training_run_id}/{kind}/{file.stem}",
            )
            for kind in ("weights", "sampler_weights")
            for file in sorted((folder / kind).glob("*.pt"))
        ]
        return _done(types.CheckpointsListResponse(checkpoints=checkpoints, cursor=None))


def clients() -> tuple[ServiceStandin, RestStandin]:
    """nip's seam (``NIP_TINKER_CLIENTS``): a ``(ServiceClient, RestClient)`` pair."""
    store = Store()
    return ServiceStandin(store), RestStandin(store)
