"""The package as a newcomer meets it: a light import, a flat API, a working CLI."""

from __future__ import annotations

import subprocess
import sys

import nip

HEAVY = ("torch", "transformers", "vllm", "peft", "trl", "pandas", "fastapi", "wandb", "plotly")


def test_importing_nip_loads_no_heavy_library():
    code = f"import sys, nip; print([m for m in {HEAVY!r} if m in sys.modules])"
    output = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert output == "[]"


def test_every_public_name_resolves_and_is_documented():
    for name in nip.__all__:
        value = getattr(nip, name)
        if callable(value) and name != "__version__":
            assert value.__doc__, f"nip.{name} has no docstring"


def test_the_cli_prints_every_protocols_schedule():
    output = subprocess.run(
        [sys.executable, "-m", "nip.cli", "protocols"], capture_output=True, text=True, check=True
    ).stdout
    for name in nip.PROTOCOLS:
        assert f"== {name}:" in output
    assert "episode rewards: prover0 in [0, 1], prover1 in [0, 1], verifier in [-1, 1]" in output


def test_an_unknown_preset_is_a_clear_cli_error():
    result = subprocess.run(
        [sys.executable, "-m", "nip.cli", "run", "no-such-preset"], capture_output=True, text=True
    )
    assert result.returncode != 0
    assert "no config file or preset named 'no-such-preset'" in result.stderr


def test_a_bad_config_is_a_one_line_typed_cli_error_without_a_traceback(tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text("interaction_protocol: nope\n")
    result = subprocess.run(
        [sys.executable, "-m", "nip.cli", "run", str(config), "--run-dir", str(tmp_path / "run")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert "InvalidParameterError: interaction_protocol='nope' is not allowed" in result.stderr
    assert "Traceback" not in result.stderr
