"""Comparing runs: accuracy per protocol and iteration, with intervals, from run directories."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from nip.parameters import (
    HyperParameters,
    NipProtocolParameters,
    PureTextAgentParameters,
    RlParameters,
    TextRlParameters,
)
from nip.protocols import protocol_class
from nip.runs.run_dir import RunDirectory
from nip.settings import ExperimentSettings
from nip.training.trainer import build_trainer
from nip.viz import compare_runs, comparison_table, wilson_interval


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Short dummy runs: nip with seeds 1 and 2, debate with seed 1 (2 iterations each)."""
    root = tmp_path_factory.mktemp("runs")
    dataset = root / "tiny.jsonl"
    rows = [
        {
            "id": f"item{i}",
            "question": f"Return {i} plus the argument.",
            "solution": f"def f(x):\n    return x + {i + i % 2}\n",
            "y": 1 - i % 2,
            "split": "train" if i < 8 else "test",
            "source_task_id": f"task{i}",
        }
        for i in range(14)
    ]
    dataset.write_text("".join(json.dumps(r) + "\n" for r in rows))
    found = {}
    for protocol, seed in (("nip", 1), ("nip", 2), ("debate", 1)):
        hp = HyperParameters(
            interaction_protocol=protocol,
            seed=seed,
            dataset=str(dataset),
            agents={
                name: PureTextAgentParameters(use_dummy_api=True)
                for name in protocol_class(protocol).agent_names
            },
            nip_protocol=NipProtocolParameters(max_message_rounds=3),
            debate_protocol={"max_message_rounds": 3},
            rl=RlParameters(num_iterations=2, rollouts_per_iteration=4),
            text_rl=TextRlParameters(min_fine_tune_examples=1, test_scheme="all"),
            pure_text_ei={"reward_threshold": 0.5},
        )
        run_dir = root / f"{protocol}-s{seed}"
        build_trainer(hp, ExperimentSettings(run_dir=run_dir, show_progress=False)).train()
        found[f"{protocol}-s{seed}"] = run_dir
    return found


def counts(run_dir: Path, split: str, iteration: int) -> tuple[int, int]:
    transcripts = RunDirectory(run_dir).load_rollouts(split, iteration)
    return sum(t.correct for t in transcripts), len(transcripts)


def test_runs_of_one_protocol_pool_their_dialogues_per_iteration(runs):
    table = comparison_table(runs.values())
    nip = table[(table["series"] == "nip") & (table["iteration"] == 1)].iloc[0]
    (c1, n1), (c2, n2) = counts(runs["nip-s1"], "test", 1), counts(runs["nip-s2"], "test", 1)
    assert (nip["runs"], nip["seeds"]) == (2, "1, 2")
    assert (nip["correct"], nip["dialogues"]) == (c1 + c2, n1 + n2)
    assert nip["accuracy"] == pytest.approx((c1 + c2) / (n1 + n2))


def test_each_point_has_the_wilson_interval_of_its_counts(runs):
    table = comparison_table(runs.values(), confidence=0.9)
    for row in table.itertuples():
        assert (row.ci_low, row.ci_high) == pytest.approx(
            wilson_interval(row.correct, row.dialogues, 0.9)
        )
        assert row.ci_low <= row.accuracy <= row.ci_high


def test_there_is_one_row_per_protocol_and_saved_iteration(runs):
    table = comparison_table(runs.values())
    assert list(zip(table["series"], table["iteration"], strict=True)) == [
        ("debate", 0),
        ("debate", 1),
        ("nip", 0),
        ("nip", 1),
    ]


def test_separate_seeds_show_each_run_as_its_own_series(runs):
    table = comparison_table(runs.values(), pool_seeds=False)
    assert sorted(set(table["series"])) == ["debate seed 1", "nip seed 1", "nip seed 2"]
    assert set(table["runs"]) == {1}


def test_train_rollouts_can_be_compared_too(runs):
    table = comparison_table([runs["debate-s1"]], split="train")
    assert list(table["dialogues"]) == [4, 4]


def test_the_figure_draws_a_line_per_protocol_with_asymmetric_error_bars(runs):
    figure, table = compare_runs(runs.values())
    assert [trace.name for trace in figure.data] == ["debate", "nip"]
    for trace in figure.data:
        rows = table[table["series"] == trace.name]
        assert trace.error_y.symmetric is False
        assert list(trace.error_y.array) == pytest.approx(list(rows["ci_high"] - rows["accuracy"]))
        # Series are drawn a little apart; the hover still names the iteration.
        assert [round(x) for x in trace.x] == list(rows["iteration"])


def test_runs_under_labels_are_a_series_per_label_and_protocol(runs):
    table = comparison_table(
        {"first": [runs["nip-s1"], runs["debate-s1"]], "second": runs["nip-s2"]}
    )
    assert list(dict.fromkeys(table["series"])) == ["first: nip", "first: debate", "second"]
    assert set(table["runs"]) == {1}


def test_the_per_seed_figure_says_each_run_and_the_pooled_one_seeds_pooled(runs):
    separate, _ = compare_runs(runs.values(), pool_seeds=False)
    pooled, _ = compare_runs(runs.values())
    assert (
        "each run" in separate.layout.title.text and "by protocol" not in separate.layout.title.text
    )
    assert separate.layout.legend.title.text == "run"
    assert "seeds pooled" in pooled.layout.title.text


def test_one_iteration_is_drawn_as_bars_per_series_and_true_label(runs):
    figure, table = compare_runs(runs.values(), iteration=1, by_label=True)
    assert [bar.name for bar in figure.data] == [
        "all items",
        "correct solutions",
        "incorrect solutions",
    ]
    assert list(figure.data[0].x) == ["debate", "nip"]
    overall = table[table["items"] == "all items"]
    parts = table[table["items"] != "all items"].groupby("series")["dialogues"].sum()
    assert list(overall["dialogues"]) == list(parts)


def test_a_directory_that_is_not_a_run_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="holds no run"):
        comparison_table([tmp_path])


def test_nip_compare_prints_the_table_and_writes_the_figure(runs, tmp_path):
    html = tmp_path / "compare.html"
    result = subprocess.run(
        [sys.executable, "-m", "nip.cli", "compare", *map(str, runs.values()), "--html", html],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    header, *rows = result.stdout.strip().splitlines()[:5]
    assert header.split()[:3] == ["series", "iteration", "runs"]
    assert [row.split()[0] for row in rows] == ["debate", "debate", "nip", "nip"]
    assert "plotly" in html.read_text(encoding="utf-8")


def test_the_t_quantiles_are_students():
    from nip.viz.intervals import seed_interval, t_quantile

    assert t_quantile(0.975, 1) == pytest.approx(12.706, abs=1e-3)
    assert t_quantile(0.975, 2) == pytest.approx(4.303, abs=1e-3)
    assert t_quantile(0.975, 30) == pytest.approx(2.042, abs=1e-3)
    mean, low, high = seed_interval([0.5, 0.6, 0.7])
    assert (mean, low, high) == pytest.approx(
        (0.6, 0.6 - 4.303 * 0.1 / 3**0.5, 0.6 + 4.303 * 0.1 / 3**0.5), abs=1e-3
    )
    assert seed_interval([0.5])[1] != seed_interval([0.5])[1]  # NaN: one seed has no spread


def test_runs_of_one_protocol_on_two_models_are_two_series(runs, tmp_path):
    """The paper's comparison beside its open-weight twin (paper-ei and open-ei sweeps)."""
    import shutil

    open_run = tmp_path / "nip-open"
    shutil.copytree(runs["nip-s1"], open_run)
    saved = json.loads((open_run / "hyper_params.json").read_text())
    for agent in saved["agents"].values():
        agent["model_name"] = "Qwen/Qwen2.5-7B-Instruct"
    (open_run / "hyper_params.json").write_text(json.dumps(saved))
    table = comparison_table([runs["nip-s1"], runs["nip-s2"], open_run])
    assert set(table["series"]) == {
        "nip [gpt-4o-mini-2024-07-18]",
        "nip [Qwen/Qwen2.5-7B-Instruct]",
    }
    assert set(comparison_table([runs["nip-s1"], runs["nip-s2"]])["series"]) == {"nip"}
