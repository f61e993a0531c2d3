"""nip's worker threads import torch, transformers, PEFT and TRL in turn, never at once.

The embedded model's thread imports transformers when it first generates while the LoRA worker
thread imports TRL for the first job; two threads importing one package at once can see a
module that is still initialising (``cannot import name 'AutoModelForCausalLM'``, seen once
in tutorial 04). Each test holds the import turn and checks that the worker waits for it.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from nip.backends import GenerationRequest
from nip.backends.local import LocalBackend
from nip.jobs import local_lora, lora_train
from nip.utils.imports import heavy_imports

pytestmark = pytest.mark.slow

HI = ({"role": "user", "content": "Hi"},)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    from tests.doubles.tiny_model import build_tiny_chat_model

    return build_tiny_chat_model(tmp_path_factory.mktemp("models") / "tiny")


def test_the_embedded_model_loads_only_once_no_other_thread_is_importing(tiny_model):
    backend = LocalBackend(str(tiny_model), device="cpu")
    request = GenerationRequest(str(tiny_model), HI, max_tokens=2, temperature=0)
    answered = threading.Event()

    def generate() -> None:
        asyncio.run(backend.generate(request))
        asyncio.run(backend.aclose())
        answered.set()

    worker = threading.Thread(target=generate)
    with heavy_imports():  # as if the LoRA worker were importing TRL
        worker.start()
        assert not answered.wait(1.0)
        assert not backend.loaded
    worker.join(timeout=300)
    assert answered.is_set()


def test_the_lora_worker_imports_the_training_libraries_in_its_turn(tmp_path, monkeypatch):
    imported = threading.Event()
    monkeypatch.setattr(lora_train, "import_training_libraries", imported.set)
    with heavy_imports():  # as if the embedded model's thread were importing transformers
        backend = local_lora.InProcessLoraFineTuneBackend(tmp_path / "jobs", warm_up=True)
        assert not imported.wait(1.0)
    assert imported.wait(60)
    backend.close()
