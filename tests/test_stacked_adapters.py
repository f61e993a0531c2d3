"""A stack of LoRA adapters turned into one adapter for vLLM, which applies one per request.

The stacked adapter was trained on the base model with its predecessors merged in; the single
adapter nip serve gives vLLM must change the base model exactly as the whole stack does.
"""

from __future__ import annotations

from importlib.util import find_spec
from pathlib import Path

import pytest

from nip.backends.local.adapters import read_adapter_stack, write_predecessors
from nip.backends.local.stacked_adapters import concatenated_rank, write_concatenated_adapter
from nip.errors import UnservableAdapterError
from tests.doubles.tiny_model import build_tiny_chat_model, build_tiny_lora_adapter

# Not importorskip: importing peft at collection costs every pytest worker seconds.
pytestmark = pytest.mark.skipif(
    find_spec("torch") is None or find_spec("peft") is None, reason="torch or peft is missing"
)


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_chat_model(tmp_path_factory.mktemp("models") / "tiny-chat", seed=0)


@pytest.fixture(scope="module")
def stack(tiny_model_dir, tmp_path_factory):
    """it0 on the base model; it1 trained on it0 (other layers as well as shared ones)."""
    root = tmp_path_factory.mktemp("jobs")
    it0 = build_tiny_lora_adapter(tiny_model_dir, root / "it0", seed=1, rank=4)
    it1 = build_tiny_lora_adapter(
        tiny_model_dir, root / "it1", seed=2, rank=2, target_modules=("q_proj", "k_proj")
    )
    write_predecessors(it1, [it0])
    return read_adapter_stack(it1)


def logits(model, tokens):
    import torch

    with torch.no_grad():
        return model(tokens).logits


def stacked_logits(model_dir: Path, stack, tokens):
    """What the stack means: each predecessor merged into the weights, the top one applied."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    for layer in stack.layers[:-1]:
        model = PeftModel.from_pretrained(model, str(layer.path)).merge_and_unload()
    return logits(PeftModel.from_pretrained(model, str(stack.path)), tokens)


def single_adapter_logits(model_dir: Path, adapter: Path, tokens):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    return logits(PeftModel.from_pretrained(model, str(adapter)), tokens)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("allowed_ranks", [None, (1, 8, 16)], ids=["exact", "padded"])
def test_the_single_adapter_changes_the_model_exactly_as_the_stack(
    tiny_model_dir, stack, tmp_path, allowed_ranks
):
    import torch

    tokens = torch.tensor([[1, 5, 9, 13, 17, 21, 25]])
    out = tmp_path / "for-vllm"

    rank = write_concatenated_adapter(stack, out, allowed_ranks=allowed_ranks)

    assert rank == (6 if allowed_ranks is None else 8)  # 4 + 2, padded up to 8 when asked
    assert rank == concatenated_rank(stack, allowed_ranks)
    expected = stacked_logits(tiny_model_dir, stack, tokens)
    served = single_adapter_logits(tiny_model_dir, out, tokens)
    top_alone = single_adapter_logits(tiny_model_dir, stack.path, tokens)
    torch.testing.assert_close(served, expected, rtol=1e-4, atol=1e-4)
    assert not torch.allclose(top_alone, expected, atol=1e-3)  # what vLLM served before


def test_a_stack_above_every_allowed_rank_is_refused_naming_the_flag(stack, tmp_path):
    with pytest.raises(UnservableAdapterError, match=r"rank 6, above .*serves \(1\)"):
        write_concatenated_adapter(stack, tmp_path / "x", allowed_ranks=(1,))
    assert not (tmp_path / "x").exists()
