"""A 2 x 2 sweep on the dummy API with W&B offline and without: how far apart its cells start.

    .venv/bin/python bench/sweep_wandb.py --repeats 3

Each run is ``nip sweep GRID --max-parallel 4`` in a fresh process (W&B's import and service
start count, as they do for a user). A cell's start is its ``start`` event in
``events.jsonl`` (written when its trainer is open, before its first stage). W&B's set-up
blocked the sweep's event loop until issue 37: the cells then started seconds apart.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GRID = """
name: bench
base: base.yaml
axes:
  interaction_protocol: [nip, debate]
  seed: [0, 1]
"""


def _write_grid(folder: Path) -> Path:
    sys.path.insert(0, str(ROOT))
    from nip.parameters import HyperParameters, PureTextAgentParameters

    rows = [
        {
            "id": f"item{i}",
            "question": f"Return {i} plus the argument.",
            "solution": f"def f(x):\n    return x + {i + i % 2}\n",
            "y": 1 - i % 2,
            "split": "train" if i < 12 else "test",
        }
        for i in range(16)
    ]
    (folder / "tiny.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    dummy = PureTextAgentParameters(use_dummy_api=True)
    HyperParameters(
        dataset=str(folder / "tiny.jsonl"),
        agents={"prover": dummy, "verifier": dummy},
        rl={"num_iterations": 2, "rollouts_per_iteration": 4},
        text_rl={"min_fine_tune_examples": 1, "test_scheme": "last"},
        nip_protocol={"max_message_rounds": 3},
        debate_protocol={"max_message_rounds": 3},
    ).save(folder / "base.yaml")
    (folder / "grid.yaml").write_text(GRID)
    return folder / "grid.yaml"


def run_once(grid: Path, sweep_dir: Path, mode: str) -> tuple[float, list[float]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": mode, "WANDB_SILENT": "true"}
    command = [sys.executable, "-m", "nip.cli", "sweep", str(grid), "--sweep-dir", str(sweep_dir)]
    started = time.perf_counter()
    subprocess.run(
        [*command, "--quiet", "--max-parallel", "4"],
        env=env,
        check=True,
        capture_output=True,
        cwd=grid.parent,
    )
    wall = time.perf_counter() - started
    events = [json.loads(line) for line in (sweep_dir / "events.jsonl").read_text().splitlines()]
    starts = sorted(e["time"] for e in events if e["event"] == "start")
    return wall, [round(t - starts[0], 2) for t in starts]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        grid = _write_grid(Path(folder))
        for repeat in range(args.repeats):
            for mode in ("offline", "disabled"):
                wall, starts = run_once(grid, Path(folder) / f"{mode}-{repeat}", mode)
                print(f"W&B {mode:<8}  wall {wall:5.1f} s  cells start at {starts} s")


if __name__ == "__main__":
    main()
