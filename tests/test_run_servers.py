"""``--serve``: a run or a sweep owns the ``nip serve`` its SelfHosted agents need.

The quick tests show how agents are pointed at a server (``settings.servers``) and that bad
input is refused in one line. The slow ones start real servers (the transformers engine on
the tiny model, on this CPU): a 2-cell grid whose cells train their adapters on one server at
once, killed with SIGKILL (the server goes with it), then one cell resumed with ``nip resume
CELL --serve`` and the rest with ``nip sweep resume`` (each time a new server, on the sweep's
storage, serves the adapters trained before); and a run on the vLLM engine (a stand-in vLLM
with a worker deaf to SIGTERM) killed with SIGKILL, which leaves no vLLM behind.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from nip.backends.self_hosted import UnservedModelError, served_params
from nip.cli import main
from nip.parameters import HyperParameters, PureTextAgentParameters
from nip.providers.pool import BackendPool
from nip.server.run_servers import served_models, serving, storage_name
from nip.settings import ExperimentSettings
from tests.doubles.fake_vllm import FAKE_VLLM_SERVER, fake_vllm_python
from tests.doubles.processes import live_group_members, processes_with, wait_until

REPO = Path(__file__).resolve().parents[1]
#: Every wait here ends by then, a loaded machine included.
WAIT_S = 240.0


# ------------------------------------------------------------------------ quick
def _hosted(model: str = "/models/qwen", **more) -> PureTextAgentParameters:
    return PureTextAgentParameters(model_provider="SelfHosted", model_name=model, **more)


def test_the_servers_a_grid_needs_are_one_per_self_hosted_base_model():
    configs = [
        HyperParameters(agents={"prover": _hosted("a"), "verifier": _hosted("b")}),
        HyperParameters(agents={"prover": _hosted("a"), "verifier": {"use_dummy_api": True}}),
        HyperParameters(agents={"prover": _hosted("c", use_dummy_api=True), "verifier": {}}),
    ]
    assert served_models(configs) == ["a", "b"]
    assert storage_name("Qwen/Qwen2.5-7B-Instruct") == "Qwen--Qwen2.5-7B-Instruct"


def test_agents_of_a_served_model_talk_to_its_server_and_no_saved_address_changes():
    settings = ExperimentSettings(serve=True, servers={"/models/qwen": "http://127.0.0.1:41234"})
    agent = _hosted()
    pointed = served_params(agent, settings)
    assert (pointed.language_model_server_scheme_host, pointed.language_model_server_port) == (
        "http://127.0.0.1",
        41234,
    )
    assert agent.language_model_server_port == 5000  # the configuration is left as it was
    pool = BackendPool(settings)
    assert str(pool.backend_for(agent).inner.config.base_url).startswith("http://127.0.0.1:41234")
    other = PureTextAgentParameters(model_provider="OpenAI")
    assert served_params(other, settings) is other


def test_serve_without_a_server_for_the_model_is_refused_naming_the_way_to_start_one():
    with pytest.raises(UnservedModelError, match=r"nip run --serve.*nip\.server\.serving"):
        served_params(_hosted(), ExperimentSettings(serve=True))
    assert served_params(_hosted(), ExperimentSettings()).language_model_server_port == 5000


def test_with_serve_off_serving_starts_nothing(tmp_path):
    settings = ExperimentSettings()
    with serving(
        [HyperParameters(agents={"prover": _hosted(), "verifier": _hosted()})], settings, tmp_path
    ) as served:
        assert served is settings
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("command", ["run", "resume", "sweep", "extend", "retest"])
def test_a_missing_serve_config_is_one_line_exit_two_and_nothing_is_written(
    command, tmp_path, capsys
):
    run = str(tmp_path / "r")
    target = {"run": "quickstart", "sweep": "paper-ei"}.get(command, run)
    extra = ["--sweep-dir", str(tmp_path / "s")] if command == "sweep" else []
    extra += ["--run-dir", run] if command == "run" else []
    extra += ["--iterations", "1"] if command == "extend" else []
    code = main([command, target, "--serve-config", str(tmp_path / "none.yaml"), *extra])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "none.yaml" in err
    assert not (tmp_path / "r").exists() and not (tmp_path / "s").exists()


def test_a_serve_config_with_a_wrong_field_is_one_line_exit_two(tmp_path, capsys):
    (tmp_path / "server.yaml").write_text("engine: quantum\n")
    code = main(["run", "quickstart", "--serve-config", str(tmp_path / "server.yaml")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "engine='quantum'" in err


def test_server_resources_without_ray_and_serve_is_refused_in_one_line(tmp_path, capsys):
    code = main(
        ["sweep", "paper-ei", "--sweep-dir", str(tmp_path / "s"), "--server-resources", "gpu=1"]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "--server-resources" in err
    assert not (tmp_path / "s").exists()


def test_a_notebook_sweep_starts_the_servers_its_grid_asks_for_before_any_cell(tmp_path):
    import nip
    from nip.errors import ModelNotFoundError

    missing = str(tmp_path / "no-such-model")
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(_config(missing)))
    grid = {"base": str(tmp_path / "base.yaml"), "axes": {"seed": [0]}, "serve": True}
    sweep = nip.sweep(grid, sweep_dir=tmp_path / "s")
    with pytest.raises(ModelNotFoundError, match="no-such-model"):
        sweep.run(echo=False)  # the grid's serve: a server for the model, which is not there
    assert not (tmp_path / "s" / "cells").exists()  # refused before any cell started


# ------------------------------------------------------------------------ slow: real servers
def _server_pids(marker: str) -> list[int]:
    """The ``nip serve`` processes whose command line names ``marker`` (a storage path)."""
    return processes_with("--owner-pid", marker)


def _wait_for(condition, what: str, timeout_s: float = WAIT_S) -> None:
    wait_until(condition, what, timeout_s)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> str:
    from tests.doubles.tiny_model import build_tiny_chat_model

    folder = tmp_path_factory.mktemp("models") / "tiny-chat"
    return str(build_tiny_chat_model(folder, max_positions=8192))  # long HumanEval prompts


def _config(model: str, **rl) -> dict:
    """Expert Iteration of the tiny model on nip serve: the verifier trains (every dialogue
    is an example: the tiny model writes gibberish), the prover is frozen."""
    agent = {
        "model_provider": "SelfHosted",
        "model_name": model,
        "max_response_words": 8,
        "lora_rank": 4,
        "num_invalid_generation_retries": 0,
    }
    return {
        "interaction_protocol": "nip",
        "nip_protocol": {"max_message_rounds": 3},
        "rl": {"num_iterations": 2, "rollouts_per_iteration": 2, "num_epochs": 1, **rl},
        "text_rl": {
            "test_scheme": "last",
            "test_on_whole_dataset": False,
            "min_fine_tune_examples": 1,
        },
        "pure_text_ei": {"reward_threshold": -1.0},
        "agents": {"prover": {**agent, "freeze_agent": True}, "verifier": agent},
    }


def _files(folder: Path, model: str, **rl) -> tuple[Path, Path]:
    (folder / "base.yaml").write_text(yaml.safe_dump(_config(model, **rl)))
    (folder / "server.yaml").write_text(
        "engine: transformers\ndevice: cpu\npoll_interval_s: 0.2\nmax_concurrent_jobs: 2\n"
    )
    (folder / "grid.yaml").write_text("base: base.yaml\naxes:\n  seed: [0, 1]\nmax_parallel: 2\n")
    return folder / "grid.yaml", folder / "server.yaml"


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "TQDM_DISABLE": "1", "WANDB_MODE": "disabled"}


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_grid_owns_one_server_trains_each_cells_adapter_and_survives_sigkill(
    tiny_model, tmp_path
):
    grid, server = _files(tmp_path, tiny_model)
    sweep_dir = tmp_path / "sweep"
    serve = ["--serve", "--serve-config", str(server), "--cache", "off", "--quiet"]
    command = [sys.executable, "-m", "nip.cli", "sweep", str(grid), "--sweep-dir", str(sweep_dir)]
    process = subprocess.Popen(
        [*command, *serve], env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    cells = [sweep_dir / "cells" / f"seed{seed}" for seed in (0, 1)]

    def both_switched() -> bool:
        assert process.poll() is None, process.stderr.read().decode()[-3000:]
        states = [c / "state.json" for c in cells]
        return all(s.exists() and json.loads(s.read_text())["iteration"] >= 1 for s in states)

    try:
        _wait_for(lambda: _server_pids(str(sweep_dir)), "serving")
        (server_pid,) = _server_pids(str(sweep_dir))  # one server for both cells
        _wait_for(both_switched, "in iteration 1")
    finally:
        process.kill()  # SIGKILL: no finally, no atexit in the sweep
        process.wait(timeout=60)
    _wait_for(lambda: not _server_pids(str(sweep_dir)), "gone with its sweep", 120)

    # One cell resumed on its own (nip resume CELL --serve: a server on the sweep's storage,
    # started again and stopped at the end), then the sweep.
    assert main(["resume", str(cells[0]), *serve]) == 0
    assert json.loads((cells[0] / "state.json").read_text())["stage"] == "done"
    assert not _server_pids(str(sweep_dir))
    resumed = subprocess.run(
        [sys.executable, "-m", "nip.cli", "sweep", "resume", str(sweep_dir), *serve],
        env=_env(),
        capture_output=True,
        timeout=WAIT_S * 2,
    )
    assert resumed.returncode == 0, resumed.stderr.decode()[-3000:]
    assert not _server_pids(str(sweep_dir))  # gone when the sweep ended

    adapters = []
    for cell in cells:
        state = json.loads((cell / "state.json").read_text())
        assert state["stage"] == "done"
        adapter = state["groups"]["verifier"]["fine_tuned_model_name"]
        turns = [
            turn
            for line in (cell / "rollouts" / "train_it0001.jsonl").read_text().splitlines()
            for turn in json.loads(line)["turns"]
            if turn["agent"] == "verifier"
        ]
        assert turns and {t["model"] for t in turns} == {adapter}  # its own adapter served
        adapters.append(adapter)
    assert len(set(adapters)) == 2  # the cells' adapters never collide on the shared server
    (store,) = (sweep_dir / "serve").glob("*/server.sqlite")
    with sqlite3.connect(store) as db:
        jobs = db.execute("SELECT id, status, fine_tuned_model FROM jobs").fetchall()
        spans = db.execute("SELECT created_at, finished_at FROM jobs").fetchall()
        served = db.execute("SELECT job_id FROM events WHERE message LIKE 'Serving %'").fetchall()
    assert sorted(j[2] for j in jobs) == sorted(adapters) and {j[1] for j in jobs} == {"succeeded"}
    # Each job reached the server before the other had finished: with max_concurrent_jobs 2
    # the two cells' jobs trained at once.
    assert max(start for start, _ in spans) <= min(end for _, end in spans)
    for job_id, *_ in jobs:  # served when trained, and again by the server of the resume
        assert sum(1 for (j,) in served if j == job_id) >= 2
    assert server_pid not in _server_pids(str(sweep_dir))


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_run_killed_with_sigkill_leaves_no_vllm_behind(tiny_model, tmp_path):
    """The run's server ends vLLM's whole process group, a worker that ignores SIGTERM
    included. vLLM here is a stand-in (tests.doubles.fake_vllm: slow answers hold the run in
    sampling) started by the real engine: that real vLLM's own processes die with the group
    its engine ends is checked by ``test_local_vllm_engine.py``, on the same ``VllmProcess``."""
    python = fake_vllm_python(tmp_path / "fake", api_server=FAKE_VLLM_SERVER)
    worker_pid_file = tmp_path / "worker.pid"
    _files(tmp_path, tiny_model, num_iterations=1, rollouts_per_iteration=64)
    (tmp_path / "server.yaml").write_text(
        f"engine: vllm\nvllm_python: {python}\ndevice: cpu\nmax_model_len: 8192\n"
    )
    run = tmp_path / "run"
    command = [
        sys.executable,
        "-m",
        "nip.cli",
        "run",
        str(tmp_path / "base.yaml"),
        "--run-dir",
        str(run),
        "--serve-config",
        str(tmp_path / "server.yaml"),
        "--quiet",
    ]
    environment = {**_env(), "FAKE_VLLM_WORKER": str(worker_pid_file), "FAKE_VLLM_DELAY_S": "30"}
    process = subprocess.Popen(
        command, env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )

    def sampling() -> bool:
        assert process.poll() is None, process.stderr.read().decode()[-3000:]
        return (run / "stage_progress.json").exists() and worker_pid_file.exists()

    try:
        _wait_for(sampling, "sampling with vLLM")
        (pid,) = processes_with("vllm.entrypoints", tiny_model)
        worker = int(worker_pid_file.read_text())
        assert worker in live_group_members(pid, wait_s=0) and _server_pids(str(run))
    finally:
        process.kill()  # SIGKILL: no finally, no atexit in the run
        process.wait(timeout=60)
    _wait_for(lambda: not _server_pids(str(run)), "nip serve gone with its run", 180)
    assert not live_group_members(pid, wait_s=60)  # vLLM and its worker (deaf to SIGTERM) too
