"""Together AI as a model provider, through its SDK, against a test double of its API.

The double (tests/doubles/together.py) is built from Together's OpenAPI description
(github.com/togethercomputer/openapi ``openapi.yaml`` at 090263a, 2026-04-28): request bodies
checked against its schemas, answers in its shapes, every job status of its enum; and from the
``together`` SDK 3.1 where the SDK goes further (its upload flow, ``user_error``, events
spelled ``JOB_ERROR``/``Error``). ``nip run`` reaches it through ``TOGETHER_BASE_URL``, as the
SDK reaches Together itself.
"""

from __future__ import annotations

import asyncio
import json
import typing
from pathlib import Path

import pytest
import yaml

from nip.cli import main
from nip.configs import list_presets, load_preset
from nip.errors import FineTuneError
from nip.jobs import FineTuneSpec
from nip.parameters import HyperParameters
from nip.providers.together import STATUS_MAP, TogetherFineTuneBackend, job_request
from nip.training.cost_estimate import estimate_cost
from nip.utils.notices import NipWarning
from tests.doubles.together import (
    BASE_MODEL,
    CHAT_ONLY_MODEL,
    FAKE_TRAINING_ERROR,
    FakeTogether,
    component,
    description,
    schema_errors,
)

pytestmark = pytest.mark.timeout(180)

KEY = "together-test-key"
LINE = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}


@pytest.fixture
def dataset(make_tiny_dataset) -> Path:
    return make_tiny_dataset(items=16, train=12)


@pytest.fixture
def fakes(monkeypatch):
    """Starts a Together AI double on loopback, where the run's requests go."""
    servers = []

    def start(**options) -> FakeTogether:
        fake = FakeTogether(api_key=KEY, **options)
        servers.append(fake.serve())
        monkeypatch.setenv("TOGETHER_BASE_URL", servers[-1].url)
        monkeypatch.setenv("TOGETHER_API_KEY", KEY)
        return fake

    yield start
    for server in servers:
        server.stop()


def backend(fake: FakeTogether) -> TogetherFineTuneBackend:
    """The backend of a run, its retries quick."""
    from nip.backends._retry import RetryPolicy

    built = TogetherFineTuneBackend.from_environment()
    built.retry = RetryPolicy(max_retries=3, initial_backoff_s=0.0)
    return built


def config(tmp_path: Path, dataset: Path, trainer: str = "pure_text_ei", **verifier) -> Path:
    """Two iterations (one fine-tuning job) with both agents on Together AI; the prover is
    frozen, the verifier trains (it speaks first: its supervisor message is the user turn
    Together's format wants before its first turn)."""
    agent = {"model_provider": "TogetherAI", "model_name": BASE_MODEL}
    verifier = {"use_supervisor_message": "first", **verifier}
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

    (request,) = fake.created  # the body the SDK built, checked against the description
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
    shown = next(g for g in plan["iterations"][0]["groups"] if g["group"] == "verifier")["job"]
    # The plan shows exactly what the SDK is asked for.
    spec = FineTuneSpec(BASE_MODEL, "supervised", (), "verifier-it0", 2, 2e-4, lora_rank=16,
                        lora_alpha=32.0, seed=shown["random_seed"])  # fmt: skip
    assert shown == job_request(spec)
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
    assert request["training_method"]["method"] == "dpo"
    assert request["training_method"]["dpo_beta"] == 0.2
    (job,) = fake.jobs.values()
    line = job.lines[0]
    assert set(line) == {"input", "preferred_output", "non_preferred_output"}
    assert line["preferred_output"] != line["non_preferred_output"]
    assert saved_group(tmp_path / "run")["model_history"] == [job.output_name]


def test_the_jobs_loss_and_events_are_read_back(fakes, dataset, tmp_path):
    fake = fakes()
    assert run(config(tmp_path, dataset), tmp_path / "run") == 0
    (job_id,) = fake.jobs
    jobs = TogetherFineTuneBackend.from_environment()
    job = asyncio.run(jobs.get_job(job_id))
    events = asyncio.run(jobs.list_events(job_id))

    assert job.training_loss == 0.75 and job.trained_tokens > 0
    assert [e.data["loss"] for e in events if "loss" in e.data] == [1.25, 0.75]
    assert any(e.data.get("type") == "job_complete" for e in events)


# ------------------------------------------------------------------------- statuses
def test_every_job_status_of_the_sdk_and_the_description_maps_to_one_of_nips():
    from together.lib.types.fine_tuning import COMPLETED_STATUSES, FinetuneJobStatus
    from together.types.finetune_response import FinetuneResponse

    literal = set(typing.get_args(FinetuneResponse.model_fields["status"].annotation))
    enum = {status.value for status in FinetuneJobStatus}
    described = set(description()["components"]["schemas"]["FinetuneJobStatus"]["enum"])
    assert literal | enum | described == set(STATUS_MAP)
    # What the SDK counts as ended, nip counts as ended.
    ended = {STATUS_MAP[s.value] for s in COMPLETED_STATUSES}
    assert ended == {"succeeded", "failed", "cancelled"}


@pytest.mark.parametrize("ending", ["compressing", "uploading", "cancel_requested"])
def test_a_job_in_any_status_of_the_sdk_is_followed_to_its_end(fakes, ending):
    fake = fakes(script=("pending", "queued", "running", ending, "completed"))
    jobs = backend(fake)

    async def follow() -> list[str]:
        job_id = await jobs.create_job(FineTuneSpec(BASE_MODEL, "supervised", (LINE,)))
        return [(await jobs.get_job(job_id)).status for _ in range(5)]

    assert asyncio.run(follow()) == ["pending", "pending", "running", "running", "succeeded"]


def test_a_status_nobody_knows_ends_the_wait_with_a_clear_error(fakes):
    fake = fakes(script=("pending", "paused_for_review"))
    jobs = backend(fake)

    async def wait() -> None:
        job_id = await jobs.create_job(FineTuneSpec(BASE_MODEL, "supervised", (LINE,)))
        for _ in range(3):
            await jobs.get_job(job_id)

    with pytest.raises(FineTuneError, match="as 'paused_for_review', a status nip does not know"):
        asyncio.run(wait())


@pytest.mark.parametrize("sdk_spelling", [False, True], ids=["description", "sdk"])
@pytest.mark.parametrize("failure", ["error", "user_error"])
def test_a_failed_jobs_reason_is_read_whatever_its_spelling(fakes, failure, sdk_spelling):
    fake = fakes(fail_first=1, failure=failure, sdk_spelling=sdk_spelling)
    jobs = backend(fake)

    async def fail() -> tuple[str, str | None]:
        job_id = await jobs.create_job(FineTuneSpec(BASE_MODEL, "supervised", (LINE,)))
        job = await jobs.get_job(job_id)
        while not job.done:
            job = await jobs.get_job(job_id)
        return job.status, job.error

    assert asyncio.run(fail()) == ("failed", FAKE_TRAINING_ERROR)


def test_progress_is_read_once_more_when_a_job_ends_and_never_for_an_empty_id(fakes):
    fake = fakes(fail_first=1)
    jobs = backend(fake)

    async def watch() -> tuple[list, int]:
        job_id = await jobs.create_job(FineTuneSpec(BASE_MODEL, "supervised", (LINE,)))
        while not (await jobs.get_job(job_id)).done:
            await jobs.list_events(job_id)
        last = await jobs.list_events(job_id)  # read once more after the job's end
        before = len(fake.requests)
        for _ in range(5):  # a run's watcher polls on through the failure's back-off
            assert await jobs.list_events(job_id) == last
            assert await jobs.list_events("") == []
        return last, len(fake.requests) - before

    last, requests = asyncio.run(watch())
    assert any(e.data.get("type") == "job_error" for e in last) and requests == 0


# ------------------------------------------------------------------ refused and failed
@pytest.mark.parametrize(
    ("setting", "said"),
    [
        (f"agents.verifier.model_name={CHAT_ONLY_MODEL}", "does not fine-tune"),
        ("agents.verifier.lora_rank=128", "lora_rank=128 is above"),
    ],
    ids=["chat-only model", "rank above the limit"],
)
def test_what_together_cannot_train_is_refused_before_the_first_dialogue(
    fakes, dataset, tmp_path, capsys, setting, said
):
    fake = fakes()  # the double's base model allows LoRA ranks up to 64
    assert run(config(tmp_path, dataset), tmp_path / "run", setting) == 2

    assert said in capsys.readouterr().err
    assert not fake.chat_models and not fake.files and not fake.created  # nothing paid for


def test_a_refused_job_stops_the_run_at_once_and_is_not_retried(fakes, dataset, tmp_path, capsys):
    fake = fakes(max_lora_rank=64)
    fake.refuse_jobs = "Insufficient balance for this job"  # past every check nip can make
    path = config(tmp_path, dataset)
    assert run(path, tmp_path / "run", "text_rl.on_fine_tune_failure=retry") == 2

    assert len(fake.created) == 1 and not fake.jobs  # one creation, refused, never retried
    error = capsys.readouterr().err
    assert "Together AI refused the job" in error and "Insufficient balance" in error


def test_a_line_togethers_format_does_not_take_is_refused_before_anything_is_uploaded(fakes):
    fake = fakes()
    twice = {
        "messages": [{"role": "user", "content": "q"}, *[{"role": "assistant", "content": "a"}] * 2]
    }
    with pytest.raises(FineTuneError, match=r"line 2 .*two assistant messages in a row"):
        asyncio.run(backend(fake).create_job(FineTuneSpec(BASE_MODEL, "supervised", (LINE, twice))))
    assert not fake.files and not fake.created


@pytest.mark.parametrize(
    ("protocol", "trained", "verifier_first"),
    [("nip", "verifier", True), ("adp", "prover", True), ("debate", "prover0", False)],
)
def test_a_trained_agent_speaking_first_with_no_user_turn_is_refused_before_any_dialogue(
    protocol, trained, verifier_first, fakes, dataset, tmp_path, capsys
):
    """Under nip the verifier speaks first, under adp the prover, under debate the provers
    unless the verifier is first: prompted by a system message alone, their lines would
    have no user turn before their first turn."""
    fake = fakes()
    agent = {"model_provider": "TogetherAI", "model_name": BASE_MODEL}
    names = ("prover0", "prover1", "verifier") if protocol == "debate" else ("prover", "verifier")
    agents = {name: {**agent, "freeze_agent": name != trained} for name in names}
    path = config(tmp_path, dataset)
    data = {**yaml.safe_load(path.read_text()), "interaction_protocol": protocol, "agents": agents,
            "protocol_common": {"verifier_first": verifier_first}}  # fmt: skip
    path.write_text(yaml.safe_dump(data))
    assert run(path, tmp_path / "run") != 0
    error = capsys.readouterr().err
    assert f"agents.{trained}.use_supervisor_message='none' is not allowed" in error
    assert "'first' or 'all'" in error and "Traceback" not in error
    assert not list((tmp_path / "run").glob("rollouts/*.jsonl")) and not fake.files
    # nip's own check refuses such a line too, whoever builds it.
    line = {"messages": [{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}]}
    with pytest.raises(FineTuneError, match="no user turn before the first assistant turn"):
        asyncio.run(backend(fake).create_job(FineTuneSpec(BASE_MODEL, "supervised", (line,))))


@pytest.mark.parametrize(("protocol", "unprompted"), [("mnip", True), ("debate", False)])
def test_a_prover_answering_second_is_refused_where_it_cannot_read_the_first_answer(
    protocol, unprompted
):
    """Sequential provers, the verifier last: under mnip (private channels) the second prover's
    first turn comes before any message it can read, as the first's does; under debate it
    reads the first prover's answer, which is its user turn."""
    from nip.parameters import HyperParameters
    from nip.protocols import build_protocol_handler
    from nip.providers.together import first_turn_problem

    handler = build_protocol_handler(HyperParameters.from_dict({
        "interaction_protocol": protocol, "protocol_common": {"verifier_first": False},
        f"{protocol}_protocol": {"sequential": True},
    }))  # fmt: skip
    assert first_turn_problem(handler, "prover0", "none") is not None
    problem = first_turn_problem(handler, "prover1", "none")
    assert (problem is not None) == unprompted
    if unprompted:
        assert "agents.prover1.use_supervisor_message='none' is not allowed" in str(problem)
    assert first_turn_problem(handler, "prover1", "first") is None
    assert first_turn_problem(handler, "verifier", "none") is None


def test_with_its_supervisor_message_a_first_speakers_lines_have_that_user_turn(
    fakes, dataset, tmp_path
):
    fake = fakes()
    assert run(config(tmp_path, dataset), tmp_path / "run") == 0  # use_supervisor_message=first

    (job,) = fake.jobs.values()
    for line in job.lines:
        system, first, *_ = line["messages"]
        assert (system["role"], first["role"]) == ("system", "user")
        assert first["name"] == "Supervisor"  # the message the verifier's first prompt ended with


def test_the_sdks_file_checker_refuses_a_file_before_it_is_uploaded(fakes):
    fake = fakes()
    with pytest.raises(FineTuneError, match="file check refused the training file: File is empty"):
        asyncio.run(backend(fake).create_job(FineTuneSpec(BASE_MODEL, "supervised", ())))
    assert not fake.files


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


def test_a_retried_job_reuses_its_file_and_the_finished_run_deletes_it(fakes, dataset, tmp_path):
    fake = fakes(fail_first=1)
    assert run(config(tmp_path, dataset), tmp_path / "run") == 0

    (file_id,) = fake.files  # uploaded once
    assert [job["training_file"] for job in fake.created] == [file_id, file_id]
    assert fake.deleted == [file_id]
    # The run's progress watcher never asked for the events of a job with no id.
    assert not any(path.startswith("/v1/fine-tunes//") for _, path in fake.requests)


def test_a_resumed_process_uploading_the_same_file_gets_togethers_copy(fakes):
    """Another process (a resumed run) does not know the file's id: Together answers the
    upload of the same checksum with it (409), and the SDK takes that copy."""
    fake = fakes()
    spec = FineTuneSpec(BASE_MODEL, "supervised", (LINE,))
    first, resumed = backend(fake), backend(fake)
    asyncio.run(first.create_job(spec))
    asyncio.run(resumed.create_job(spec))

    (file_id,) = fake.files
    assert first.uploaded == resumed.uploaded and list(resumed.uploaded.values()) == [file_id]


def test_a_resumed_run_deletes_the_files_a_killed_process_uploaded(fakes, tmp_path):
    fake = fakes()
    spec = FineTuneSpec(BASE_MODEL, "supervised", (LINE,))
    killed = TogetherFineTuneBackend.from_environment(tmp_path / "run")
    asyncio.run(killed.create_job(spec))  # then killed: its run never ended
    (file_id,) = fake.files
    assert not fake.deleted

    resumed = TogetherFineTuneBackend.from_environment(tmp_path / "run")  # a new process
    assert resumed.uploaded == killed.uploaded  # read from the run's folder
    asyncio.run(resumed.end_run())
    assert fake.deleted == [file_id] and resumed.uploaded == {}
    assert TogetherFineTuneBackend.from_environment(tmp_path / "run").uploaded == {}


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
def test_the_dry_run_prices_tokens_and_training_from_togethers_published_prices(
    dataset, tmp_path, monkeypatch
):
    from nip.providers import together

    monkeypatch.delenv("TOGETHER_API_KEY", raising=False)  # no request leaves the machine
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
    assert f"whether Together fine-tunes {BASE_MODEL} is not checked" in note


def test_the_dry_run_says_when_together_cannot_fine_tune_a_model(fakes, dataset, tmp_path, capsys):
    fake = fakes()
    chat_only = f"agents.verifier.model_name={CHAT_ONLY_MODEL}"
    assert main(["run", str(config(tmp_path, dataset)), "--dry-run", "--set", chat_only]) == 0

    out = capsys.readouterr().out
    assert f"Together AI does not fine-tune {CHAT_ONLY_MODEL}: freeze its agents" in out
    assert f"Together fine-tunes {BASE_MODEL} (LoRA rank up to 64)" in out
    assert not fake.chat_models and not fake.files  # a dry run pays for nothing


def test_the_dry_run_warns_of_a_trained_agent_the_run_would_refuse_before_its_first_dialogue(
    dataset, tmp_path, capsys, monkeypatch
):
    """The verifier speaks first under nip: with no supervisor message, one line says the
    paid run would refuse it (as nip plan does); with one, nothing is said."""
    monkeypatch.delenv("TOGETHER_API_KEY", raising=False)  # no request leaves the machine
    refused = config(tmp_path, dataset, use_supervisor_message="none")
    for command in (["run", str(refused), "--dry-run"], ["plan", str(refused)]):
        assert main(command) == 0
        err = capsys.readouterr().err
        (line,) = [line for line in err.splitlines() if "use_supervisor_message" in line]
        assert line.startswith("nip: warning: agents.verifier.use_supervisor_message='none'")
        assert "'first' or 'all'" in line
    assert main(["run", str(config(tmp_path, dataset)), "--dry-run"]) == 0
    assert "use_supervisor_message" not in capsys.readouterr().err


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


def test_a_dpo_job_is_priced_at_togethers_dpo_rate(dataset, tmp_path, monkeypatch):
    monkeypatch.delenv("TOGETHER_API_KEY", raising=False)
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
    monkeypatch.delenv("TOGETHER_API_KEY", raising=False)
    with pytest.raises(FineTuneError, match="needs the TOGETHER_API_KEY variable"):
        TogetherFineTuneBackend.from_environment()


def test_a_transient_failure_is_retried_and_a_refusal_is_not(fakes):
    """A 5xx (or 429, or a lost connection) may pass: tried again through nip's retry
    policy; a 4xx is Together's answer: raised at once with its message."""
    from nip.testing._chat import json_reply

    fake = fakes()
    jobs = backend(fake)
    calls = {"n": 0}
    respond = fake.respond

    async def flaky(method, path, *args, **kwargs):
        calls["n"] += 1
        if path == "/v1/files" and calls["n"] < 4:
            return json_reply({"error": {"message": "overloaded", "type": "server_error"}}, 503)
        return await respond(method, path, *args, **kwargs)

    fake.respond = flaky
    job_id = asyncio.run(jobs.create_job(FineTuneSpec(BASE_MODEL, "supervised", (LINE,))))
    assert job_id in fake.jobs
    assert [p for _, p in fake.requests].count("/v1/files") == 1  # after two 503s

    fake.refuse_jobs = "Model 'x' is not supported"
    other = FineTuneSpec(BASE_MODEL, "supervised", (LINE, LINE))
    with pytest.raises(FineTuneError, match=r"refused the job .*HTTP 400.*is not supported"):
        asyncio.run(jobs.create_job(other))
    assert len(fake.created) == 2  # one refused creation, not retried


# ----------------------------------------------------------- the SDK, keys and the double
def test_a_bad_key_is_refused_in_one_line_without_the_key(fakes, monkeypatch):
    from nip.backends import GenerationRequest
    from nip.errors import AuthenticationError
    from nip.parameters import PureTextAgentParameters
    from nip.providers import together
    from nip.settings import ExperimentSettings

    fake = fakes()
    monkeypatch.setenv("TOGETHER_API_KEY", "wrong-key-1234")
    jobs = TogetherFineTuneBackend.from_environment()
    with pytest.raises(FineTuneError, match="HTTP 401: Invalid API key") as refused:
        asyncio.run(jobs.check_job(FineTuneSpec(BASE_MODEL, "supervised", ())))
    assert "wrong-key-1234" not in str(refused.value) and not fake.files

    agent = PureTextAgentParameters(model_provider="TogetherAI", model_name=BASE_MODEL)
    chat = together.PROVIDER.chat(agent, ExperimentSettings())
    request = GenerationRequest(model=BASE_MODEL, messages=({"role": "user", "content": "hi"},))
    with pytest.raises(AuthenticationError, match="HTTP 401") as refused:
        asyncio.run(chat.generate(request))
    assert "wrong-key-1234" not in str(refused.value)


def test_chat_goes_through_one_sdk_client_per_loop_made_once(fakes):
    from nip.backends import GenerationRequest
    from nip.parameters import PureTextAgentParameters
    from nip.providers import together
    from nip.settings import ExperimentSettings

    fake = fakes()
    agent = PureTextAgentParameters(model_provider="TogetherAI", model_name=BASE_MODEL)
    chat = together.PROVIDER.chat(agent, ExperimentSettings())
    request = GenerationRequest(model=BASE_MODEL, messages=({"role": "user", "content": "hi"},))

    async def twice() -> list[object]:
        clients = []
        for _ in range(3):
            result = await chat.generate(request)
            assert result.completions[0].text
            (state,) = chat._loops.values()
            clients.append(state.client)  # the loop's SDK client
        return clients

    first, *others = asyncio.run(twice())
    assert type(first).__name__ == "AsyncTogether" and all(c is first for c in others)
    assert fake.chat_models == [BASE_MODEL] * 3


def test_the_doubles_answers_are_what_the_description_says(fakes):
    fake = fakes()
    jobs = backend(fake)
    job_id = asyncio.run(jobs.create_job(FineTuneSpec(BASE_MODEL, "supervised", (LINE,))))
    job = fake.jobs[job_id]
    file_id = job.request["training_file"]
    while job.status != "completed":
        look = fake._look(job)
        assert not schema_errors(look, *component("FinetuneResponse")), schema_errors(
            look, *component("FinetuneResponse")
        )
    assert not schema_errors(fake._truncated(job), *component("FinetuneResponseTruncated"))
    assert not schema_errors({"data": job.events}, *component("FinetuneListEvents"))
    assert not schema_errors(fake._file_response(file_id), *component("FileResponse"))
    limits = json.loads(fake._limits(BASE_MODEL).body)
    assert not schema_errors(limits, *component("FineTuneModelLimits"))


def test_the_double_refuses_a_job_body_the_description_refuses(fakes):
    import os

    import httpx

    fakes()
    url, headers = (
        f"{os.environ['TOGETHER_BASE_URL']}/v1/fine-tunes",
        {"Authorization": f"Bearer {KEY}"},
    )
    missing = httpx.post(url, json={"training_file": "file-1"}, headers=headers)
    assert missing.status_code == 400 and "'model' is a required property" in missing.text
    typed = {"training_file": "f", "model": BASE_MODEL, "n_epochs": "two"}
    wrong = httpx.post(url, json=typed, headers=headers)
    assert wrong.status_code == 400 and "n_epochs: 'two' is not of type 'integer'" in wrong.text
