"""What a run spent, beside its dry run's estimate: inference priced per agent, and each
fine-tuning job's trained tokens (as the provider reports them) times its training price, per
iteration, per agent and in total; unknown costs say so and are never counted as 0.

The agents are OpenAI's, priced (``prices_usd_per_1m``), talking to the OpenAI-compatible test
server on loopback; their jobs go to a fine-tuning double that reports trained tokens."""

from __future__ import annotations

import asyncio
import io
import json
import time
from pathlib import Path

import pytest

from nip.jobs import FineTuneJob
from nip.parameters import HyperParameters, PureTextAgentParameters
from nip.providers import prices_for
from nip.runs.spend import read_spend, sweep_spend, sweep_status_text, usd
from nip.settings import ExperimentSettings
from nip.testing.server import create_app, serve
from nip.training.reporter import RunReporter
from nip.training.trainer import build_trainer
from nip.widgets import RunSnapshot
from tests.doubles.fine_tuning import ScriptedFineTuneBackend

MODEL = "gpt-4o-mini-2024-07-18"
#: What the run pays per 1M (input, output) tokens: the base model, and its fine-tunes.
PRICES = {"gpt-4o-mini": (1.0, 2.0), "ft:gpt-4o-mini": (3.0, 6.0)}
#: What the double reports each job trained on, per example.
TOKENS_PER_EXAMPLE = 250


class TrainedTokensBackend(ScriptedFineTuneBackend):
    """Jobs that succeed with OpenAI-style model names and report their trained tokens
    (``report=False``: none, as some providers' jobs)."""

    def __init__(self, report: bool = True):
        super().__init__()
        self.report = report

    async def get_job(self, job_id: str) -> FineTuneJob:
        spec = self.specs[job_id]
        tokens = len(spec.examples) * TOKENS_PER_EXAMPLE if self.report else None
        model = f"ft:{MODEL}:nip::{job_id}"
        return FineTuneJob(job_id, "succeeded", fine_tuned_model=model, trained_tokens=tokens)


@pytest.fixture
def api(monkeypatch):
    """The test server, as OpenAI's API."""
    with serve(create_app()) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        yield server


def params(dataset: Path, **agent) -> HyperParameters:
    openai = PureTextAgentParameters(model_provider="OpenAI", model_name=MODEL, **agent)
    return HyperParameters(
        trainer="pure_text_ei",
        dataset=str(dataset),
        agents={"prover": openai, "verifier": openai},
        rl={"num_iterations": 2, "rollouts_per_iteration": 4},
        text_rl={"min_fine_tune_examples": 1, "test_scheme": "all"},
        nip_protocol={"max_message_rounds": 3},
        pure_text_ei={"reward_threshold": -10.0},  # every dialogue is an example
    )


def run(dataset: Path, run_dir: Path, report: bool = True, stream=None):
    """A trainer from ``build_trainer``, as a notebook builds it: it saves its own estimate."""
    settings = ExperimentSettings(
        run_dir=run_dir, prices_usd_per_1m=PRICES, cache="off", wandb_mode="disabled"
    )
    backends = {g: TrainedTokensBackend(report) for g in ("prover", "verifier")}
    trainer = build_trainer(params(dataset), settings, fine_tune_backends=backends)
    trainer.callbacks[0] = RunReporter(stream=stream or io.StringIO(), bars=False)
    trainer.poll_interval_s = 0.01
    trainer.train()
    return trainer, backends


def test_a_run_reports_its_inference_and_training_spend_beside_its_estimate(
    api, make_tiny_dataset, tmp_path
):
    printed = io.StringIO()
    trainer, backends = run(make_tiny_dataset(items=12, train=8), tmp_path / "run", stream=printed)
    price = prices_for(trainer.hyper_params.agents["prover"]).training(
        "gpt-4o-mini", "supervised", True
    )
    metrics = json.loads((tmp_path / "run" / "metrics" / "train_it0000.json").read_text())
    for group, backend in backends.items():
        (spec,) = backend.specs.values()  # the first iteration's job; the last trains none
        tokens = len(spec.examples) * TOKENS_PER_EXAMPLE
        assert metrics[f"{group}.trained_tokens"] == tokens
        assert metrics[f"{group}.training_cost_usd"] == pytest.approx(tokens * price / 1e6)
    assert metrics["training_cost_usd"] == pytest.approx(
        metrics["prover.training_cost_usd"] + metrics["verifier.training_cost_usd"]
    )

    spend = read_spend(tmp_path / "run")
    rows = trainer.run_dir.metrics_records()
    inference = sum(row["cost_usd"] for row in rows)
    assert spend.inference_usd == pytest.approx(inference) and inference > 0
    assert spend.training_usd == pytest.approx(metrics["training_cost_usd"])
    assert spend.by_iteration[1]["training_usd"] == 0.0  # the last iteration trains nothing
    assert spend.by_agent["prover"] == pytest.approx(
        sum(row["prover.cost_usd"] for row in rows) + metrics["prover.training_cost_usd"]
    )
    estimate = json.loads((tmp_path / "run" / "cost_estimate.json").read_text())
    assert spend.estimate_usd == estimate["total_usd"] > 0
    assert spend.difference_pct == pytest.approx(
        (spend.total_usd - estimate["total_usd"]) / estimate["total_usd"] * 100
    )
    assert estimate["training_usd"] > 0 and set(estimate["by_iteration"]) == {"0", "1"}

    # The end-of-run summary, the run's dashboard and its snapshot say the same.
    assert f"run finished · {spend.describe()}" in printed.getvalue()
    assert f"({spend.difference_pct:+.0f}%)" in spend.describe()
    assert RunSnapshot.read(tmp_path / "run").spend == spend
    from nip.widgets import RunMonitor

    monitor = RunMonitor(tmp_path / "run", start=False)
    assert spend.describe() in monitor.spend_view.value
    assert f"prover {usd(spend.by_agent['prover'])}" in monitor.spend_view.value
    monitor.close()


def test_a_job_that_reports_no_trained_tokens_makes_the_training_cost_unknown_not_zero(
    api, make_tiny_dataset, tmp_path
):
    run(make_tiny_dataset(items=12, train=8), tmp_path / "run", report=False)
    metrics = json.loads((tmp_path / "run" / "metrics" / "train_it0000.json").read_text())
    assert metrics["prover.trained_tokens"] is None
    assert metrics["prover.training_cost_usd"] is None and metrics["training_cost_usd"] is None
    spend = read_spend(tmp_path / "run")
    assert spend.training_usd is None and spend.total_usd is None
    assert spend.inference_usd > 0
    assert "spent unknown" in spend.describe() and "training unknown" in spend.describe()


def test_a_run_on_the_dummy_api_spends_nothing_and_says_so(dummy_params, tmp_path):
    settings = ExperimentSettings(run_dir=tmp_path / "run", show_progress=False)
    build_trainer(dummy_params(), settings).train()
    spend = read_spend(tmp_path / "run")
    assert (spend.inference_usd, spend.training_usd, spend.estimate_usd) == (0.0, 0.0, 0.0)
    assert spend.trained_tokens == {"prover": None, "verifier": None}  # not reported
    assert spend.describe() == (
        "spent $0.0000 (inference $0.0000, training $0.0000) · estimated $0.0000"
    )


def test_a_sweep_totals_its_cells_spend_beside_their_estimates(api, folder_of_grid, capsys):
    import nip

    settings = ExperimentSettings(
        show_progress=False, wandb_mode="disabled", cache="off", prices_usd_per_1m=PRICES
    )
    sweep = nip.sweep("grid.yaml", settings=settings)
    sweep.run()
    spends = sweep_spend(sweep.directory)
    assert len(spends.cells) == 2
    assert all(c.total_usd > 0 and c.estimate_usd > 0 for c in spends.cells.values())
    assert spends.total_usd == pytest.approx(sum(c.total_usd for c in spends.cells.values()))
    text = sweep_status_text(sweep.directory)
    assert spends.describe() in text
    _, table = sweep.compare(split="test")  # both seeds pooled: one series, one iteration
    assert table["spent_usd"].tolist() == [pytest.approx(spends.total_usd)]
    assert table["estimated_usd"].tolist() == [pytest.approx(spends.estimate_usd)]
    from nip.widgets import SweepMonitor

    monitor = SweepMonitor(sweep.directory, start=False)
    assert spends.describe() in monitor.header.value
    monitor.close()
    from nip.cli import main

    assert main(["compare", str(sweep.directory)]) == 0
    assert "spent_usd" in capsys.readouterr().out
    for name in spends.cells:
        assert any(line.startswith(name) and "finished" in line for line in text.splitlines())


@pytest.fixture
def folder_of_grid(make_tiny_dataset, tmp_path, monkeypatch) -> Path:
    """A grid of two seeds of frozen, priced OpenAI agents (inference spend only)."""
    import yaml

    agent = PureTextAgentParameters(model_provider="OpenAI", model_name=MODEL, freeze_agent=True)
    HyperParameters(
        dataset=str(make_tiny_dataset(items=12, train=8)),
        agents={"prover": agent, "verifier": agent},
        rl={"num_iterations": 1, "rollouts_per_iteration": 4},
        text_rl={"test_scheme": "all"},
        nip_protocol={"max_message_rounds": 3},
    ).save(tmp_path / "base.yaml")
    grid = {"name": "spend", "base": "base.yaml", "axes": {"seed": [0, 1]}}
    (tmp_path / "grid.yaml").write_text(yaml.safe_dump(grid))
    monkeypatch.chdir(tmp_path)
    return tmp_path


class PausingTrainer(TrainedTokensBackend):
    """``nip serve``'s trainer: each job succeeds ``PAUSE_S`` after it was created."""

    PAUSE_S = 0.3

    def __init__(self):
        super().__init__()
        self.started: dict[str, float] = {}

    async def create_job(self, spec) -> str:
        job_id = await super().create_job(spec)
        self.started[job_id] = time.monotonic()
        return job_id

    async def get_job(self, job_id: str) -> FineTuneJob:
        if time.monotonic() - self.started[job_id] < self.PAUSE_S:
            return FineTuneJob(job_id, "running")
        return await super().get_job(job_id)


def test_a_self_hosted_job_is_priced_by_its_gpu_time_or_says_its_cost_is_unknown(
    fine_tuning_app, tmp_path
):
    from nip.jobs import FineTuneSpec
    from nip.jobs.self_hosted import SelfHostedFineTuneBackend
    from nip.runs.spend import RunSpend, job_spend

    agent = PureTextAgentParameters(model_provider="SelfHosted", model_name="base")
    with serve(fine_tuning_app(PausingTrainer(), tmp_path / "server", model="base")) as server:
        backend = SelfHostedFineTuneBackend(server.url)
        spec = FineTuneSpec(
            base_model="base",
            examples=[
                {
                    "messages": [
                        {"role": "user", "content": "q"},
                        {"role": "assistant", "content": "a"},
                    ]
                }
            ],
            method="supervised",
        )

        async def job_to_its_end() -> tuple[FineTuneJob, float]:
            began = time.monotonic()
            job_id = await backend.create_job(spec)
            while not (job := await backend.get_job(job_id)).done:
                await asyncio.sleep(0.05)
            return job, time.monotonic() - began

        job, waited_s = asyncio.run(job_to_its_end())
    # The server measures how long the job trained: at least its trainer's pause, and no
    # longer than the client waited for it.
    assert job.status == "succeeded"
    assert PausingTrainer.PAUSE_S <= job.running_s <= waited_s
    hours = job.running_s / 3600

    priced = job_spend("verifier", job, agent, "supervised", gpu_hour_usd=2.5)
    assert priced["verifier.gpu_hours"] == pytest.approx(hours)
    assert priced["verifier.training_cost_usd"] == pytest.approx(hours * 2.5)

    unpriced = job_spend("verifier", job, agent, "supervised")  # no GPU-hour price set
    assert unpriced["verifier.gpu_hours"] == pytest.approx(hours)
    assert unpriced["verifier.training_cost_usd"] is None  # unknown, never 0
    row = {"split": "train", "iteration": 0, "cost_usd": 0.0, **unpriced}
    spend = RunSpend.from_records([row])
    assert spend.gpu_hours == {"verifier": pytest.approx(hours)} and spend.training_usd is None
    assert f"training unknown, {hours:.2f} GPU-hours" in spend.describe()
