"""Shared test set-up: everything offline, quiet and deterministic."""

import os

# Set before any test imports transformers, wandb or tqdm.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("TQDM_DISABLE", "1")


import json
from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def make_tiny_dataset(tmp_path_factory) -> Callable[..., Path]:
    """Writes a small dataset file: ``items`` items, the first ``train`` of them in the train
    split and the rest in test, every other one incorrect (an off-by-one return value)."""

    def write(items: int = 16, train: int = 12) -> Path:
        path = tmp_path_factory.mktemp("data") / "tiny.jsonl"
        rows = [
            {
                "id": f"item{i}",
                "question": f"Return {i} plus the argument.",
                "solution": f"def f(x):\n    return x + {i + i % 2}\n",
                "y": 1 - i % 2,
                "split": "train" if i < train else "test",
                "source_task_id": f"task{i}",
            }
            for i in range(items)
        ]
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return path

    return write
