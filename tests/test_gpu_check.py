"""``bench/gpu_check.py`` keeps working: run on the CPU with the tiny shape, it prints its one
table (both engines against plain transformers; ``nip serve`` jobs and chat through the OpenAI
SDK). The figures themselves are measured on a GPU, never asserted here."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(find_spec("torch") is None, reason="torch is not installed")

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "gpu_check.py"
TINY = ["--shapes", "tiny", "--device", "cpu", "--requests", "2", "--prompt-tokens", "20"]


def _run(*args: str, timeout_s: float) -> str:
    env = {**os.environ, "NIP_VLLM_PYTHON": "none"}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *TINY, *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.slow  # about 20 s: a model built, then generation three ways
@pytest.mark.timeout(180)
def test_the_gpu_check_compares_the_local_engine_with_plain_generate_on_the_cpu():
    table = _run("--tokens", "4", "--no-serve", timeout_s=170)
    assert re.search(r"tiny: plain model.generate +[\d,]+ tokens/s \(1.00x\)", table)
    assert re.search(r"tiny: Local transformers engine +[\d,]+ tokens/s \([\d.]+x\)", table)
    assert "tiny: Local vLLM engine" in table  # skipped here, said so


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_the_gpu_check_drives_nip_serve_with_the_openai_sdk_on_the_cpu(tmp_path):
    rows = tmp_path / "throughput.yaml"
    table = _run("--tokens", "2", "--rows", "4", "--throughput-out", str(rows), timeout_s=390)
    assert re.search(r"tiny: nip serve SFT job +4 rows: .* tokens trained, [\d,]+ tokens/s", table)
    assert re.search(r"tiny: nip serve DPO job +2 rows: .* tokens trained", table)
    assert re.search(r"tiny: nip serve chat, fine-tuned +\d+ tokens", table)
    # What it measured, as rows the dry run prices GPU time from (--throughput FILE).
    from nip.experiments.gpu_time import ThroughputTable

    (row,) = [r for r in ThroughputTable.load(rows).rows if r.gpu == "CPU"]
    assert row.source == "measured" and row.date and "--shapes tiny" in row.how
    assert min(row.prefill_tokens_per_s, row.decode_tokens_per_s, row.train_tokens_per_s) > 0


@pytest.mark.parametrize(
    ("name", "memory_mib", "label"),
    [
        ("NVIDIA H200", 143_771, "H200-141GB"),  # as the H200 lent on 2026-11-28 reported
        ("NVIDIA H100 80GB HBM3", 81_559, "H100-80GB"),
        ("NVIDIA A100-SXM4-80GB", 81_920, "A100-80GB"),
        ("NVIDIA L40S", 46_068, "L40S-48GB"),  # a kind the table lacks: its memory, rounded
    ],
)
def test_measured_rows_name_the_gpu_as_the_throughput_table_does(
    monkeypatch, name, memory_mib, label
):
    """Rows written by ``--throughput-out`` replace the shipped rows of the same GPU name."""
    import importlib.util
    from types import SimpleNamespace

    import torch

    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    gpu_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_check)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: name)
    properties = SimpleNamespace(total_memory=memory_mib * 2**20)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: properties)
    assert gpu_check.gpu_label(torch.device("cuda", 0)) == label
    assert gpu_check.gpu_label(torch.device("cpu")) == "CPU"
