"""Together AI as a model provider, against a local fake of its API (nip.testing.together).

The fake answers with the shapes Together documents (github.com/togethercomputer/openapi,
``openapi.yaml`` of 2026-04-28: ``POST /files/upload`` -> ``FileResponse``; ``POST
/fine-tunes`` -> ``FinetuneResponseTruncated``, a 400 ``ErrorData`` for a refusal; ``GET
/fine-tunes/{id}`` -> ``FinetuneResponse`` with ``status`` pending/running/completed/error and
``model_output_name``; ``/events`` -> ``FinetuneListEvents`` with a ``job_error`` event for a
failed job; ``/metrics`` -> ``train/loss`` by ``train/global_step``), with the line formats of
docs.together.ai's data preparation page (conversational ``messages``; preference ``input``,
``preferred_output``, ``non_preferred_output``) and chat under the fine-tuned model's
``model_output_name``, as Together's serverless LoRA inference serves it. ``nip run`` reaches
it through ``TOGETHER_BASE_URL``, as it would reach Together itself.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from nip.cli import main
from nip.configs import list_presets, load_preset
from nip.experiments.cost_estimate import estimate_cost
from nip.parameters import HyperParameters
from nip.testing.together import BASE_MODEL, FAKE_TRAINING_ERROR, FakeTogether
from nip.utils.notices import NipWarning

pytestmark = pytest.mark.timeout(180)

KEY = "together-test-key"


@pytest.fixture
def dataset(make_tiny_dataset) -> Path:
    return make_tiny_dataset(items=16, train=12)


@pytest.fixture
def fakes(monkeypatch):
    """Starts a fake Together AI on loopback, where the run's requests go."""
    servers = []

    def start(**options) -> FakeTogether:
        fake = FakeTogether(api_key=KEY, **options)
        servers.append(fake.serve())
        monkeypatch.setenv("TOGETHER_BASE_URL", servers[-1].base_url)
        monkeypatch.setenv("TOGETHER_API_KEY", KEY)
        return fake

    yield start
    for server in servers:
        server.stop()


def config(tmp_path: Path, dataset: Path, trainer: str = "pure_text_ei", **verifier) -> Path:
    """Two iterations (one fine-tuning job) with both agents on Together AI; the prover is
    frozen, the verifier trains."""
    agent = {"model_provider": "TogetherAI", "model_name": BASE_MODEL}
    data = {
        "trainer": trainer,
        "dataset": str(dataset),
        "nip_protocol": {"max_message_rounds": 3},
        "rl": {"num_iterations": 2, "rollouts_per_iteration": 4, "lr": 2e-4},
        "text_rl": {
            "min_fine_tune_examples": 1,
            "test_scheme": "none",
            "fine_tune_retry_backoff_s": 0.0,
        },
        "pure_text_ei": {"reward_threshold": 0.0},
        "agents": {"prover": {**agent, "freeze_agent": True}, "verifier": {**agent, **verifier}},
    }
    path = tmp_path / "together.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def run(path: Path, run_dir: Path, *sets: str) -> int:
    args = ["run", str(path), "--run-dir", str(run_dir), "--quiet", "--cache", "off"]
    for item in sets:
        args += ["--set", item]
    return main(args)


def saved_group(run_dir: Path, group: str = "verifier") -> dict:
    return json.loads((run_dir / "state.json").read_text())["groups"][group]


# ---------------------------------------------------------------------- SFT and DPO
def test_nip_run_fine_tunes_the_verifier_with_sft_and_switches_it_to_the_new_model(
    fakes, dataset, tmp_path
):
    fake = fakes()
    path = config(tmp_path, dataset, lora_rank=16, lora_alpha_scale=2.0, num_epochs=2)
    assert run(path, tmp_path / "run") == 0

    (request,) = fake.created
    assert request["model"] == BASE_MODEL and request["suffix"] == "verifier-it0"
    assert request["training_method"] == {"method": "sft", "train_on_inputs": "auto"}
    assert request["training_type"] == {
        "type": "Lora",
        "lora_r": 16,
        "lora_alpha": 32,
        "lora_dropout": 0.05,
        "lora_trainable_modules": "all-linear",
    }
    assert (request["n_epochs"], request["learning_rate"], request["batch_size"]) == (
        2,
        2e-4,
        "max",
    )
    plan = json.loads((tmp_path / "run" / "plan.json").read_text())
    shown = plan["iterations"][0]["groups"]
    assert {**next(g for g in shown if g["group"] == "verifier")["job"]} == {
        k: v for k, v in request.items() if k != "training_file"
    }  # the plan shows exactly what Together is sent
    (job,) = fake.jobs.values()
    assert job.status == "completed"
    assert all("messages" in line for line in job.lines)  # the SFT file, as uploaded
    assert saved_group(tmp_path / "run")["model_history"] == [job.output_name]
    # The second iteration's verifier generates with the fine-tuned model, by its name.
    assert job.output_name in fake.chat_models
    assert fake.chat_models.index(job.output_name) > fake.chat_models.index(BASE_MODEL)


def test_a_malt_run_trains_the_verifier_with_dpo_on_preference_pairs(fakes, dataset, tmp_path):
    fake = fakes()
    path = config(tmp_path, dataset, "pure_text_malt", dpo_beta=0.2)
    assert run(path, tmp_path / "run") == 0

    (request,) = fake.created
    assert request["training_method"] == {"method": "dpo", "dpo_beta": 0.2}
    (job,) = fake.jobs.values()
    line = job.lines[0]
    assert set(line) == {"input", "preferred_output", "non_preferred_output"}
    assert line["preferred_output"] != line["non_preferred_output"]
    assert saved_group(tmp_path / "run")["model_history"] == [job.output_name]


def test_the_jobs_loss_and_events_are_read_back(fakes, dataset, tmp_path):
    import asyncio

    from nip.providers.together import TogetherFineTuneBackend

    fake = fakes()
    assert run(config(tmp_path, dataset), tmp_path / "run") == 0
    (job_id,) = fake.jobs
    backend = TogetherFineTuneBackend.from_environment()
    job = asyncio.run(backend.get_job(job_id))
    events = asyncio.run(backend.list_events(job_id))

    assert job.training_loss == 0.75 and job.trained_tokens > 0
    assert [e.data["loss"] for e in events if "loss" in e.data] == [1.25, 0.75]
    assert any(e.data.get("type") == "job_complete" for e in events)


# ------------------------------------------------------------------ refused and failed
def test_a_refused_job_stops_the_run_at_once_and_is_not_retried(fakes, dataset, tmp_path, capsys):
    fake = fakes()  # the fake's base model allows LoRA ranks up to 64
    path = config(tmp_path, dataset, lora_rank=128)
    assert run(path, tmp_path / "run", "text_rl.on_fine_tune_failure=retry") == 2

    assert len(fake.created) == 1 and not fake.jobs  # one creation, refused, never retried
    error = capsys.readouterr().err
    assert "Together AI refused the request: lora_r=128 is above the model's limit" in error


def test_retry_resubmits_a_failed_job_and_the_run_goes_on_with_the_new_model(
    fakes, dataset, tmp_path
):
    fake = fakes(fail_first=1)
    assert run(config(tmp_path, dataset), tmp_path / "run") == 0

    first, second = fake.jobs.values()
    assert (first.status, second.status) == ("error", "completed")
    assert first.lines == second.lines  # the same dataset, resubmitted
    group = saved_group(tmp_path / "run")
    assert group["model_history"] == [second.output_name]
    assert [f["error"] for f in group["fine_tune_failures"]] == [FAKE_TRAINING_ERROR]


def test_keep_previous_keeps_the_base_model_after_a_failed_job(fakes, dataset, tmp_path):
    fake = fakes(fail_first=1)
    path = config(tmp_path, dataset)
    with pytest.warns(NipWarning, match="keeps its previous model"):
        assert run(path, tmp_path / "run", "text_rl.on_fine_tune_failure=keep_previous") == 0

    assert len(fake.jobs) == 1
    assert saved_group(tmp_path / "run")["model_history"] == []
    assert not any(m.startswith("nip-tester/") for m in fake.chat_models)


def test_stop_ends_the_run_naming_the_group_the_job_and_togethers_error(
    fakes, dataset, tmp_path, capsys
):
    fake = fakes(fail_first=1)
    path = config(tmp_path, dataset)
    assert run(path, tmp_path / "run", "text_rl.on_fine_tune_failure=stop") == 2

    (job_id,) = fake.jobs
    error = capsys.readouterr().err
    assert "FineTuneStoppedError" in error and "'verifier'" in error
    assert job_id in error and FAKE_TRAINING_ERROR in error


# ---------------------------------------------------------------------------- prices
def test_the_dry_run_prices_tokens_and_training_from_togethers_published_prices(dataset, tmp_path):
    from nip.providers import together

    hp = HyperParameters.load(config(tmp_path, dataset))
    estimate = estimate_cost(hp)

    calls = [line for line in estimate.lines if line.stage == "train" and line.usd]
    per_million = together.INFERENCE_USD_PER_1M[BASE_MODEL]
    for line in calls:
        expected = line.prompt_tokens * per_million[0] + line.completion_tokens * per_million[1]
        assert line.usd == pytest.approx(expected / 1e6)
    (job,) = [line for line in estimate.lines if line.stage == "fine-tune"]
    assert job.usd == pytest.approx(job.training_tokens * 0.48 / 1e6)  # LoRA SFT, up to 16B
    assert not estimate.unpriced and estimate.total_usd > 0
    (note,) = [a for a in estimate.assumptions if a.startswith("Together AI")]
    assert f"recorded {together.PRICES_READ_ON}" in note and "up to 16B" in note


def test_a_runs_cost_metric_is_priced_at_the_price_its_dry_run_uses(fakes, dataset, tmp_path):
    """In both iterations: the second's verifier generates with its fine-tuned adapter, which
    Together serves serverless at its base model's price (as the dry run counts it)."""
    fake = fakes()
    path = config(tmp_path, dataset)
    dry_run = estimate_cost(HyperParameters.load(path))
    (line, *_) = [line for line in dry_run.lines if line.stage == "train" and line.usd]
    usd_per_token = line.usd / (line.prompt_tokens + line.completion_tokens)  # in = out here
    assert run(path, tmp_path / "run") == 0

    for iteration in (0, 1):
        metrics = json.loads(
            (tmp_path / "run" / "metrics" / f"train_it{iteration:04d}.json").read_text()
        )
        tokens = metrics["prompt_tokens"] + metrics["completion_tokens"]
        assert tokens > 0 and metrics["cost_usd"] == pytest.approx(tokens * usd_per_token)
        assert metrics["verifier.cost_usd"] + metrics["prover.cost_usd"] == pytest.approx(
            metrics["cost_usd"]
        )
    (job,) = fake.jobs.values()
    rollouts = (tmp_path / "run" / "rollouts" / "train_it0001.jsonl").read_text().splitlines()
    models = {turn["model"] for line in rollouts for turn in json.loads(line)["turns"]}
    assert models == {BASE_MODEL, job.output_name}


@pytest.mark.parametrize(
    "output_name",
    [
        "me/Meta-Llama-3.1-8B-Instruct-Reference-verifier-it0-1a2b3c4d",  # base without org
        "me/meta-llama/Meta-Llama-3.1-8B-Instruct-Reference-5e6f7a8b",  # base with its org
    ],
)
def test_a_fine_tuned_adapter_is_priced_as_its_base_model_unless_corrected(output_name):
    from nip.parameters import PureTextAgentParameters
    from nip.providers import inference_price
    from nip.providers.together import INFERENCE_USD_PER_1M

    agent = PureTextAgentParameters(model_provider="TogetherAI", model_name=BASE_MODEL)
    base_price = INFERENCE_USD_PER_1M[BASE_MODEL]

    assert inference_price(agent, output_name, {}) == base_price
    assert inference_price(agent, output_name, {BASE_MODEL: (1.0, 2.0)}) == (1.0, 2.0)
    assert inference_price(agent, output_name, {output_name: (3.0, 4.0)}) == (3.0, 4.0)
    # A name of no base model in the table stays unpriced rather than guessed.
    assert inference_price(agent, "me/Some-Other-Model-7B-1a2b3c4d", {}) is None
    assert inference_price(agent, "me/Meta-Llama-3.1-8B-Instruct-Referenceish-1a2b", {}) is None


def test_a_dpo_job_is_priced_at_togethers_dpo_rate(dataset, tmp_path):
    hp = HyperParameters.load(config(tmp_path, dataset, "pure_text_malt"))
    (job,) = [line for line in estimate_cost(hp).lines if line.stage == "fine-tune"]
    assert job.usd == pytest.approx(job.training_tokens * 1.20 / 1e6)


# -------------------------------------------------------------------- paper presets
#: The README's one --set that moves a paper preset's agents to Together AI.
TO_TOGETHER = f"agents.*={{model_provider: TogetherAI, model_name: {BASE_MODEL}}}"


@pytest.mark.parametrize("preset", [p.name for p in list_presets() if p.name.startswith("paper/")])
def test_a_paper_preset_moves_to_together_ai_with_one_set(preset):
    from nip.parameters.overrides import parse_override

    params = load_preset(preset)
    moved = params.with_overrides(dict([parse_override(TO_TOGETHER)]), from_text=True)
    for name, agent in moved.agents.items():
        assert (agent.model_provider, agent.model_name) == ("TogetherAI", BASE_MODEL)
        # Everything else the preset says of the agent stays (the provers' shared group).
        assert agent.shared_model_group == params.agents[name].shared_model_group


def test_fine_tuning_without_the_key_says_which_variable_to_set(monkeypatch):
    from nip.errors import FineTuneError
    from nip.providers.together import TogetherFineTuneBackend

    monkeypatch.delenv("TOGETHER_API_KEY", raising=False)
    with pytest.raises(FineTuneError, match="needs the TOGETHER_API_KEY variable"):
        TogetherFineTuneBackend.from_environment()


def test_a_transient_failure_is_retried_and_a_refusal_is_not(fakes):
    """A 5xx (or 429, or a lost connection) may pass: tried again; a 4xx is Together's
    answer: raised at once with its message."""
    import asyncio

    from nip.errors import FineTuneError
    from nip.jobs import FineTuneSpec
    from nip.providers.together import TogetherFineTuneBackend

    fake = fakes()
    backend = TogetherFineTuneBackend.from_environment()
    backend.backoff_s = 0.0
    calls = {"n": 0}
    respond = fake.respond

    async def flaky(method, path, *args):
        calls["n"] += 1
        if path.endswith("/files/upload") and calls["n"] < 3:
            from nip.testing._chat import error_reply

            return error_reply(503, "overloaded")
        return await respond(method, path, *args)

    fake.respond = flaky
    line = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}
    job_id = asyncio.run(backend.create_job(FineTuneSpec(BASE_MODEL, "supervised", (line,))))
    assert job_id in fake.jobs and calls["n"] == 4  # two 503s, the upload, the job

    unknown = FineTuneSpec("some/model-7B", "supervised", (line,))
    with pytest.raises(FineTuneError, match="refused the request: Model 'some/model-7B'"):
        asyncio.run(backend.create_job(unknown))
    assert calls["n"] == 6 and len(fake.created) == 2  # the upload, one refused creation
