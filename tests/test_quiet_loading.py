"""Loading a local model shows none of transformers' own progress bars, notices or warnings
(in a notebook they would land in the tutorial's output), and leaves its settings as found."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

pytest.importorskip("torch")

from transformers.utils import logging as hf_logging

from nip.backends.local._quiet import quiet_libraries
from nip.testing.tiny_model import build_tiny_chat_model


def test_while_loading_bars_notices_and_warnings_are_off_and_are_restored_after():
    hf_logging.enable_progress_bar()
    hf_logging.set_verbosity_warning()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with quiet_libraries():
            assert not hf_logging.is_progress_bar_enabled()
            assert hf_logging.get_verbosity() == hf_logging.ERROR
            warnings.warn("a conversion notice", UserWarning, stacklevel=1)
        assert caught == []
    assert hf_logging.is_progress_bar_enabled()
    assert hf_logging.get_verbosity() == hf_logging.WARNING


@pytest.mark.timeout(180)
def test_loading_the_model_writes_nothing_to_the_output(tmp_path: Path):
    """In a fresh process with progress bars on (no TQDM_DISABLE), as in a notebook."""
    folder = build_tiny_chat_model(tmp_path / "tiny-chat", seed=0)
    code = (
        "from nip.backends.local._engine import Engine; "
        f"Engine({str(folder)!r}, device='cpu'); print('loaded')"
    )
    env = {k: v for k, v in os.environ.items() if k != "TQDM_DISABLE"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=150
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "loaded\n", "")


@pytest.mark.timeout(180)
def test_generating_base_and_adapter_writes_nothing_to_the_output(tmp_path: Path):
    """transformers 5 warns on a deprecated cache argument at every generate (also through
    PEFT): the engine passes none it does not need, under the name the model takes."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    folder = build_tiny_chat_model(tmp_path / "tiny-chat", seed=0)
    model = AutoModelForCausalLM.from_pretrained(folder)
    adapter = get_peft_model(model, LoraConfig(r=2, target_modules="all-linear"))
    adapter.save_pretrained(tmp_path / "adapter")
    code = f"""
import asyncio
from nip.backends import GenerationRequest
from nip.backends.local import LocalBackend

async def main():
    for cache_mb in (0, 16):
        backend = LocalBackend({str(folder)!r}, device="cpu", prefix_cache_mb=cache_mb)
        backend.register_adapter("tuned", {str(tmp_path / "adapter")!r})
        hi = ({{"role": "user", "content": "Hi"}},)
        for name in ({str(folder)!r}, "tuned", "tuned"):
            await backend.generate(GenerationRequest(name, hi, max_tokens=3))
        await backend.aclose()
    print("generated")

asyncio.run(main())
"""
    env = {k: v for k, v in os.environ.items() if k != "TQDM_DISABLE"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=150
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "generated\n", "")


@pytest.mark.timeout(180)
def test_a_tokenizer_that_asks_for_space_clean_up_writes_nothing_to_the_output(tmp_path: Path):
    """transformers >= 5.17 warns at a BPE tokenizer's first decode when its configuration
    asks for WordPiece's space clean-up (it ignores it); nip decodes without it."""
    import json

    folder = build_tiny_chat_model(tmp_path / "tiny-chat", seed=0)
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config_path.write_text(json.dumps({**config, "clean_up_tokenization_spaces": True}))
    code = f"""
import asyncio
from nip.backends import GenerationRequest
from nip.backends.local import LocalBackend

async def main():
    backend = LocalBackend({str(folder)!r}, device="cpu")
    hi = ({{"role": "user", "content": "Hi, how are you?"}},)
    await backend.generate(GenerationRequest({str(folder)!r}, hi, max_tokens=6))
    await backend.aclose()
    print("generated")

asyncio.run(main())
"""
    env = {k: v for k, v in os.environ.items() if k != "TQDM_DISABLE"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=150
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "generated\n", "")
