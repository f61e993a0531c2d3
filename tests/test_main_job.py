"""The README's main job, end to end, with the real embedded model and real LoRA training."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from nip.cli._args import load_config as _load_config
from nip.utils.precision import bfloat16_is_emulated

#: bfloat16 forced on a CPU that emulates it (``NIP_CPU_DTYPE``) runs the model several times
#: slower.
SLOWER = 4 if bfloat16_is_emulated() else 1


@pytest.mark.slow
@pytest.mark.timeout(900 * SLOWER)
def test_the_quickstart_experiment_trains_both_agents_and_tests_them(tmp_path):
    """The quickstart preset, shrunk to 1 dialogue per iteration (and so 1 test item, one
    training step per agent) to save CI time: every stage still runs with the real model.
    What it asserts holds whatever the model samples (on any CPU, in either dtype)."""
    params = _load_config("quickstart")
    params.rl.rollouts_per_iteration = 1
    for agent in params.agents.values():
        agent.max_response_words = 15
    params.text_rl.min_fine_tune_examples = 1
    params.pure_text_ei.reward_threshold = -10.0  # keep every dialogue: both agents train
    # The verifier questions the prover before it may decide: the prover speaks in every
    # dialogue, so both agents have examples (and generate with their adapters in iteration 1)
    # whatever the model samples; deciding at once, the verifier could leave the prover none.
    params.nip_protocol.min_message_rounds = 3
    config = params.save(tmp_path / "quickstart.yaml")
    run_dir = tmp_path / "run"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "nip.cli",
            "run",
            str(config),
            "--run-dir",
            str(run_dir),
            "--quiet",
            "--cache",
            "off",
        ],
        capture_output=True,
        text=True,
        timeout=880 * SLOWER,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "accuracy" in result.stdout and "test" in result.stdout
    state = json.loads((run_dir / "state.json").read_text())
    assert state["stage"] == "done"
    for group in ("prover", "verifier"):
        assert state["groups"][group]["model_history"] == [f"{group}-it0"]
        assert (run_dir / "jobs" / f"{group}-it0" / "adapter" / "adapter_config.json").exists()
    second = [json.loads(line) for line in (run_dir / "rollouts/train_it0001.jsonl").open()]
    models = {turn["model"] for t in second for turn in t["turns"]}
    assert models == {"prover-it0", "verifier-it0"}  # iteration 1 generated with the adapters
    assert (run_dir / "metrics" / "test_it0001.json").exists()
