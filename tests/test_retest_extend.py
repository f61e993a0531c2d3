"""Re-testing a finished run's saved models, and extending a finished run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nip.cli import main
from nip.errors import InvalidParameterError
from nip.experiments.extend import extend_run, extension_schedule
from nip.experiments.retest import iteration_models, retest
from nip.parameters import HyperParameters, PureTextAgentParameters
from nip.settings import ExperimentSettings
from nip.training.trainer import build_trainer
from nip.viz.compare_runs import comparison_table


def _params(dataset: Path, iterations: int) -> HyperParameters:
    dummy = PureTextAgentParameters(use_dummy_api=True)
    return HyperParameters(
        dataset=str(dataset),
        agents={"prover": dummy, "verifier": dummy},
        rl={"num_iterations": iterations, "rollouts_per_iteration": 4},
        text_rl={"min_fine_tune_examples": 1, "test_scheme": "all"},
        nip_protocol={"max_message_rounds": 3},
    )


def _settings(run_dir: Path) -> ExperimentSettings:
    return ExperimentSettings(run_dir=run_dir, show_progress=False, wandb_mode="disabled")


def _run(dataset: Path, run_dir: Path, iterations: int) -> Path:
    build_trainer(_params(dataset, iterations), _settings(run_dir)).train()
    return run_dir


def _files(run_dir: Path) -> dict[str, str]:
    return {
        p.relative_to(run_dir).as_posix(): p.read_text()
        for p in sorted(run_dir.glob("*/*.jsonl"))
        if p.parts[-2] in ("rollouts", "fine_tune")
    }


@pytest.fixture(scope="module")
def dataset(make_tiny_dataset) -> Path:
    return make_tiny_dataset(items=16, train=12)


def test_an_extended_run_equals_a_run_that_asked_for_all_its_iterations(dataset, tmp_path):
    straight = _run(dataset, tmp_path / "straight", 3)
    extended = _run(dataset, tmp_path / "extended", 1)
    trainer = extend_run(extended, 2, _settings(extended))
    state = trainer.train()
    assert (state.stage, state.iteration) == ("done", 2)
    assert _files(extended) == _files(straight)
    saved = json.loads((extended / "hyper_params.json").read_text())
    assert saved["rl"]["num_iterations"] == 3
    assert (
        json.loads((extended / "hyper_params.before-0.json").read_text())["rl"]["num_iterations"]
        == 1
    )


def test_the_extension_schedule_is_shown_before_anything_runs(dataset, tmp_path):
    run_dir = _run(dataset, tmp_path / "run", 1)
    text = extension_schedule(run_dir, 2)
    assert "rl.num_iterations 1 -> 3" in text
    assert "iteration 0: fine-tune prover, verifier" in text
    assert "iteration 2: sample 4 dialogues, test (1 pass(es))" in text
    assert json.loads((run_dir / "hyper_params.json").read_text())["rl"]["num_iterations"] == 1


def test_from_sampling_extends_as_the_originals_force_more_iterations(dataset, tmp_path):
    """The original restarted a finished run at sampling: no job learnt from its last
    iteration's dialogues alone, and the next iteration sampled with the models the run had
    finished with. The plan says so: what ran stays as it ran."""
    run_dir = _run(dataset, tmp_path / "run", 1)
    schedule = extension_schedule(run_dir, 2, from_sampling=True)
    assert "iteration 0: not fine-tuned on by itself" in schedule
    assert "iteration 1: sample 4 dialogues, test (1 pass(es)), fine-tune prover, verifier" in (
        schedule
    )
    trainer = extend_run(run_dir, 2, _settings(run_dir), from_sampling=True)
    assert [step.fine_tunes for step in trainer.plan] == [False, True, False]
    assert trainer.train().stage == "done"
    assert sorted(p.name for p in (run_dir / "fine_tune").glob("*.jsonl")) == [
        "it0001_prover.jsonl",
        "it0001_verifier.jsonl",
    ]
    assert iteration_models(run_dir, 1) == iteration_models(run_dir, 0)  # the models it ended with
    assert iteration_models(run_dir, 2)["verifier"].endswith(":ft-verifier-it1")
    saved = json.loads((run_dir / "plan.json").read_text())
    assert [step["fine_tunes"] for step in saved["iterations"]] == [False, True, False]


def test_nip_extend_from_sampling_submits_no_job_for_the_old_last_iteration(dataset, tmp_path):
    run_dir = _run(dataset, tmp_path / "run", 1)
    assert main(["extend", str(run_dir), "--iterations", "1", "--from-sampling", "--quiet"]) == 0
    assert (run_dir / "rollouts/train_it0001.jsonl").exists()
    assert not (run_dir / "fine_tune").exists() or not list((run_dir / "fine_tune").iterdir())


def test_an_unfinished_run_is_resumed_not_extended(dataset, tmp_path):
    run_dir = tmp_path / "run"
    build_trainer(_params(dataset, 2), _settings(run_dir)).train(max_stages=1)
    with pytest.raises(InvalidParameterError, match="not finished"):
        extend_run(run_dir, 1)


def test_nip_extend_prints_the_schedule_then_runs(dataset, tmp_path, capsys):
    run_dir = _run(dataset, tmp_path / "run", 1)
    assert main(["extend", str(run_dir), "--iterations", "1", "--quiet"]) == 0
    assert "rl.num_iterations 1 -> 2" in capsys.readouterr().out
    assert (run_dir / "rollouts/train_it0001.jsonl").exists()


def test_a_retest_uses_each_iterations_models_and_writes_beside_the_run(dataset, tmp_path):
    run_dir = _run(dataset, tmp_path / "run", 2)
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    out = retest(run_dir, iterations=[0, 1], passes=3, settings=_settings(None))
    assert out == run_dir / "retest" / "test-3x"
    after = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file() and out not in p.parents}
    assert after == before  # nothing of the run changed
    assert iteration_models(run_dir, 0)["verifier"] == "gpt-4o-mini-2024-07-18"
    assert iteration_models(run_dir, 1)["verifier"].endswith(":ft-verifier-it0")
    for iteration in (0, 1):
        rows = (out / f"rollouts/test_it{iteration:04d}.jsonl").read_text().splitlines()
        assert len(rows) == 3 * len(
            (run_dir / f"rollouts/test_it{iteration:04d}.jsonl").read_text().splitlines()
        )
        models = {
            t["model"] for r in rows for t in json.loads(r)["turns"] if t["agent"] == "verifier"
        }
        assert models == {iteration_models(run_dir, iteration)["verifier"]}
    # The retest's first pass is the run's own test pass, with the same models and seeds.
    first = (out / "rollouts/test_it0001.jsonl").read_text().splitlines()[:4]
    assert first == (run_dir / "rollouts/test_it0001.jsonl").read_text().splitlines()


def test_compare_shows_a_retest_as_its_own_series(dataset, tmp_path):
    run_dir = _run(dataset, tmp_path / "run", 1)
    assert main(["retest", str(run_dir), "--passes", "2", "--quiet"]) == 0
    table = comparison_table([run_dir])
    assert set(table["series"]) == {"nip", "nip (retest test-2x)"}
    assert table.set_index("series").loc["nip (retest test-2x)", "dialogues"] == 8


def _files_of(run_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}


@pytest.mark.parametrize("iterations", ["0", "-2"])
def test_extending_by_less_than_one_iteration_prints_nothing_but_the_error(
    dataset, tmp_path, capsys, iterations
):
    run_dir = _run(dataset, tmp_path / "run", 1)
    before = _files_of(run_dir)
    assert main(["extend", str(run_dir), "--iterations", iterations]) == 2
    out, err = capsys.readouterr()
    assert out == "" and f"'{iterations}' is not allowed: expected an integer >= 1" in err
    with pytest.raises(InvalidParameterError, match=f"--iterations={iterations} is not"):
        extension_schedule(run_dir, int(iterations))
    with pytest.raises(InvalidParameterError, match=f"--iterations={iterations} is not"):
        extend_run(run_dir, int(iterations))
    assert _files_of(run_dir) == before


def test_a_retest_of_an_iteration_the_run_does_not_have_leaves_nothing_behind(
    dataset, tmp_path, capsys
):
    run_dir = _run(dataset, tmp_path / "run", 2)
    before = _files_of(run_dir)
    assert main(["retest", str(run_dir), "--iterations", "5"]) == 2
    assert _files_of(run_dir) == before and not (run_dir / "retest").exists()
    assert "--iterations=5 is not allowed: expected an iteration whose training dialogues " in (
        capsys.readouterr().err
    )
    with pytest.raises(InvalidParameterError, match="saved: 0, 1"):
        retest(run_dir, iterations=[0, 5], settings=_settings(None))
    assert _files_of(run_dir) == before and not (run_dir / "retest").exists()


@pytest.mark.parametrize("command", ["retest", "extend"])
def test_a_folder_that_holds_no_run_is_one_line(tmp_path, capsys, command):
    assert main([command, str(tmp_path), "--iterations", "1"]) == 2
    err = capsys.readouterr().err
    expected = f"{tmp_path} holds no run (no hyper_params.json)"
    assert err == f"nip: error: NotARunDirectoryError: {expected}\n"
