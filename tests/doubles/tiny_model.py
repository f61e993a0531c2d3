"""A tiny random chat model (and LoRA adapter) built on the spot, for fast offline tests.

The model is a 2-layer Llama with a byte-level BPE tokenizer trained on a few sentences and a
ChatML chat template. It writes gibberish, but it goes through exactly the code paths of a
real chat model (chat template, batching, sampling, adapters, training) in a fraction of a
second per call. Everything is deterministic for a seed, and no file is downloaded.
"""

from __future__ import annotations

import os
from pathlib import Path

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<pad>")
"""Special tokens of the tiny tokenizer (end of text, ChatML turn markers, padding)."""

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
"""The ChatML chat template (the one SmolLM2 and Qwen use, without a default system turn)."""

_TRAINING_TEXTS = (
    "The verifier asks the prover a question about the code.",
    "Question: does the function handle an empty list? Answer: yes, it returns zero.",
    "Decision: accept. Decision: reject.",
    "def add(a, b):\n    return a + b\n",
    "What is the capital of France? Paris is the capital of France.",
    "system user assistant prover verifier channel round message",
)


def build_tiny_chat_model(
    path: str | os.PathLike[str],
    *,
    seed: int = 0,
    hidden_size: int = 64,
    num_heads: int = 1,
    num_kv_heads: int = 1,
    num_layers: int = 2,
    intermediate_size: int = 128,
    vocab_size: int = 400,
    max_positions: int = 2048,
    initializer_range: float = 0.2,
) -> Path:
    """Save a tiny random Llama chat model with its tokenizer in ``path`` and return it.

    The defaults give head_dim 64 (``hidden_size / num_heads``), which vLLM's CPU build needs.
    The weights are drawn from a private generator, so torch's global seed is left alone.

    Args:
        path: Folder to write (created if missing).
        seed: Determines the weights; the same seed gives the same files.
        hidden_size / num_heads / num_kv_heads / num_layers / intermediate_size: Model shape.
        vocab_size: Target size of the BPE vocabulary (256 bytes + specials + merges).
        max_positions: Longest sequence the model accepts.
        initializer_range: Standard deviation of the random weights; larger than a real
            model's so that the next-token distribution is peaked and greedy decoding is
            stable against floating-point noise.

    Returns:
        ``path`` as a :class:`~pathlib.Path`, loadable with ``from_pretrained``.
    """
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = _train_tokenizer(vocab_size)
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in SPECIAL_TOKENS}
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        head_dim=hidden_size // num_heads,
        max_position_embeddings=max_positions,
        initializer_range=initializer_range,
        tie_word_embeddings=True,
        bos_token_id=ids["<|im_start|>"],
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<pad>"],
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(
        bos_token_id=ids["<|im_start|>"],
        eos_token_id=[ids["<|im_end|>"], ids["<|endoftext|>"]],
        pad_token_id=ids["<pad>"],
    )
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def build_tiny_lora_adapter(
    model_path: str | os.PathLike[str],
    path: str | os.PathLike[str],
    *,
    seed: int = 0,
    rank: int = 4,
    target_modules: tuple[str, ...] = ("q_proj", "v_proj", "o_proj"),
) -> Path:
    """Save a LoRA adapter with random, non-zero weights for the model in ``model_path``.

    A freshly initialised LoRA adapter changes nothing (its B matrix is zero); this one is
    drawn entirely at random, so it visibly changes the model's greedy output, as a fine-tuned
    adapter would.

    Args:
        model_path: The base model folder (e.g. from :func:`build_tiny_chat_model`).
        path: Folder to write the adapter to.
        seed: Determines the adapter weights.
        rank: LoRA rank.
        target_modules: Layers the adapter modifies.

    Returns:
        ``path`` as a :class:`~pathlib.Path`, loadable with ``PeftModel.from_pretrained``.
    """
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_path, local_files_only=True)
    config = LoraConfig(
        r=rank,
        lora_alpha=2 * rank,
        target_modules=list(target_modules),
        init_lora_weights=False,
        task_type="CAUSAL_LM",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = get_peft_model(base, config)
    folder = Path(path)
    model.save_pretrained(folder)
    return folder


def _train_tokenizer(vocab_size: int):
    """A byte-level BPE tokenizer trained on a few sentences, with ChatML tokens and template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(_TRAINING_TEXTS, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token="<|im_end|>",
        pad_token="<pad>",
        unk_token=None,
        bos_token=None,
    )
    tokenizer.chat_template = CHATML_TEMPLATE
    return tokenizer
