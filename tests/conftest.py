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


# ------------------------------------------------------------------ tiers and workers
#: Markers of the tests left out of the quick tier (``bash scripts/test.sh --quick``).
HEAVY_MARKERS = ("slow", "gpu", "vllm", "browser", "notebook")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep a module's tests in one pytest-xdist worker where they share a fixture of the
    module (a loaded model, a server, a JupyterLab): ``--dist loadgroup`` then builds it once,
    not once per worker. An ``xdist_group`` mark of the test's own wins."""
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        module = item.nodeid.split("::")[0]
        info = getattr(item, "_fixtureinfo", None)
        shared = info is not None and any(
            definition.scope != "function" and definition.baseid == module
            for definitions in info.name2fixturedefs.values()
            for definition in definitions
        )
        if shared:
            item.add_marker(pytest.mark.xdist_group(module))


@pytest.fixture(autouse=True)
def _quick_tier_loads_no_real_model(request, monkeypatch):
    """In the quick tier (``NIP_TEST_TIER=quick``, set by ``scripts/test.sh --quick``), a test
    that reaches the embedded model's GGUF fails and says which marker it lacks."""
    if os.environ.get("NIP_TEST_TIER") != "quick":
        return
    if any(request.node.get_closest_marker(name) for name in HEAVY_MARKERS):
        return
    from nip.backends.local import model_store

    def refuse(name, *args, **kwargs):
        raise AssertionError(
            f"{request.node.nodeid} reads the real model {name!r}: mark it "
            "@pytest.mark.slow (the quick tier runs no real model)"
        )

    monkeypatch.setattr(model_store, "_find_gguf", refuse)
