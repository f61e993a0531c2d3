"""Tinker as a model provider, against a stand-in for its SDK's clients (tests/doubles/
tinker_standin.py): a tiny real Llama on the CPU with a real PEFT LoRA, taking and returning
the SDK's own ``tinker.types`` objects and futures. ``nip run`` reaches it through nip's one
seam, ``NIP_TINKER_CLIENTS``, as it would reach Tinker through ``TINKER_API_KEY``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from nip.cli import main
from nip.parameters import HyperParameters
from nip.training.cost_estimate import estimate_cost

pytestmark = pytest.mark.timeout(240)

MODEL = "Qwen/Qwen3-8B"
TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


@pytest.fixture
def dataset(make_tiny_dataset) -> Path:
    return make_tiny_dataset(items=16, train=12)


@pytest.fixture
def standin(monkeypatch, tmp_path) -> Path:
    """nip's Tinker clients are the stand-in's; its checkpoints go to the folder returned."""
    folder = tmp_path / "tinker"
    monkeypatch.setenv("NIP_TINKER_CLIENTS", "doubles.tinker_standin:clients")
    monkeypatch.setenv("NIP_TINKER_STANDIN_DIR", str(folder))
    monkeypatch.delenv("NIP_TINKER_STANDIN_FAIL_RUNS", raising=False)
    return folder


def config(tmp_path: Path, dataset: Path, trainer: str = "pure_text_ei", **verifier) -> Path:
    """Two iterations (one job) with both agents on Tinker; the prover is frozen, the
    verifier trains, on every dialogue (its final decision replaced by the true label: a
    random tiny model decides nothing on its own)."""
    agent = {
        "model_provider": "Tinker",
        "model_name": MODEL,
        "max_tokens_per_message": 8,
        "num_invalid_generation_retries": 0,
        "lora_rank": 8,
    }
    data = {
        "trainer": trainer,
        "dataset": str(dataset),
        "nip_protocol": {"max_message_rounds": 2, "min_message_rounds": 1},
        "rl": {"num_iterations": 2, "rollouts_per_iteration": 4, "lr": 1e-2},
        "text_rl": {
            "min_fine_tune_examples": 1,
            "test_scheme": "none",
            "fine_tune_retry_backoff_s": 0.0,
            "verifier_guess_replacement_proportion": 1.0,
        },
        "pure_text_ei": {"reward_threshold": -100.0},
        # Pairs whose expected rewards differ at all (a tiny model decides now and then).
        "pure_text_malt": {
            "pair_selection_method": "interval",
            "interval_threshold_proportion": 0.0,
        },
        "agents": {"prover": {**agent, "freeze_agent": True}, "verifier": {**agent, **verifier}},
    }
    path = tmp_path / "tinker.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def run(path: Path, run_dir: Path, *sets: str) -> int:
    args = ["run", str(path), "--run-dir", str(run_dir), "--quiet", "--cache", "off"]
    for item in sets:
        args += ["--set", item]
    return main(args)


def saved_group(run_dir: Path, group: str = "verifier") -> dict:
    return json.loads((run_dir / "state.json").read_text())["groups"][group]


def turn_models(run_dir: Path, iteration: int, agent: str = "verifier") -> set[str]:
    lines = (run_dir / "rollouts" / f"train_it{iteration:04d}.jsonl").read_text().splitlines()
    return {t["model"] for line in lines for t in json.loads(line)["turns"] if t["agent"] == agent}


# ---------------------------------------------------------------------- SFT and DPO
def test_an_expert_iteration_run_trains_the_verifier_on_tinker_and_samples_from_its_adapter(
    standin, dataset, tmp_path
):
    assert run(config(tmp_path, dataset), tmp_path / "run") == 0

    group = saved_group(tmp_path / "run")
    (sampler,) = group["model_history"]
    assert sampler.startswith("tinker://") and sampler.endswith("/sampler_weights/verifier-it0")
    assert group["adapter_path"] == sampler.replace("/sampler_weights/", "/weights/")
    assert turn_models(tmp_path / "run", 0) == {MODEL}
    assert turn_models(tmp_path / "run", 1) == {sampler}  # the next iteration's adapter
    events = (tmp_path / "run" / "jobs" / "verifier-it0" / "events.jsonl").read_text()
    losses = [json.loads(e)["data"]["loss"] for e in events.splitlines()]
    assert losses and all(loss > 0 for loss in losses)
    status = json.loads((tmp_path / "run" / "jobs" / "verifier-it0" / "status.json").read_text())
    assert status["trained_tokens"] > 0  # what the steps sent, for the run's training cost
    assert adapter_logprobs(sampler) != adapter_logprobs(None)  # the trained weights sample
    # One training run on Tinker: the client opened before the first dialogue (to check the
    # LoRA) is the one the job trained, not an empty run beside it.
    assert json.loads((standin / "runs.json").read_text()) == 1
    assert status["training_run"] == sampler.removeprefix("tinker://").split("/")[0]


def adapter_logprobs(path: str | None) -> list[float | None]:
    """What the stand-in's sampling client of ``path`` (None: the base model) gives a reply."""
    from doubles.tinker_standin import clients, tokenizer
    from tinker import types

    service, _ = clients()
    sampler = (
        service.create_sampling_client(model_path=path)
        if path
        else service.create_sampling_client(base_model=MODEL)
    ).result()
    tokens = tokenizer()("<|im_start|>assistant\nDecision: accept<|im_end|>")["input_ids"]
    return sampler.compute_logprobs(types.ModelInput.from_ints(tokens)).result()


def test_a_malt_run_trains_the_verifier_with_dpo_against_the_model_that_sampled_the_pairs(
    standin, dataset, tmp_path
):
    path = config(tmp_path, dataset, "pure_text_malt", dpo_beta=0.2)
    assert run(path, tmp_path / "run", "rl.rollouts_per_iteration=8") == 0

    job = tmp_path / "run" / "jobs" / "verifier-it0"
    spec = json.loads((job / "spec.json").read_text())
    assert spec["method"] == "dpo" and spec["dpo_beta"] == 0.2
    assert spec["reference_model"] == MODEL  # the pairs were sampled by the base model
    events = [json.loads(e)["data"] for e in (job / "events.jsonl").read_text().splitlines()]
    assert events and all(e["loss"] > 0 for e in events)
    (sampler,) = saved_group(tmp_path / "run")["model_history"]
    assert turn_models(tmp_path / "run", 1) == {sampler}


# ------------------------------------------------------------------ what is trained
def tokens_weighted(tokenizer, tokens, weights, weight: float) -> str:
    return tokenizer.decode([t for t, w in zip(tokens, weights, strict=True) if w == weight])


def test_the_sft_loss_covers_exactly_the_agents_own_turns_and_their_end_tokens():
    from doubles.tinker_standin import tokenizer

    from nip.jobs.tinker_data import render_supervised

    messages = [
        {"role": "system", "content": "You are the verifier."},
        {"role": "user", "content": "Prover: the code is right."},
        {"role": "assistant", "content": "Question: why?"},
        {"role": "user", "content": "Prover: it returns x + 1."},
        {"role": "assistant", "content": "Decision: accept"},
    ]
    tok = tokenizer()
    tokens, weights = render_supervised(tok, messages)

    assert set(weights) == {0.0, 1.0}
    trained = tokens_weighted(tok, tokens, weights, 1.0)
    assert trained == "Question: why?<|im_end|>\nDecision: accept<|im_end|>\n"
    assert tokens_weighted(tok, tokens, weights, 0.0) == (
        "<|im_start|>system\nYou are the verifier.<|im_end|>\n"
        "<|im_start|>user\nProver: the code is right.<|im_end|>\n<|im_start|>assistant\n"
        "<|im_start|>user\nProver: it returns x + 1.<|im_end|>\n<|im_start|>assistant\n"
    )


PAIRS = [
    {
        "input": {"messages": [{"role": "user", "content": f"Is f(x) = x + {i} right?"}]},
        "preferred_output": [{"role": "assistant", "content": "Decision: accept"}],
        "non_preferred_output": [{"role": "assistant", "content": f"Decision: reject {i}"}],
    }
    for i in range(3)
]


async def test_nips_dpo_loss_equals_trls_on_the_same_pairs_and_model(standin, tmp_path):
    from datasets import Dataset
    from doubles.tinker_standin import clients, tiny_base
    from tinker import types
    from trl import DPOConfig, DPOTrainer

    from nip.jobs.tinker_data import datum, dpo_loss, reference_logprobs, render_preference

    service, _ = clients()
    training = await service.create_lora_training_client(base_model=MODEL, rank=4, seed=0)
    tok = training.get_tokenizer()
    data = [datum(*s) for pair in PAIRS for s in render_preference(tok, pair)]
    # A step of SFT first, so that the policy is not its reference (the base model).
    await training.forward_backward(data[0::2], "cross_entropy")
    await training.optim_step(types.AdamParams(learning_rate=0.05))
    reference = await reference_logprobs(
        await service.create_sampling_client(base_model=MODEL), data
    )
    nip_loss = (await training.forward_backward_custom(data, dpo_loss(0.3, reference))).metrics

    rows = [
        {"prompt": p["input"]["messages"], "chosen": p["preferred_output"],
         "rejected": p["non_preferred_output"]}
        for p in PAIRS
    ]  # fmt: skip
    args = DPOConfig(
        output_dir=str(tmp_path / "trl"),
        beta=0.3,
        per_device_train_batch_size=len(PAIRS),
        report_to=[],
        max_length=None,
        use_cpu=True,
        bf16=False,  # TRL's default runs the reference in bfloat16; the stand-in is float32
    )
    trainer = DPOTrainer(
        model=training.model,
        ref_model=tiny_base(),  # the reference nip's loss was given: the base model
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tok,
    )
    batch = next(iter(trainer.get_train_dataloader()))
    trl_loss = float(trainer.compute_loss(trainer.model, batch))

    assert nip_loss["dpo_loss"] == pytest.approx(trl_loss, abs=1e-4)
    assert abs(trl_loss - 0.6931) > 1e-3  # not log 2: the policy differs from its reference


# ------------------------------------------------------------------------ generation
async def test_sampling_settings_act_and_the_tokens_are_counted(standin):
    from nip.backends import GenerationRequest
    from nip.jobs.tinker_data import chat_tokens
    from nip.providers.tinker import TinkerChatBackend

    backend = TinkerChatBackend(MODEL)
    await backend.wait_for_ready()
    messages = ({"role": "user", "content": "Is the code right?"},)
    greedy = GenerationRequest(MODEL, messages, max_tokens=6, temperature=0.0, n=3)
    result = await backend.generate(greedy)

    assert len({c.text for c in result.completions}) == 1  # temperature 0: greedy
    prompt = chat_tokens((await backend.sampler(MODEL)).get_tokenizer(), messages, prompt=True)
    assert result.usage.prompt_tokens == len(prompt)
    assert 3 <= result.usage.completion_tokens <= 3 * 6
    sampled = await backend.generate(
        GenerationRequest(MODEL, messages, max_tokens=6, temperature=2.0, n=3, seed=1)
    )
    assert len({c.text for c in sampled.completions}) > 1


def test_a_repetition_penalty_is_refused_before_anything_is_sent(standin):
    from nip.errors import InvalidParameterError
    from nip.parameters import PureTextAgentParameters
    from nip.providers import PROVIDERS
    from nip.settings import ExperimentSettings

    agent = PureTextAgentParameters(model_provider="Tinker", model_name=MODEL)
    agent.repetition_penalty = 1.2
    with pytest.raises(InvalidParameterError, match=r"repetition_penalty=1\.2"):
        PROVIDERS["Tinker"].chat(agent, ExperimentSettings())


async def test_a_transient_sampling_failure_is_retried_and_a_refusal_is_not(standin):
    import tinker
    from doubles.tinker_standin import _status_error

    from nip.backends import GenerationRequest
    from nip.backends._retry import RetryPolicy
    from nip.errors import GenerationError
    from nip.providers.tinker import TinkerChatBackend

    backend = TinkerChatBackend(MODEL, retry_policy=RetryPolicy(initial_backoff_s=0.0))
    sampler = await backend.sampler(MODEL)
    busy = _status_error(tinker.InternalServerError, 503, "busy")
    answers = iter([busy, None, _status_error(tinker.BadRequestError, 400, "prompt too long")])
    real_sample = sampler.sample

    def sample(**kwargs):
        error = next(answers)
        if error is not None:
            raise error
        return real_sample(**kwargs)

    sampler.sample = sample
    request = GenerationRequest(MODEL, ({"role": "user", "content": "Hi"},), max_tokens=2)
    assert (await backend.generate(request)).attempts == 2
    with pytest.raises(GenerationError, match="HTTP 400: prompt too long"):
        await backend.generate(request)


# ----------------------------------------------------------------- refused at once
def test_a_model_tinker_does_not_offer_is_refused_before_any_dialogue(
    standin, dataset, tmp_path, capsys
):
    code = run(config(tmp_path, dataset), tmp_path / "run", "agents.*.model_name=Qwen/Qwen9-1T")
    assert code != 0
    error = capsys.readouterr().err
    assert "'Qwen/Qwen9-1T' is not a Tinker model" in error and "Traceback" not in error
    assert not list((tmp_path / "run").glob("rollouts/*.jsonl"))


def test_a_model_tinker_samples_but_cannot_train_is_refused_for_trained_agents_before_sampling(
    standin, dataset, tmp_path, capsys
):
    code = run(config(tmp_path, dataset), tmp_path / "run", "agents.*.model_name=tiny/sample-only")
    assert code != 0
    assert "Tinker samples it but cannot train it" in capsys.readouterr().err
    assert not list((tmp_path / "run").glob("rollouts/*.jsonl"))
    # Frozen agents only sample it.
    sets = (
        "agents.*.model_name=tiny/sample-only",
        "agents.verifier.freeze_agent=true",
        "rl.lr=0.0001",
    )
    assert run(config(tmp_path, dataset), tmp_path / "frozen", *sets) == 0


def test_without_the_key_the_run_says_which_variable_to_set(monkeypatch, dataset, tmp_path, capsys):
    monkeypatch.delenv("NIP_TINKER_CLIENTS", raising=False)
    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    assert run(config(tmp_path, dataset), tmp_path / "run") != 0
    error = capsys.readouterr().err
    assert "TINKER_API_KEY" in error and "Traceback" not in error


def test_a_lora_rank_above_the_models_limit_is_refused_in_one_line_before_any_dialogue(
    standin, dataset, tmp_path, capsys
):
    assert run(config(tmp_path, dataset, lora_rank=128), tmp_path / "run") != 0
    error = capsys.readouterr().err
    assert "lora_rank=128" in error and "exceeds the maximum 64" in error
    assert "Traceback" not in error
    assert not list((tmp_path / "run").glob("rollouts/*.jsonl"))  # nothing was sampled
    assert not (standin / "runs.json").exists()  # nor trained


def test_settings_tinker_cannot_act_on_are_refused_naming_the_setting():
    from nip.errors import InvalidParameterError
    from nip.parameters import PureTextAgentParameters

    for setting, value in [("stack_lora_adapters", True), ("lora_dropout", 0.1)]:
        with pytest.raises(InvalidParameterError, match=rf"{setting}=.*Tinker"):
            PureTextAgentParameters(model_provider="Tinker", model_name=MODEL, **{setting: value})
    with pytest.raises(InvalidParameterError, match="use_lora"):
        PureTextAgentParameters(model_provider="Tinker", model_name=MODEL, use_lora=False)
    # fine_tune_from_scratch acts both ways (a new adapter, or training on from the last state).
    PureTextAgentParameters(model_provider="Tinker", model_name=MODEL, fine_tune_from_scratch=False)


def test_training_on_from_the_previous_state_loads_it_into_the_next_job(standin, dataset, tmp_path):
    path = config(tmp_path, dataset, fine_tune_from_scratch=False)
    assert run(path, tmp_path / "run", "rl.num_iterations=3") == 0

    first, second = saved_group(tmp_path / "run")["model_history"]
    spec = json.loads((tmp_path / "run" / "jobs" / "verifier-it1" / "spec.json").read_text())
    assert spec["previous_adapter"] == first.replace("/sampler_weights/", "/weights/")
    assert second.endswith("/sampler_weights/verifier-it1")


# ----------------------------------------------------------------- failed jobs
@pytest.mark.parametrize("policy", ["retry", "keep_previous", "stop"])
def test_a_failed_job_goes_through_the_failure_policy(
    policy, standin, dataset, tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("NIP_TINKER_STANDIN_FAIL_RUNS", "1")
    code = run(
        config(tmp_path, dataset), tmp_path / "run", f"text_rl.on_fine_tune_failure={policy}"
    )
    group = saved_group(tmp_path / "run")
    (failure, *_) = group["fine_tune_failures"]
    assert failure["job_id"] == "verifier-it0" and "the training request failed" in failure["error"]
    if policy == "retry":
        assert code == 0
        (sampler,) = group["model_history"]
        assert sampler.endswith("/sampler_weights/verifier-it0-2")  # the second attempt
    elif policy == "keep_previous":
        assert code == 0 and group["model_history"] == []
        assert turn_models(tmp_path / "run", 1) == {MODEL}
    else:
        assert code != 0 and "FineTuneStoppedError" in capsys.readouterr().err


# ------------------------------------------------------------------------ resuming
CHILD_ENV = {"PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS)])}


def test_kill_minus_nine_during_a_job_then_resume_trains_it_again_and_goes_on(
    standin, dataset, tmp_path
):
    path = config(tmp_path, dataset, num_epochs=10)  # 20 steps: killed after 2
    run_dir = tmp_path / "run"
    env = {**os.environ, **CHILD_ENV}
    command = [sys.executable, "-m", "nip.cli", "run", str(path), "--run-dir", str(run_dir),
               "--quiet", "--cache", "off"]  # fmt: skip
    child = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    events = run_dir / "jobs" / "verifier-it0" / "events.jsonl"
    try:
        deadline = time.monotonic() + 150
        while not (events.exists() and len(events.read_text().splitlines()) >= 2):
            assert child.poll() is None, child.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "the job never started training"
            time.sleep(0.05)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
        child.stderr.close()
    status = json.loads((run_dir / "jobs" / "verifier-it0" / "status.json").read_text())
    assert status["status"] == "running" and status["training_run"].startswith("run-")

    assert main(["resume", str(run_dir), "--quiet"]) == 0
    (sampler,) = saved_group(run_dir)["model_history"]
    assert sampler.endswith("/sampler_weights/verifier-it0")
    assert turn_models(run_dir, 1) == {sampler}
    # The killed job's run, then its new one: the resume checked no LoRA of its own (the
    # killed job had opened one of that rank on that model).
    assert json.loads((standin / "runs.json").read_text()) == 2


async def test_a_job_whose_process_died_after_saving_is_found_finished_not_trained_again(
    standin, tmp_path
):
    from nip.jobs import FineTuneSpec
    from nip.jobs.tinker import TinkerFineTuneBackend
    from nip.providers.tinker import TinkerChatBackend

    def backend() -> TinkerFineTuneBackend:
        return TinkerFineTuneBackend(tmp_path / "jobs", TinkerChatBackend(MODEL))

    spec = FineTuneSpec(
        MODEL,
        "supervised",
        tuple({"messages": p["input"]["messages"] + p["preferred_output"]} for p in PAIRS),
        job_name="verifier-it0",
        lora_rank=4,
    )
    first = backend()
    job_id = await first.create_job(spec)
    while not (job := await first.get_job(job_id)).done:
        await asyncio.sleep(0.01)
    assert job.status == "succeeded"
    # Killed after Tinker saved the weights, before status.json said so:
    status_file = tmp_path / "jobs" / job_id / "status.json"
    status = json.loads(status_file.read_text())
    status_file.write_text(
        json.dumps({"status": "running", "training_run": status["training_run"]})
    )
    runs = json.loads((standin / "runs.json").read_text())

    found = await backend().get_job(job_id)
    assert (found.status, found.fine_tuned_model) == ("succeeded", job.fine_tuned_model)
    assert found.adapter_path == job.adapter_path
    assert json.loads((standin / "runs.json").read_text()) == runs  # nothing trained again


# ---------------------------------------------------------------------------- prices
def test_the_dry_run_prices_prefill_sampling_and_training_at_tinkers_rates(dataset, tmp_path):
    from nip.providers import tinker

    prefill, sampling, training = tinker.USD_PER_1M[MODEL]
    estimate = estimate_cost(HyperParameters.load(config(tmp_path, dataset)))
    calls = [line for line in estimate.lines if line.stage == "train" and line.usd]
    assert calls
    for line in calls:
        expected = line.prompt_tokens * prefill + line.completion_tokens * sampling
        assert line.usd == pytest.approx(expected / 1e6)
    (job,) = [line for line in estimate.lines if line.stage == "fine-tune"]
    assert job.usd == pytest.approx(job.training_tokens * training / 1e6)
    (note,) = [a for a in estimate.assumptions if a.startswith("Tinker")]
    assert "unverified" in note

    malt = estimate_cost(HyperParameters.load(config(tmp_path, dataset, "pure_text_malt")))
    (dpo,) = [line for line in malt.lines if line.stage == "fine-tune"]
    assert dpo.usd == pytest.approx(dpo.training_tokens * (training + 2 * prefill) / 1e6)


def test_a_runs_cost_prices_the_adapters_turns_as_its_base_model(standin, dataset, tmp_path):
    from nip.providers import tinker

    prefill, sampling, _ = tinker.USD_PER_1M[MODEL]
    assert run(config(tmp_path, dataset), tmp_path / "run") == 0
    metrics = json.loads((tmp_path / "run" / "metrics" / "train_it0001.json").read_text())
    expected = metrics["prompt_tokens"] * prefill + metrics["completion_tokens"] * sampling
    assert metrics["cost_usd"] == pytest.approx(expected / 1e6)


# ------------------------------------------------------------------- paper presets
#: The paper presets made CI-sized: every dialogue's verifier decision is the true label and
#: every dialogue is kept (Expert Iteration), so each group has examples whatever the tiny
#: model samples; MALT's pairs are any two siblings whose expected rewards differ.
SMALL = (
    "rl.num_iterations=2",
    "nip_protocol.min_message_rounds=1",
    "nip_protocol.max_message_rounds=3",
    "text_rl.test_scheme=none",
    "text_rl.min_fine_tune_examples=1",
    "text_rl.verifier_guess_replacement_proportion=1.0",
    "pure_text_ei.reward_threshold=-100",
    "pure_text_malt.pair_selection_method=interval",
    "pure_text_malt.interval_threshold_proportion=0.0",
    "agents.*.max_tokens_per_message=8",
    "agents.*.num_invalid_generation_retries=0",
    "agents.*.lora_rank=8",
)
ON_TINKER = ("agents.*.model_provider=Tinker", f"agents.*.model_name={MODEL}")


def run_preset(preset: str, run_dir: Path, *sets: str) -> int:
    args = ["run", preset, "--run-dir", str(run_dir), "--quiet", "--cache", "off"]
    return main([*args, *(x for s in (*ON_TINKER, *SMALL, *sets) for x in ("--set", s))])


def assert_trained_and_sampled(run_dir: Path, group: str) -> str:
    """The group's one job trained, and the next iteration sampled from its adapter."""
    (sampler,) = saved_group(run_dir, group)["model_history"]
    assert sampler.startswith("tinker://") and sampler.endswith(f"/{group}-it0")
    events = (run_dir / "jobs" / f"{group}-it0" / "events.jsonl").read_text().splitlines()
    assert events and all(json.loads(e)["data"]["loss"] > 0 for e in events)
    assert turn_models(run_dir, 0, group) == {MODEL}
    assert turn_models(run_dir, 1, group) == {sampler}
    return sampler


def test_nip_run_of_the_paper_preset_on_tinker_trains_and_samples_each_iterations_adapter(
    standin, dataset, tmp_path
):
    assert run_preset("paper/nip-ei", tmp_path / "run", f"dataset={dataset}",
                      "rl.rollouts_per_iteration=2") == 0  # fmt: skip
    for group in ("prover", "verifier"):
        assert_trained_and_sampled(tmp_path / "run", group)


def test_nip_run_of_the_malt_preset_on_tinker_trains_each_group_on_its_pairs(
    standin, dataset, tmp_path, capsys
):
    run_dir = tmp_path / "run"
    assert run_preset("paper/nip-malt", run_dir, f"dataset={dataset}",
                      "rl.rollouts_per_iteration=4") == 0  # fmt: skip
    trees = (run_dir / "malt" / "trees_it0000.jsonl").read_text().splitlines()
    pairs = [p["agent"] for tree in trees for p in json.loads(tree)["pairs"]]
    errors = capsys.readouterr().err
    trained = []
    for group in ("prover", "verifier"):
        if group in pairs:  # 4 trees of 2^3 leaves: nearly always, but the samples decide
            spec = json.loads((run_dir / "jobs" / f"{group}-it0" / "spec.json").read_text())
            assert spec["method"] == "dpo" and spec["reference_model"] == MODEL
            assert len(spec["examples"]) == pairs.count(group)
            assert_trained_and_sampled(run_dir, group)
            trained.append(group)
        else:  # no two siblings differed: the run says so, and samples the base model on
            assert f"group {group!r}: too few examples to fine-tune (0 dpo" in errors
            assert saved_group(run_dir, group)["model_history"] == []
            assert turn_models(run_dir, 1, group) == {MODEL}
    assert trained, "no group had a preference pair"


def test_nip_sweep_of_a_paper_grid_on_tinker_trains_and_samples_every_cells_adapters(
    standin, dataset, tmp_path
):
    from nip.runs.sweep_dir import cell_run_dir

    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump({
        "name": "tinker-grid",
        "base": "paper/nip-ei",
        "set": {"dataset": str(dataset), "rl.rollouts_per_iteration": 2},
        "axes": {"seed": [0, 1]},
        "max_parallel": 2,
    }))  # fmt: skip
    sweep_dir = tmp_path / "sweep"
    args = ["sweep", str(grid), "--sweep-dir", str(sweep_dir), "--quiet", "--cache", "off"]
    assert main([*args, *(x for s in (*ON_TINKER, *SMALL) for x in ("--set", s))]) == 0
    samplers = set()
    for cell in ("seed0", "seed1"):
        for group in ("prover", "verifier"):
            samplers.add(assert_trained_and_sampled(cell_run_dir(sweep_dir, cell), group))
    assert len(samplers) == 4  # every cell's groups trained adapters of their own
