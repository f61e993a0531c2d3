"""The paper's comparison on open weights: the ``open/*`` presets and the ``open-ei`` grid,
GPU time priced by the dry run, and OpenAI's fine-tuning closing said before it costs
anything (and when a job is refused)."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from nip.cli import main
from nip.configs import (
    list_grids,
    list_presets,
    load_preset,
    open_model_overrides,
)
from nip.errors import ConfigFileError, FineTuningClosedError, InvalidParameterError
from nip.experiments.gpu_time import GpuTimeReport, ThroughputTable, gpu_time, model_params_b
from nip.jobs.openai_closing import (
    closing_text,
    model_shutdown,
    model_shutdown_notice,
    open_weight_preset,
    openai_fine_tuning_notice,
    refused_job_error,
)
from nip.parameters import HyperParameters
from nip.sweeps.grid import GridSpec
from nip.training.cost_report import CostEstimate, CostLine

PAPER = [p.name for p in list_presets() if p.name.startswith("paper/")]
OPEN_MODEL = open_model_overrides()["agents.*.model_name"]


# ------------------------------------------------------------------------ the presets
@pytest.mark.parametrize("paper", PAPER)
def test_each_paper_preset_has_an_open_weight_twin_with_its_schedule_and_data(paper):
    twin = load_preset(paper.replace("paper/", "open/"))
    original = load_preset(paper)
    assert (twin.rl.num_iterations, twin.rl.rollouts_per_iteration) == (
        original.rl.num_iterations,
        original.rl.rollouts_per_iteration,
    )
    assert twin.dataset == original.dataset and twin.code_validation == original.code_validation
    assert twin.text_rl == original.text_rl and twin.seed == original.seed
    assert twin.interaction_protocol == original.interaction_protocol
    assert {(a.model_provider, a.model_name) for a in twin.agents.values()} == {
        ("SelfHosted", OPEN_MODEL)
    }
    groups = {a: p.shared_model_group for a, p in twin.agents.items()}
    assert groups == {a: p.shared_model_group for a, p in original.agents.items()}


def test_the_open_model_is_named_in_one_file_and_one_set_switches_every_agent():
    files = [p.text() for p in list_presets() if p.name.startswith("open/")]
    assert not any(OPEN_MODEL in text for text in files)  # only open/_model.yaml names it
    debate = load_preset("open/debate-ei").with_overrides(
        {"agents.*.model_name": "Qwen/Qwen2.5-14B-Instruct"}
    )
    assert {a.model_name for a in debate.agents.values()} == {"Qwen/Qwen2.5-14B-Instruct"}


def test_nip_run_set_with_a_star_reaches_every_agent_of_the_preset():
    from nip.cli import build_parser
    from nip.cli._args import load_config as _load_config

    args = build_parser().parse_args(
        ["run", "open/mnip-ei", "--set", "agents.*.model_name=Qwen/Qwen2.5-3B-Instruct"]
    )
    from nip.cli._args import cli_overrides as _overrides

    params = _load_config(args.config).with_overrides(_overrides(args), from_text=True)
    assert {a.model_name for a in params.agents.values()} == {"Qwen/Qwen2.5-3B-Instruct"}
    assert set(params.agents) == {"prover0", "prover1", "verifier"}


def test_a_fragment_is_not_a_preset_and_a_preset_cannot_extend_itself(tmp_path, monkeypatch):
    assert "open/_model" not in {p.name for p in list_presets()}
    import nip.configs as configs

    for folder in configs.PRESET_FOLDERS[1:]:
        (tmp_path / folder).mkdir()
    (tmp_path / "open" / "loop.yaml").write_text("# a loop\nextends: open/loop\n")
    (tmp_path / "open" / "extra.yaml").write_text("# bad\nextends: quickstart\nrl: {}\n")
    monkeypatch.setattr(configs, "_root", lambda: tmp_path)
    with pytest.raises(ConfigFileError, match="extends itself"):
        configs.load_preset("open/loop")
    with pytest.raises(ConfigFileError, match="only extends and set"):
        configs.load_preset("open/extra")


def test_a_star_that_stands_for_nothing_is_refused():
    with pytest.raises(InvalidParameterError, match=r"seed\.\*\.x"):
        load_preset("open/nip-ei").with_overrides({"seed.*.x": 1})


def test_the_open_grid_is_the_six_open_presets_times_three_seeds_and_owns_its_servers():
    spec = GridSpec.load("open-ei")
    cells = spec.cells()
    assert len(cells) == 18 and spec.serve
    assert {c.values["base"] for c in cells} == {
        f"open/{p}-ei" for p in ("nip", "adp", "debate", "mnip", "merlin_arthur", "solo_verifier")
    }
    paper = {c.name: c.hyper_params for c in GridSpec.load("paper-ei").cells()}
    for cell in cells:  # the same runs as the paper's grid, on the open model
        original, params = paper[cell.name], cell.hyper_params
        assert (params.seed, params.rl.num_iterations, params.rl.rollouts_per_iteration) == (
            original.seed,
            original.rl.num_iterations,
            original.rl.rollouts_per_iteration,
        )


def test_nip_presets_lists_the_grids_and_the_open_model(capsys):
    assert main(["presets"]) == 0
    out = capsys.readouterr().out
    for grid in list_grids():
        assert f"{grid.name}" in out and grid.description in out
    assert OPEN_MODEL in out and "open/nip-ei" in out


# ------------------------------------------------------------------------ GPU time
def test_a_model_size_is_read_from_its_name():
    assert model_params_b("Qwen/Qwen2.5-7B-Instruct") == 7
    assert model_params_b("/models/Qwen2.5-1.5B-Instruct") == 1.5
    assert model_params_b("SmolLM2-135M-Instruct") == 0.135
    assert model_params_b("gpt-4o-mini") is None


def _estimate(params: HyperParameters) -> CostEstimate:
    """One iteration of sampling and one job, by hand: 1M prompt, 100k completion and 400k
    training tokens for the verifier, the same sampling for the prover."""
    lines = [
        CostLine(0, "train", agent, "m", prompt_tokens=1_000_000, completion_tokens=100_000)
        for agent in ("prover", "verifier")
    ]
    lines.append(CostLine(0, "fine-tune", "verifier", "m", training_tokens=400_000))
    return CostEstimate("nip", "pure_text_ei", 2, lines=lines)


def test_gpu_time_is_tokens_over_the_tables_rates_scaled_by_model_size(tmp_path):
    (tmp_path / "mine.yaml").write_text(
        "rows:\n  - {gpu: T4, params_b: 1, prefill_tokens_per_s: 10000, "
        "decode_tokens_per_s: 1000, train_tokens_per_s: 2000, job_overhead_s: 60, "
        "source: measured, how: bench/gpu_check.py, date: '2026-11-27'}\n"
    )
    table = ThroughputTable.load(tmp_path / "mine.yaml")
    agent = {"model_provider": "SelfHosted", "model_name": "/m/tiny-2B"}
    params = HyperParameters(agents={"prover": agent, "verifier": agent})
    time = gpu_time(params, _estimate(params), table, gpu="T4")
    # a 2B model at the 1B row's rates halved
    assert time.generation_s == pytest.approx(2 * (2 * 1_000_000 / 10_000 + 2 * 100_000 / 1000))
    assert time.training_s == pytest.approx(2 * 400_000 / 2000 + 60) and time.jobs == 1
    text = str(GpuTimeReport([("run", time)], gpu_hour_usd=2.0))
    assert f"{time.total_h * 2:,.2f}" in text and "T4 1B: measured, 2026-11-27" in text
    assert "ASSUMED" not in text


def test_agents_not_self_hosted_take_no_gpu_time():
    params = load_preset("paper/nip-ei")
    assert gpu_time(params, _estimate(params), ThroughputTable.load()) is None


def test_the_shipped_table_says_every_figure_is_assumed_and_names_the_gpu():
    table = ThroughputTable.load()
    assert {"H100-80GB", "A100-80GB"} <= set(table.gpus())
    assert {row.source for row in table.rows} == {"assumed"}
    params = load_preset("open/nip-ei")
    report = str(GpuTimeReport([("run", gpu_time(params, _estimate(params), table))]))
    assert "ASSUMED, not measured" in report and "H100-80GB" in report


def test_the_dry_run_of_the_open_grid_prices_gpu_hours_for_all_eighteen_cells(capsys):
    code = main(
        [
            "sweep",
            "open-ei",
            "--dry-run",
            "--sample-items",
            "1",
            "--set",
            "dataset=humaneval_cv",  # the shipped dataset: no Hub here
            "--gpu-hour-usd",
            "2.5",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    gpu_part = out.split("GPU time of the SelfHosted agents", 1)[1]
    rows = [line.split() for line in gpu_part.splitlines() if line.split()[:1]]
    cells = [r for r in rows if r[0].endswith(("_seed0", "_seed1", "_seed2"))]
    assert len(cells) == 18
    assert all(float(r[4]) > 0 and float(r[5]) > 0 for r in cells)  # total h, USD
    assert any(r[0] == "total" for r in rows) and "ASSUMED" in gpu_part


def test_a_runs_dry_run_prints_its_gpu_time_on_the_gpu_asked_for(capsys, tmp_path):
    params = load_preset("open/nip-ei").with_overrides(
        {"dataset": "humaneval_cv", "rl.num_iterations": 2, "rl.rollouts_per_iteration": 4}
    )
    params.save(tmp_path / "c.yaml")
    assert main(["run", str(tmp_path / "c.yaml"), "--dry-run", "--gpu", "A100-80GB"]) == 0
    out = capsys.readouterr().out
    assert "GPU time of the SelfHosted agents on one A100-80GB" in out
    assert "--gpu-hour-usd prices it" in out


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--gpu-hour-usd", "cheap"], "--gpu-hour-usd='cheap'"),
        (["--gpu-hour-usd", "-1"], "--gpu-hour-usd='-1'"),
        (["--gpu", "TPU"], "--gpu='TPU'"),
        (["--throughput", "missing.yaml"], "no such file"),
        (["--throughput", "{bad}"], "unknown field"),
    ],
)
def test_a_bad_gpu_option_is_one_line_and_exit_status_two(argv, says, tmp_path, capsys):
    if argv[1] == "{bad}":
        (tmp_path / "bad.yaml").write_text("rows:\n  - {gpu: X, speed: 3}\n")
        argv = [argv[0], str(tmp_path / "bad.yaml")]
    code = main(["run", "quickstart", "--dry-run", *argv])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and says in err


def test_gpu_options_without_a_dry_run_are_refused_before_anything_is_written(tmp_path, capsys):
    code = main(["run", "quickstart", "--run-dir", str(tmp_path / "r"), "--gpu", "A100-80GB"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "only with --dry-run" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("command", ["run", "resume", "sweep"])
def test_gpu_hour_usd_prices_the_gpu_time_of_a_runs_self_hosted_jobs(command):
    from nip.cli import _args, build_parser

    target = {"run": "quickstart", "resume": "a-run-dir", "sweep": "grid.yaml"}[command]
    args = build_parser().parse_args([command, target, "--gpu-hour-usd", "2.5"])
    assert _args.run_settings(args).gpu_hour_usd == 2.5
    args = build_parser().parse_args([command, target])
    assert _args.run_settings(args).gpu_hour_usd is None


# ------------------------------------------------------------------- OpenAI's closing
def test_the_closing_is_told_with_its_dates_as_of_a_day():
    before = closing_text(dt.date(2026, 6, 1))
    assert "since 2026-05-07" in before and "from 2026-07-02" in before
    assert "from 2027-01-06" in before
    assert closing_text(dt.date(2027, 2, 1)) == (
        "OpenAI accepts no new fine-tuning jobs since 2027-01-06"
    )


def test_the_notice_names_the_open_preset_of_the_runs_protocol_and_algorithm():
    debate = load_preset("paper/debate-malt")
    notice = openai_fine_tuning_notice(debate, {"prover0", "verifier"}, dt.date(2026, 11, 27))
    assert "open/debate-malt" in notice and "prover0, verifier" in notice
    assert open_weight_preset(load_preset("paper/solo_verifier-ei")) == "open/solo_verifier-ei"
    # Nothing trained: only the retiring models are said, not the closing of fine-tuning.
    untrained = openai_fine_tuning_notice(debate, set())
    assert "through OpenAI" not in untrained and "OpenAI retires" in untrained
    assert openai_fine_tuning_notice(load_preset("open/nip-ei"), {"prover"}) is None


@pytest.mark.parametrize(
    ("model", "family"),
    [
        ("gpt-4o-mini-2024-07-18", "gpt-4o-mini"),
        ("ft:gpt-4o-mini-2024-07-18:my-org::a1b2c3", "gpt-4o-mini"),
        ("gpt-4o-2024-08-06", "gpt-4o"),
        ("gpt-4.1", "gpt-4.1"),
        ("ft:gpt-4.1-mini-2025-04-14:my-org:verifier:x9", "gpt-4.1-mini"),
        ("gpt-4o-audio-preview", None),
        ("gpt-4.1-nano", None),
        ("gpt-5", None),
    ],
)
def test_a_model_its_snapshots_and_its_fine_tunes_share_their_familys_shutdown(model, family):
    shutdown = model_shutdown(model)
    assert (shutdown and shutdown.family) == family
    if shutdown:  # the date third parties report, not read on OpenAI's page: said so
        assert shutdown.date == dt.date(2027, 1, 14) and shutdown.reported


def test_every_agent_on_a_retiring_model_is_named_frozen_or_not_with_what_to_use_instead():
    params = load_preset("paper/nip-ei").with_overrides(
        {"agents.prover.freeze_agent": True, "agents.verifier.model_name": "gpt-4.1-mini"}
    )
    notice = model_shutdown_notice(params)
    assert "prover on gpt-4o-mini-2024-07-18" in notice and "verifier on gpt-4.1-mini" in notice
    assert notice.count("2027-01-14 (reported") == 2
    assert "open/nip-ei" in notice and "Tinker" in notice and "Together AI" in notice
    moved = params.with_overrides({"agents.*.model_name": "gpt-5"})
    assert model_shutdown_notice(moved) is None


@pytest.mark.parametrize("command", ["plan", "run-dry"])
def test_nip_plan_and_the_dry_run_of_a_paper_preset_say_it_first(command, capsys):
    argv = ["plan", "paper/nip-ei"] if command == "plan" else ["run", "paper/nip-ei", "--dry-run"]
    if command == "run-dry":
        argv += ["--set", "dataset=humaneval_cv", "--sample-items", "1"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "OpenAI no longer accepts new fine-tuning jobs" in err or "since 2027-01-06" in err
    assert "open/nip-ei" in err and "2026-05-07" in err
    assert "prover, verifier on gpt-4o-mini-2024-07-18" in err and "2027-01-14 (reported" in err


def test_a_refusal_that_is_not_about_permission_or_the_closing_is_left_alone():
    assert refused_job_error(400, "invalid training file: line 3") is None
    assert refused_job_error(404, "model 'x' not found") is None
    assert isinstance(refused_job_error(403, "forbidden"), FineTuningClosedError)
    assert isinstance(
        refused_job_error(400, "Fine-tuning is deprecated for this model"), FineTuningClosedError
    )


def _openai_run(dataset: str) -> HyperParameters:
    return load_preset("paper/nip-ei").with_overrides(
        {
            "dataset": dataset,
            "code_validation.apps_difficulty": "interview",
            "rl.num_iterations": 2,
            "rl.rollouts_per_iteration": 2,
            "rl.num_test_iterations": 1,
            "text_rl.min_fine_tune_examples": 1,
            "text_rl.fine_tune_on_all_previous_rollouts": False,
            "pure_text_ei.reward_threshold": 0.0,
            "nip_protocol.max_message_rounds": 3,
        }
    )


def test_a_refused_job_stops_the_run_at_once_keeps_its_rollouts_and_resumes_elsewhere(
    tmp_path, capsys, monkeypatch
):
    from nip.backends import DummyBackend, DummyPolicy
    from nip.testing.server import create_app, serve

    server = serve(create_app(DummyBackend(DummyPolicy(decide_on_turn=3)), fine_tuning_closed=True))
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    run = tmp_path / "run"
    _openai_run("humaneval_cv").save(tmp_path / "c.yaml")
    try:
        code = main(["run", str(tmp_path / "c.yaml"), "--run-dir", str(run), "--quiet"])
        jobs = server.stats().fine_tuning_jobs
    finally:
        server.stop()
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and jobs == 1  # refused once, never retried
    assert err[-1].startswith("nip: error: FineTuningClosedError: the fine-tuning API refused")
    assert "HTTP 403" in err[-1] and f"nip resume {run} --serve" in err[-1]
    assert any("open/nip-ei" in line for line in err[:-1])  # said before the run began
    state = json.loads((run / "state.json").read_text())
    assert (state["iteration"], state["stage"]) == (0, "create_fine_tune_jobs")
    assert (run / "rollouts" / "train_it0000.jsonl").exists()
    # Resumed on another provider (the dummy stands in for a self-hosted model here).
    code = main(
        ["resume", str(run), "--accept-changes", "--set", "agents.*.use_dummy_api=true", "--quiet"]
    )
    assert code == 0
    assert json.loads((run / "state.json").read_text())["stage"] == "done"
    assert (run / "rollouts" / "train_it0000.jsonl").exists()


def test_the_openai_notice_is_for_agents_openai_serves_not_for_its_name_on_the_dummy(
    tmp_path, capsys
):
    config = _openai_run("humaneval_cv").save(tmp_path / "c.yaml")

    assert main(["plan", str(config)]) == 0
    assert "open/nip-ei" in capsys.readouterr().err
    assert main(["plan", str(config), "--set", "agents.*.use_dummy_api=true"]) == 0
    assert "open/nip-ei" not in capsys.readouterr().err  # model_provider OpenAI, served by dummy


@pytest.mark.parametrize("preset", PAPER)
def test_each_paper_preset_says_what_to_use_instead_of_the_models_openai_retires(preset):
    from importlib import resources

    text = (resources.files("nip.configs") / f"{preset}.yaml").read_text(encoding="utf-8")
    instead = preset.replace("paper/", "open/")
    assert f"use {instead} on `nip serve` instead" in text and "2027-01-14" in text
    assert instead in {p.name for p in list_presets()}
    assert "Tinker" in text and "Together AI" in text
