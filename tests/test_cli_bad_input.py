"""Every ``nip`` command meets bad input with one line naming the problem, exit status 2, and
nothing written.

The subcommands are read from the parser itself, so a new command fails
``test_every_subcommand_has_bad_input_cases`` until it has rows in :data:`CASES`. Each row
runs ``nip.cli.main`` in this process, in a scratch folder holding a finished run, a sweep,
config and grid files (good and bad), a plain file and an empty folder, and checks: exit
status 2; one or two lines on standard error, naming what was wrong; no traceback; no file
created, changed or removed in the scratch folder (the working directory, where ``runs/``
would appear). Property-based tests (hypothesis) add generated bad values for every numeric
option the parser has, and generated malformed config files.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nip.cli import build_parser, main
from nip.parameters import HyperParameters
from nip.settings import ExperimentSettings

pytestmark = pytest.mark.timeout(120)

GRID = """
name: tiny
base: base.json
axes:
  interaction_protocol: [nip, debate]
"""

#: Bad command lines of every subcommand, with what the error line must name. ``{run}``: a
#: finished run; ``{unfinished}``: a run stopped after its first stage; ``{damaged}``: a run
#: whose hyper_params.json is not JSON; ``{sweep}``: a sweep; ``{file}``: a plain file;
#: ``{empty}``: an empty folder; ``{missing}``: a path that does not exist; ``{config}``: a
#: good config; ``{grid}``: a good grid; other ``{...}``: the files of :data:`FILES`.
CASES: dict[str, list[tuple[list[str], str]]] = {
    "protocols": [
        (["nipp"], "nipp"),
        (["--seed", "x"], "--seed"),
    ],
    "presets": [
        (["extra"], "unrecognized arguments: extra"),
    ],
    "export": [
        (["inspect"], "run_dir"),
        (["html", "{run}"], "invalid choice: 'html'"),
        (["inspect", "{missing}"], "{missing}"),
        (["inspect", "{empty}"], "{empty}"),
    ],
    "schema": [
        (["extra"], "unrecognized arguments: extra"),
        (["--out", "{missing}/schema.json"], "--out"),
    ],
    "prepare-model": [
        (["NoSuchModel-1B"], "NoSuchModel-1B"),
    ],
    "run": [
        ([], "config"),
        (["{missing}"], "{missing}"),
        (["{empty}"], "{empty}"),
        (["{run}"], "{run}"),
        (["{bad_yaml}"], "not valid YAML"),
        (["{bad_json}"], "not valid JSON"),
        (["{list_yaml}"], "expected a mapping"),
        (["{binary}"], "not a text file"),
        (["{config}", "--set", "rl.num_iterations=-1"], "rl.num_iterations=-1"),
        (["{config}", "--set", "rl.num_iterations=many"], "rl.num_iterations='many'"),
        (["{config}", "--set", "rl.num_iterationz=1"], "num_iterationz"),
        (["{config}", "--set", "interaction_protocol=nipp"], "nipp"),
        (  # a setting that would do nothing in that protocol (its schedule is fixed)
            [
                "{config}",
                "--set",
                "interaction_protocol=adp",
                "--set",
                "protocol_common.verifier_first=false",
            ],
            "protocol_common.verifier_first",
        ),
        (["{config}", "--set", "no-equals-sign"], "--set"),
        (["{config}", "--seed", "x"], "--seed"),
        (["{config}", "--run-dir", "{file}"], "{file} is a file"),
        (["{config}", "--run-dir", "{run}"], "already holds a run"),
        (["{config}", "--dry-run", "--sample-items", "0"], "--sample-items"),
        (["{config}", "--dry-run", "--sample-items", "-3"], "--sample-items"),
        (["{config}", "--dummy-latency", "-1"], "--dummy-latency"),
        (["{config}", "--cache", "sometimes"], "--cache"),
        (["{config}", "--local-engine", "x"], "--local-engine"),
        (["{config}", "--gpu-hour-usd", "cheap"], "--gpu-hour-usd='cheap'"),
    ],
    "resume": [
        ([], "RUN_DIR"),
        (["{missing}"], "{missing}: no such folder"),
        (["{file}"], "{file} is a file"),
        (["{empty}"], "{empty} holds no run"),
        (["{damaged}"], "not valid JSON"),
        (["{run}", "--set", "rl.num_iterationz=1"], "num_iterationz"),
        (["{run}", "--set", "seed=5"], "--accept-changes"),
        (["{run}", "--dummy-latency", "x"], "--dummy-latency"),
        (["{unfinished}", "--gpu-hour-usd", "-1"], "--gpu-hour-usd='-1'"),
    ],
    "sweep": [
        ([], "GRID.yaml"),
        (["{missing}"], "{missing}"),
        (["{bad_yaml}"], "not valid YAML"),
        (["{list_yaml}"], "a grid is a mapping"),
        (["{grid_axes_list}"], "axes=['seed', 0, 1]"),
        (["{grid_zip_mapping}"], "zip="),
        (["{grid_unknown_key}"], "axis"),
        (["{grid_max_parallel_0}"], "max_parallel=0"),
        (["{grid_unknown_protocol}"], "cell nipp: unknown interaction protocol 'nipp'"),
        (["{grid_unknown_path}"], "rl.num_iterationz"),
        (["{grid_bad_name}"], "name="),
        (["{grid_missing_base}"], "base="),
        (["{grid}", "--set", "agents.*.use_dummy_apii=true"], "agents.*.use_dummy_apii"),
        (["{grid}", "--set", "agents.*=true"], "agents.*"),
        (["{grid}", "--set", "no-equals-sign"], "--set"),
        (["status"], "which sweep folder"),
        (["resume"], "which sweep folder"),
        (["status", "{missing}"], "{missing}: no such folder"),
        (["status", "{file}"], "{file} is a file"),
        (["status", "{empty}"], "{empty} holds no sweep"),
        (["status", "{run}"], "{run} holds no sweep"),
        (["resume", "{missing}"], "{missing}: no such folder"),
        (["resume", "{file}"], "{file} is a file"),
        (["resume", "{empty}"], "{empty} holds no sweep"),
        (["{grid}", "{grid}"], "usage"),
        (["{grid}", "--max-parallel", "0"], "--max-parallel"),
        (["{grid}", "--max-parallel", "-1"], "--max-parallel"),
        (["{grid}", "--max-parallel", "x"], "--max-parallel"),
        (["{grid}", "--gpu-hour-usd", "0"], "--gpu-hour-usd='0'"),
        (["{grid}", "--dry-run", "--sample-items", "0"], "--sample-items"),
        (["{grid}", "--sweep-dir", "{file}"], "{file} is a file"),
        (["{grid}", "--sweep-dir", "{sweep_other}"], "other cells"),
        (["{grid}", "--ray", "local", "--cell-resources", "cpu=lots"], "--cell-resources"),
    ],
    "retest": [
        ([], "RUN_DIR"),
        (["{missing}"], "{missing}: no such folder"),
        (["{file}"], "{file} is a file"),
        (["{empty}"], "{empty} holds no run"),
        (["{sweep}"], "holds no run"),
        (["{run}", "--iterations", "x"], "--iterations"),
        (["{run}", "--iterations", "0,x"], "--iterations"),
        (["{run}", "--iterations", "-1"], "--iterations"),
        (["{run}", "--iterations", "5"], "--iterations=5"),
        (["{run}", "--passes", "0"], "--passes"),
        (["{run}", "--passes", "-2"], "--passes"),
        (["{run}", "--split", "dev"], "dev"),
    ],
    "extend": [
        (["{run}"], "--iterations"),
        (["{missing}", "--iterations", "1"], "{missing}: no such folder"),
        (["{file}", "--iterations", "1"], "{file} is a file"),
        (["{empty}", "--iterations", "1"], "{empty} holds no run"),
        (["{run}", "--iterations", "0"], "--iterations"),
        (["{run}", "--iterations", "-2"], "'-2'"),
        (["{run}", "--iterations", "x"], "--iterations"),
        (["{unfinished}", "--iterations", "1"], "not finished"),
    ],
    "plan": [
        ([], "config"),
        (["{missing}"], "{missing}"),
        (["{bad_yaml}"], "not valid YAML"),
        (["{bad_json}"], "not valid JSON"),
        (["{config}", "--set", "rl.num_iterations=0"], "rl.num_iterations=0"),
        (["{config}", "--set", "agents.judge.model_name=x"], "judge"),
    ],
    "control": [
        (["{run}"], "request"),
        (["{missing}", "pause"], "{missing}: no such folder"),
        (["{file}", "pause"], "{file} is a file"),
        (["{empty}", "pause"], "{empty} holds no run"),
        (["{run}", "explode"], "explode"),
    ],
    "compare": [
        ([], "RUN_DIR"),
        (["{missing}"], "{missing}: no such folder"),
        (["{file}"], "{file} is a file"),
        (["{empty}"], "{empty} holds no run"),
        (["{run}", "--confidence", "2"], "--confidence"),
        (["{run}", "--confidence", "x"], "--confidence"),
        (["{run}", "--split", "dev"], "--split"),
        (["{run}", "--html", "{missing}/figure.html"], "--html"),
    ],
    "analyse": [
        ([], "RUN_DIR"),
        (["{missing}", "--dummy"], "{missing}: no such folder"),
        (["{file}", "--dummy"], "{file} is a file"),
        (["{empty}", "--dummy"], "{empty} holds no run"),
        (["{run}", "--dummy", "--analysers", "nosuch"], "nosuch"),
        (["{run}", "--provider", "Nobody"], "--provider"),
    ],
    "serve": [
        (["--config", "{missing}"], "{missing}"),
        (["--config", "{bad_yaml}"], "not valid YAML"),
        (["--config", "{bad_json}"], "not valid JSON"),
        (["--port", "x"], "--port"),
        (["--port", "-1"], "port=-1"),
        (["--port", "70000"], "port=70000"),
        (["--vllm-port", "-5"], "vllm_port=-5"),
        (["--max-loras", "0"], "max_loras=0"),
        (["--engine", "nope"], "--engine"),
        (["--host", "0.0.0.0"], "bearer token"),
        (["--storage-dir", "{file}"], "{file}"),
    ],
}

#: Files of the scratch folder, by placeholder.
FILES = {
    "bad_yaml": ("bad.yaml", "agents: [prover,\n  verifier: {\n"),
    "bad_json": ("bad.json", '{"rl": {"num_iterations": 2,}}'),
    "list_yaml": ("list.yaml", "- nip\n- debate\n"),
    "grid_axes_list": ("axes-list.yaml", "base: base.json\naxes: [seed, 0, 1]\n"),
    "grid_zip_mapping": ("zip-mapping.yaml", "base: base.json\nzip:\n  seed: [0, 1]\n"),
    "grid_unknown_key": ("unknown-key.yaml", "base: base.json\naxis:\n  seed: [0, 1]\n"),
    "grid_max_parallel_0": ("mp0.yaml", "base: base.json\nmax_parallel: 0\n"),
    "grid_unknown_protocol": (
        "nipp.yaml",
        "base: base.json\naxes:\n  interaction_protocol: [nip, nipp]\n",
    ),
    "grid_unknown_path": ("path.yaml", "base: base.json\naxes:\n  rl.num_iterationz: [1]\n"),
    "grid_bad_name": ("name.yaml", "name: ../escape\nbase: base.json\n"),
    "grid_missing_base": ("nobase.yaml", "axes:\n  seed: [0, 1]\n"),
}


@pytest.fixture(scope="module")
def template(tmp_path_factory, dummy_params) -> Path:
    """The scratch folder's contents, built once: copied for each test."""
    from nip.sweeps.run import GridSpec, prepare_sweep, run_sweep
    from nip.training.trainer import build_trainer

    root = tmp_path_factory.mktemp("template")
    params = dummy_params()
    params.rl.num_iterations = 1
    params.save(root / "base.json")  # JSON: read ten times faster than YAML
    params.save(root / "config.json")
    quiet = ExperimentSettings(show_progress=False, wandb_mode="disabled")
    build_trainer(params, ExperimentSettings(**{**quiet.__dict__, "run_dir": root / "run"})).train()
    unfinished = ExperimentSettings(**{**quiet.__dict__, "run_dir": root / "unfinished"})
    build_trainer(params, unfinished).train(max_stages=1)
    shutil.copytree(root / "run", root / "damaged")
    (root / "damaged" / "hyper_params.json").write_text("{not json")
    (root / "grid.yaml").write_text(GRID)
    run_sweep(GridSpec.load(root / "grid.yaml"), root / "sweep", quiet, echo=False)
    other = GRID.replace("[nip, debate]", "[nip, adp]")
    (root / "other.yaml").write_text(other)
    prepare_sweep(GridSpec.load(root / "other.yaml"), root / "sweep_other")
    (root / "file.txt").write_text("a plain file\n")
    (root / "empty").mkdir()
    (root / "binary.yaml").write_bytes(b"\xff\xfe\x00not text")
    for name, text in FILES.values():
        (root / name).write_text(text)
    return root


#: What each scratch folder must hold (``contents``), by folder.
CONTENTS: dict[Path, dict[str, bytes]] = {}


@pytest.fixture(scope="module")
def copy(template, tmp_path_factory) -> Path:
    """A copy of the template that the cases share (each checks that it writes nothing)."""
    root = tmp_path_factory.mktemp("scratch") / "scratch"
    shutil.copytree(template, root)
    return root


@pytest.fixture(scope="module")
def contents(template) -> dict[str, bytes]:
    """Every file of the template, by path: what the scratch folder must hold."""
    files = (p for p in template.rglob("*") if p.is_file())
    return {str(p.relative_to(template)): p.read_bytes() for p in files}


@pytest.fixture
def scratch(copy, template, contents, monkeypatch) -> Path:
    """The shared copy as the working directory; made again after a case that changed it."""
    monkeypatch.chdir(copy)
    monkeypatch.setenv("WANDB_MODE", "disabled")
    monkeypatch.delenv("NIP_SERVER_API_KEY", raising=False)
    CONTENTS[copy] = contents
    yield copy
    if _changed(copy, contents, {}):
        shutil.rmtree(copy)
        shutil.copytree(template, copy)


def _places(root: Path) -> dict[str, str]:
    names = {
        "run": "run",
        "unfinished": "unfinished",
        "damaged": "damaged",
        "sweep": "sweep",
        "sweep_other": "sweep_other",
        "file": "file.txt",
        "empty": "empty",
        "missing": "no/such/place",
        "config": "config.json",
        "grid": "grid.yaml",
        "binary": "binary.yaml",
        **{key: name for key, (name, _) in FILES.items()},
    }
    return {key: str(root / name) for key, name in names.items()}


def _stats(root: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(root)): (stat.st_size, stat.st_mtime_ns)
        for p in root.rglob("*")
        if p.is_file() and (stat := p.stat())
    }


def _changed(root: Path, contents: dict[str, bytes], before: dict) -> list[str]:
    """The files created, removed or changed in ``root``: those whose size or time differ
    from ``before`` are read and compared with ``contents`` (a lock file may be rewritten
    with the same text)."""
    now = _stats(root)
    return sorted(
        {path for path in now if path not in contents}
        | set(contents) - set(now)
        | {
            path
            for path, stat in now.items()
            if stat != before.get(path) and (root / path).read_bytes() != contents.get(path)
        }
    )


def subcommands() -> dict[str, argparse.ArgumentParser]:
    """Every ``nip`` subcommand, as the parser defines it."""
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def refused(argv: list[str], root: Path, capsys) -> str:
    """Run ``nip ARGV`` in ``root``; check it refused the input as the module docstring says;
    return its standard error."""
    before = _stats(root)
    status = main(argv)
    out, err = capsys.readouterr()
    assert status == 2, f"nip {' '.join(argv)}: exit {status}\n{out}{err}"
    lines = err.strip().splitlines()
    assert 1 <= len(lines) <= 2, f"nip {' '.join(argv)}:\n{err}"
    assert "Traceback" not in err
    changed = _changed(root, CONTENTS[root], before)
    assert not changed, f"nip {' '.join(argv)} changed {changed}"
    return err


def test_every_subcommand_has_bad_input_cases():
    assert set(CASES) == set(subcommands())


@pytest.mark.parametrize(
    ("command", "argv", "named"),
    [(command, argv, named) for command, rows in CASES.items() for argv, named in rows],
    ids=[f"{c}:{' '.join(a)}" for c, rows in CASES.items() for a, _ in rows],
)
def test_bad_input_is_one_line_exit_2_and_nothing_written(command, argv, named, scratch, capsys):
    places = _places(scratch)
    err = refused([command, *(a.format(**places) for a in argv)], scratch, capsys)
    assert named.format(**places) in err


# ------------------------------------------------------------------ generated values
def _typed_options() -> list[tuple[str, str, object]]:
    """(subcommand, option, type) of every option with a numeric type."""
    found = []
    for name, parser in subcommands().items():
        for action in parser._actions:
            if action.option_strings and action.type not in (None, str):
                found.append((name, action.option_strings[0], action.type))
    return found


#: What a subcommand needs besides the option to get as far as reading it.
PREFIX = {
    "run": ["{config}"],
    "plan": ["{config}"],
    "resume": ["{run}"],
    "retest": ["{run}"],
    "extend": ["{run}"],
    "compare": ["{run}"],
    "analyse": ["{run}"],
    "sweep": ["{grid}"],
    "control": ["{run}", "pause"],
}


def test_every_numeric_option_is_found():
    options = {(c, o) for c, o, _ in _typed_options()}
    assert {("retest", "--passes"), ("sweep", "--max-parallel"), ("serve", "--port")} <= options


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    option=st.sampled_from(_typed_options()),
    text=st.text(alphabet="abcxyz!?,. _=", min_size=1, max_size=8),
)
def test_a_numeric_option_given_text_is_refused_naming_it(option, text, scratch, capsys):
    command, flag, _ = option
    places = _places(scratch)
    prefix = [a.format(**places) for a in PREFIX.get(command, [])]
    err = refused([command, *prefix, flag, text], scratch, capsys)
    assert flag in err


def _counts() -> list[tuple[str, str]]:
    from nip import cli

    return [(c, o) for c, o, kind in _typed_options() if kind is cli._args.count]


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(option=st.sampled_from(_counts()), value=st.integers(max_value=0))
def test_a_count_of_zero_or_less_is_refused_naming_it(option, value, scratch, capsys):
    command, flag = option
    places = _places(scratch)
    prefix = [a.format(**places) for a in PREFIX.get(command, [])]
    err = refused([command, *prefix, flag, str(value)], scratch, capsys)
    assert flag in err and str(value) in err


#: Configurations that cannot be right: a top level that is not a mapping, unknown fields,
#: counts below 1, text where a number goes.
BAD_CONFIGS = st.one_of(
    st.lists(st.integers(), min_size=1),
    st.integers().filter(bool),
    st.text(min_size=1).map(lambda t: {"__scalar__": t}),
    st.dictionaries(  # (keys starting with "_" are the file's metadata, such as _type)
        st.from_regex(r"[a-j][a-j_]{2,12}", fullmatch=True).filter(
            lambda k: k not in HyperParameters.model_fields
        ),
        st.integers(),
        min_size=1,
    ),
    st.integers(max_value=0).map(lambda n: {"rl": {"num_iterations": n}}),
    st.text(alphabet="xyz", min_size=1).map(lambda t: {"rl": {"rollouts_per_iteration": t}}),
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(config=BAD_CONFIGS, suffix=st.sampled_from([".yaml", ".json"]))
def test_a_malformed_config_file_is_refused_in_one_line(config, suffix, scratch, capsys):
    if isinstance(config, dict) and "__scalar__" in config:
        config = config["__scalar__"]  # a bare string at the top level
    path = scratch.parent / f"generated{suffix}"  # beside the folder the check watches
    text = json.dumps(config) if suffix == ".json" else yaml.safe_dump(config)
    path.write_text(text)
    for command in (["plan", str(path)], ["run", str(path), "--dry-run"]):
        err = refused(command, scratch, capsys)
        assert path.name in err or "is not allowed" in err or "no field" in err
