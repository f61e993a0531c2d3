"""The tutorials in ``notebooks/`` run top to bottom at CI size, and are committed clean.

Each notebook runs under nbval in a pytest subprocess (``--nbval-lax``: every cell must run
without error, and cells marked ``# NBVAL_CHECK_OUTPUT`` must print what they hold), on a copy
in a scratch folder, so the files a tutorial writes (run directories) never land in the
checkout. Each cell has a time-out, and the whole run a wall-clock limit after which its process
group (pytest, the kernel, any fine-tuning job) is killed. The same run also writes the notebook
as it would be saved after running, outputs and widget state included
(``tests/nbval_saved_notebook.py``), and its size must stay under :data:`SAVED_LIMIT_BYTES`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from nip.tutorial import (
    REFERENCE_MARKER,
    ci_environment,
    fresh_cache_dir,
    sized,
    tutorial_server,
    tutorial_size,
)
from nip.utils.precision import bfloat16_is_emulated

ROOT = Path(__file__).resolve().parents[1]
TUTORIALS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
#: bfloat16 forced on a CPU that emulates it (``NIP_CPU_DTYPE=bfloat16`` on an AVX2 machine, to
#: see what a machine with native bfloat16 computes) runs the model several times slower.
SLOWER = 4 if bfloat16_is_emulated() else 1
CELL_TIMEOUT_S = 300 * SLOWER
#: Wall-clock limits at CI size: several times what a loaded 2-core machine needs, and room
#: for converting the embedded model on a fresh machine (about two minutes).
LIMITS_S = {name: 600 * SLOWER for name in ("04_expert_iteration", "05_malt_trees")}
#: Tutorial 7 (vLLM) took 153-173 s on two workers in CI on 2026-11-26 (125 s alone; 531 s
#: before each worker's torch had one thread and vLLM its own core).
LIMITS_S["07_self_hosted_loop"] = 900 * SLOWER
#: Where tutorial 7's background server keeps its settings (relative to the notebook).
SELF_HOSTED_SERVER = Path("runs/07_self_hosted/server/background-server.json")
DEFAULT_LIMIT_S = 360 * SLOWER
#: The most a tutorial may weigh saved after running at CI size: a reviewer opens it at once,
#: and a researcher can commit it. One plotly FigureWidget alone saved plotly.js (5 MB).
SAVED_LIMIT_BYTES = 2_000_000


def _code_cells(path: Path) -> list[dict]:
    return [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]


def _source(cell: dict) -> str:
    return "".join(cell["source"])


def _kill_group(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def test_there_are_eight_tutorials():
    assert [p.name[:3] for p in TUTORIALS] == [f"0{n}_" for n in range(1, 9)]


@pytest.mark.parametrize("notebook", TUTORIALS, ids=lambda p: p.stem)
def test_the_tutorial_shows_nip_widgets_and_viz_rather_than_placeholders(notebook: Path):
    text = notebook.read_text()
    for placeholder in ("# widgets:", "# viz:", "Coming with", "when nip.viz lands"):
        assert placeholder not in text, f"{notebook.name} still holds {placeholder!r}"


@pytest.mark.parametrize("notebook", TUTORIALS, ids=lambda p: p.stem)
def test_the_committed_tutorial_has_no_outputs_but_its_reference_text(notebook: Path):
    """Clear outputs with ``python notebooks/clear_outputs.py`` (``--record`` to re-record)."""
    for index, cell in enumerate(_code_cells(notebook)):
        where = f"{notebook.name}, code cell {index}"
        if _source(cell).lstrip().startswith(REFERENCE_MARKER):
            kinds = {(o["output_type"], o.get("name")) for o in cell["outputs"]}
            assert kinds <= {("stream", "stdout")}, f"{where}: a reference holds only printed text"
            assert cell["outputs"], f"{where}: nbval checks it only if it holds its output"
        else:
            assert cell["outputs"] == [], f"{where} has outputs"
            assert cell["execution_count"] is None, f"{where} has an execution count"


@pytest.mark.parametrize("notebook", TUTORIALS, ids=lambda p: p.stem)
def test_the_tutorial_reads_the_ci_size_switch_first(notebook: Path):
    assert "tutorial_size()" in _source(_code_cells(notebook)[0])


@pytest.mark.notebook
@pytest.mark.slow
@pytest.mark.parametrize(
    "notebook",
    [
        pytest.param(p, marks=pytest.mark.timeout(LIMITS_S.get(p.stem, DEFAULT_LIMIT_S) + 60))
        for p in TUTORIALS
    ],
    ids=lambda p: p.stem,
)
def test_the_tutorial_runs_top_to_bottom_at_ci_size(
    notebook: Path, tmp_path: Path, record_property
):
    scratch = tmp_path / "notebooks"
    scratch.mkdir()
    copy = Path(shutil.copy(notebook, scratch))
    (scratch / "pytest.ini").write_text("[pytest]\n")  # not the checkout's pytest settings
    shutil.copy(Path(__file__).with_name("nbval_saved_notebook.py"), scratch / "conftest.py")
    command = [
        sys.executable,
        "-m",
        "pytest",
        str(copy),
        "--nbval-lax",
        "--nbval-current-env",
        f"--nbval-cell-timeout={CELL_TIMEOUT_S}",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:asyncio",
        "-q",
        "--rootdir",
        str(scratch),
        "-c",
        str(scratch / "pytest.ini"),
    ]
    limit_s = LIMITS_S.get(notebook.stem, DEFAULT_LIMIT_S)
    env = ci_environment(tmp_path)
    process = subprocess.Popen(
        command,
        cwd=scratch,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: the kernel and jobs die with it
    )
    try:
        output, _ = process.communicate(timeout=limit_s)
    except subprocess.TimeoutExpired:
        _kill_group(process)
        output, _ = process.communicate()
        pytest.fail(f"{notebook.name} ran past {limit_s} s:\n{output[-5000:]}")
    finally:
        if process.poll() is None:
            _kill_group(process)
    assert process.returncode == 0, f"{notebook.name} failed:\n{output[-8000:]}"
    if notebook.name == "07_self_hosted_loop.ipynb":
        _report_engine(scratch / SELF_HOSTED_SERVER, record_property)
    saved = scratch / f"saved-{notebook.name}"
    size = saved.stat().st_size
    print(f"{notebook.stem} saved after running: {size:,} bytes")
    record_property("saved_bytes", size)
    assert size < SAVED_LIMIT_BYTES, f"{notebook.name} saved at {size:,} bytes: {_heaviest(saved)}"


def _heaviest(saved: Path) -> str:
    """What weighs most in a saved notebook: outputs by MIME type, widget state by model."""
    notebook = json.loads(saved.read_text())
    parts: dict[str, int] = {}
    for cell in notebook["cells"]:
        for output in cell.get("outputs", []):
            for mime, data in (output.get("data") or {"stream": output}).items():
                parts[f"output {mime}"] = parts.get(f"output {mime}", 0) + len(json.dumps(data))
    widgets = notebook["metadata"].get("widgets", {})
    for model in (
        widgets.get("application/vnd.jupyter.widget-state+json", {}).get("state", {}).values()
    ):
        name = f"widget {model['model_name']}"
        parts[name] = parts.get(name, 0) + len(json.dumps(model))
    top = sorted(parts.items(), key=lambda part: -part[1])[:5]
    return ", ".join(f"{name} {size:,}" for name, size in top)


def _report_engine(settings: Path, record_property) -> None:
    """Say which engine tutorial 7's server ran: vLLM wherever vLLM is found, else transformers."""
    from nip.server.background import find_vllm_python

    engine = json.loads(settings.read_text())["engine"]
    print(f"07_self_hosted_loop ran the {engine} engine")
    record_property("engine", engine)
    assert engine == ("vllm" if find_vllm_python() else "transformers")


# ------------------------------------------------------------------ the size switch
def test_the_tutorials_run_full_size_unless_told_otherwise(monkeypatch):
    monkeypatch.delenv("NIP_TUTORIAL_SIZE", raising=False)

    assert tutorial_size() == "full"
    assert sized(full=16, ci=2) == 16


def test_ci_size_picks_the_small_numbers(monkeypatch):
    monkeypatch.setenv("NIP_TUTORIAL_SIZE", "CI")

    assert sized(full=16, ci=2) == 2


def test_an_unknown_size_is_an_error_that_names_the_variable(monkeypatch):
    monkeypatch.setenv("NIP_TUTORIAL_SIZE", "tiny")

    with pytest.raises(ValueError, match="NIP_TUTORIAL_SIZE='tiny'"):
        tutorial_size()


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("", "local"),
        ("OpenAI", "openai"),
        ("openrouter", "openrouter"),
        ("http://gpu-box:5000/", "http://gpu-box:5000"),
    ],
)
def test_the_backends_tutorial_target_comes_from_the_environment(monkeypatch, value, expected):
    monkeypatch.setenv("NIP_TUTORIAL_SERVER", value)

    assert tutorial_server() == expected


def test_an_unknown_server_target_is_an_error(monkeypatch):
    monkeypatch.setenv("NIP_TUTORIAL_SERVER", "gpu-box")

    with pytest.raises(ValueError, match="NIP_TUTORIAL_SERVER"):
        tutorial_server()


def test_a_fresh_cache_dir_shares_the_converted_models_and_nothing_else(monkeypatch, tmp_path):
    monkeypatch.setenv("NIP_CACHE_DIR", str(tmp_path / "usual"))

    cache = fresh_cache_dir(tmp_path / "scratch")

    assert [p.name for p in cache.iterdir()] == ["models"]
    assert (cache / "models").resolve() == (tmp_path / "usual" / "models").resolve()
