"""Shared test set-up: everything offline, quiet and deterministic."""

import atexit
import inspect
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

# Set before any test imports transformers, wandb or tqdm.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("TQDM_DISABLE", "1")

# The processes tests start (nbval's pytest, JupyterLab, Ray's nodes and agents) import
# jsonschema, which builds rfc3987_syntax's grammar at import where Jupyter installed it:
# 2.5-3.5 s of CPU per process (Ray's dashboard agent: 3.5 of its 4.5 s), for formats ("iri")
# that none of their schemas uses. On their PYTHONPATH a stand-in of that name refuses to
# load, and jsonschema leaves those formats unchecked.
_WITHOUT_RFC3987 = str(Path(__file__).parent / "doubles" / "without_rfc3987")
if _WITHOUT_RFC3987 not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [_WITHOUT_RFC3987, os.environ.get("PYTHONPATH")])
    )


def _threads_per_worker() -> int:
    """The cores this machine lends each pytest-xdist worker."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    return max(1, (cores or 1) // max(workers, 1))


# Each worker's torch (and every kernel, job or server it starts, which inherit the variable)
# uses its share of the cores: two workers of two OpenMP threads each on 2 cores spin-wait on
# each other, and two tutorials side by side took 297 s against 115 s with one thread each.
# Set in the workers only: the controlling process's environment is the workers' (a value set
# there would reach them as if the user had chosen it), and one process uses every core.
def _end_without_interpreter_teardown() -> None:
    """A worker's last exit handler: the others (the servers and processes tests started, W&B)
    have run; CPython's own teardown of torch, transformers and the rest took 1.5-1.8 s per
    worker, and the run waited for the slowest worker's."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", str(_threads_per_worker()))
    os.environ.setdefault("MKL_NUM_THREADS", os.environ["OMP_NUM_THREADS"])
    atexit.register(_end_without_interpreter_teardown)  # registered first: it runs last


@pytest.fixture
def ca_bundle_reads(monkeypatch) -> list[int]:
    """Grows by one each time a TLS context reads its CA bundle (30-45 ms of CPU each)."""
    import ssl

    reads: list[int] = []
    real = ssl.SSLContext.load_verify_locations
    monkeypatch.setattr(
        ssl.SSLContext,
        "load_verify_locations",
        lambda context, *a, **k: reads.append(1) or real(context, *a, **k),
    )
    return reads


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


@pytest.fixture(scope="session")
def dummy_params(make_tiny_dataset) -> Callable[..., Any]:
    """``dummy_params(**agent)``: a small Expert Iteration run over a tiny dataset (2
    iterations of 4 dialogues, nip and debate in 3 rounds, the last iteration tested), both
    agents on the dummy API unless ``agent`` says otherwise: a sweep's base, say."""
    dataset = make_tiny_dataset()

    def build(**agent: Any) -> Any:
        from nip.parameters import HyperParameters, PureTextAgentParameters

        params = PureTextAgentParameters(**(agent or {"use_dummy_api": True}))
        return HyperParameters(
            dataset=str(dataset),
            agents={"prover": params, "verifier": params},
            rl={"num_iterations": 2, "rollouts_per_iteration": 4},
            text_rl={"min_fine_tune_examples": 1, "test_scheme": "last"},
            nip_protocol={"max_message_rounds": 3},
            debate_protocol={"max_message_rounds": 3},
        )

    return build


@pytest.fixture
def fine_tuning_app(tmp_path) -> Callable[..., Any]:
    """``fine_tuning_app(backend, storage, model=None)``: ``nip serve``'s app with no inference
    engine, training with ``backend`` and keeping its files and jobs in ``storage``. Its base
    model is a folder named ``base``, which also answers to ``model``: jobs on any other model
    are refused."""

    def build(backend: Any, storage: Path, model: str | None = None) -> Any:
        from nip.server.app import create_server_app
        from nip.server.config import ServerConfig

        (tmp_path / "base").mkdir(exist_ok=True)
        config = ServerConfig(
            model=str(tmp_path / "base"),
            served_model_name=model,
            engine="none",
            storage_dir=str(storage),
            poll_interval_s=0.05,
        )
        return create_server_app(config, fine_tune_backend=backend)

    return build


# ------------------------------------------------------------------ tiers and workers
#: Markers of the tests left out of the quick tier (``bash scripts/test.sh --quick``).
HEAVY_MARKERS = ("slow", "gpu", "vllm", "browser", "notebook")


#: Tests scheduled together, one after another in one pytest-xdist worker, whatever their module
#: (test id: scope name). None now: the longest tests start first on workers of their own.
SHARED_SCOPES: dict[str, str] = {}
#: Modules whose tests share no costly fixture: each test is scheduled on its own.
SPREAD_MODULES = ("tests/test_notebooks.py",)
#: Scopes handed out first, longest first (their wall time in a whole run on 2 cores), so that
#: no long one starts last and the run ends on short ones; fnmatch patterns.
FIRST = (
    "tests/test_notebooks.py::*[[]05_malt_trees]",
    "tests/test_notebooks.py::*[[]07_self_hosted_loop]",
    "tests/test_main_job.py",
    "tests/test_notebooks.py::*[[]04_expert_iteration]",
    "tests/test_local_lora_in_process.py",
    "tests/test_run_servers.py",
    "tests/test_local_lora.py",
    "tests/test_model_store.py",
    "tests/test_base_install.py",
    "tests/test_training_loop.py",
    "tests/test_ray_servers.py",
    "tests/test_gpu_check.py",
    "tests/test_browser.py",
    "tests/test_server_engines.py",
    "tests/test_notebooks.py::*[[]01_quickstart]",
    "tests/test_server_background.py",
    "tests/test_local_vllm_engine.py",
    "tests/test_notebooks.py::*[[]02_protocols_tour]",
    "tests/test_settings_behaviour.py",
    "tests/test_quiet_loading.py",
    "tests/test_reliability_faults.py",
    "tests/test_sweep_api.py",
    "tests/test_sweep_ray.py",
    "tests/test_notebooks.py::test_the_tutorial_runs_top_to_bottom*",
    "tests/test_test_server.py",
    "tests/test_together.py",
    "tests/test_fine_tune_failure.py",
    "tests/test_data_buggy_apps.py",
    "tests/test_sweep.py",
)


def xdist_scope(nodeid: str) -> str:
    """The unit of work a test belongs to: its module (so a module's fixtures are built once, in
    one worker), unless :data:`SHARED_SCOPES` or :data:`SPREAD_MODULES` say otherwise."""
    nodeid = nodeid.split("@")[0]
    if nodeid in SHARED_SCOPES:
        return SHARED_SCOPES[nodeid]
    module = nodeid.split("::")[0]
    return nodeid if module in SPREAD_MODULES else module


def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup`` (scripts/test.sh) schedules by :func:`xdist_scope`.

    pytest-xdist's own ``xdist_group`` marks do nothing under pytest 9 (xdist 3.8 renames
    ``item._nodeid``, which pytest 9 no longer reads), so the scopes are set here, by test id.
    """
    if config.getoption("dist") != "loadgroup":
        return None
    from collections import OrderedDict
    from fnmatch import fnmatch

    from xdist.scheduler import LoadScopeScheduling

    def rank(scope: str) -> int:
        return next((i for i, p in enumerate(FIRST) if fnmatch(scope, p)), len(FIRST))

    class ScopeScheduling(LoadScopeScheduling):
        ordered = False

        def _split_scope(self, nodeid: str) -> str:
            return xdist_scope(nodeid)

        def _assign_work_unit(self, node) -> None:
            if not self.ordered:  # the queue is complete at the first assignment
                self.ordered = True
                scopes = sorted(self.workqueue, key=rank)  # stable: collection order within
                self.workqueue = OrderedDict((s, self.workqueue[s]) for s in scopes)
            super()._assign_work_unit(node)

    config.option.loadscopereorder = False
    return ScopeScheduling(config, log)


def pytest_collection_modifyitems(config, items) -> None:
    """An async test's time-out ends its worker (pytest-timeout's thread method, which prints
    every thread's stack first); xdist reports the test failed and starts a new worker. The
    signal method's exception can be raised inside a task of the test's event loop, which
    keeps it, and the test then waits forever: seen once in a whole run, a worker idle in
    ``epoll_wait`` for 10 minutes past its time-out."""
    for item in items:
        if not inspect.iscoroutinefunction(getattr(item, "function", None)):
            continue
        marker = item.get_closest_marker("timeout")
        if marker is not None and marker.args:
            seconds = marker.args[0]
        elif marker is not None and "timeout" in marker.kwargs:
            seconds = marker.kwargs["timeout"]
        else:
            seconds = float(config.getini("timeout") or 0)
        if seconds:
            item.add_marker(pytest.mark.timeout(seconds, method="thread"), append=False)


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
