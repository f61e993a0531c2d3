"""``nip sweep``: run, price, resume or show a grid of configurations."""

import argparse
import sys

from nip.cli import _args

HELP = "Run a grid of configurations (nip sweep GRID.yaml; status DIR; resume DIR)."
DESCRIPTION = (
    "Every cell of a grid as a resumable run under one directory; see docs/training.md, 'Sweeps'."
)
USAGE = "usage: nip sweep GRID.yaml | nip sweep status DIR | nip sweep resume DIR"
#: What the cells are priced in place of a grid that fine-tunes through OpenAI.
OPEN_GRID = "the open-weight grid open-ei (`nip sweep open-ei --serve` on a GPU machine)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("target", nargs="+", metavar="GRID.yaml | status DIR | resume DIR")
    add("--sweep-dir", help="Where the cells go (default: runs/sweeps/NAME).")
    add(
        "--set",
        action="append",
        metavar="PATH=VALUE",
        help="Change one parameter of every cell by dotted path (repeatable), after the "
        "grid's own set: --set agents.*.model_name=Qwen/Qwen2.5-14B-Instruct",
    )
    add("--dry-run", action="store_true", help="Price every cell and the total.")
    add("--sample-items", type=_args.count, default=4, help="--dry-run: see nip run.")
    add("--max-parallel", type=_args.count, help="Cells at once (default: the grid's, 4).")
    add("--ray", metavar="auto|ADDRESS", help="Run each cell as a Ray task.")
    add("--cell-resources", default="cpu=1", help="--ray: each cell's resources (cpu=1,gpu=1).")
    add(
        "--server-resources",
        help="--ray --serve: the resources of each node's server (default gpu=1).",
    )
    _args.add_gpu_options(parser)
    _args.add_run_options(parser)
    _args.add_serve_options(parser)
    parser.set_defaults(run_dir=None)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from nip.errors import InvalidParameterError
    from nip.sweeps import Sweep, grid

    action, target = (
        (args.target[0], args.target[1:])
        if args.target[0] in ("status", "resume") and not Path(args.target[0]).is_file()
        else ("", args.target)
    )
    if len(target) != 1:
        what = f"nip sweep {action}: which sweep folder? " if action else "nip sweep: "
        print(f"{what}{USAGE}", file=sys.stderr)
        return 2
    if not args.dry_run:
        _args.refuse_gpu_options_without_dry_run(args)
    if action == "status":
        if args.set:
            raise InvalidParameterError("--set", args.set, "a grid to run or price, not status")
        from nip.runs.spend import sweep_status_text

        print(sweep_status_text(target[0]))  # refuses a folder that holds no sweep
        return 0
    if action == "resume":
        spec, sweep_dir = grid.load_sweep_spec(target[0]), Path(target[0])
    else:
        spec = grid.GridSpec.load(target[0])
        sweep_dir = Path(args.sweep_dir or grid.default_sweep_dir(spec.name))
    if overrides := _args.cli_overrides(args):  # every cell's: the grid's own `set:`, then these
        spec.overrides = {**spec.overrides, **overrides}
    if args.dry_run:
        return _dry_run(args, spec)
    args.run_dir = None
    if args.serve is None:
        args.serve = spec.serve  # the grid's own setting, unless --serve/--no-serve says
    settings = _args.run_settings(args)
    _args.check_serve_options(settings)
    if args.server_resources is not None and not (args.ray and settings.serve):
        raise InvalidParameterError("--server-resources", args.server_resources, "--ray --serve")
    if args.ray:
        outcomes = _run_on_ray(args, spec, sweep_dir, settings)
    else:
        sweep = Sweep(spec, sweep_dir, settings)
        outcomes = sweep.run(max_parallel=args.max_parallel, serve=settings.serve)
    failed = {name: o for name, o in outcomes.items() if o not in ("done", "stopped")}
    print(
        f"\nsweep directory: {sweep_dir} ({len(outcomes) - len(failed)}/{len(outcomes)} cells "
        f"done or stopped); compare: nip compare {sweep_dir}"
    )
    return 1 if failed else 0


def _dry_run(args: argparse.Namespace, spec) -> int:
    from nip.sweeps.grid import estimate_sweep

    gpu = _args.gpu_options(args)
    estimate = estimate_sweep(spec, _args.run_settings(args), sample_items=args.sample_items)
    print(estimate)
    _args.print_gpu_time([(c.name, c.hyper_params, e) for c, e in estimate.cells], gpu)
    for cell, cell_estimate in estimate.cells:
        _args.print_together_warnings(cell.hyper_params, cell_estimate.plan, f"{cell.name}: ")
    for cell, cell_estimate in estimate.cells:  # one warning for the grid
        if _args.print_openai_notice(cell.hyper_params, cell_estimate.plan, instead=OPEN_GRID):
            break
    return 0


def _run_on_ray(args: argparse.Namespace, spec, sweep_dir, settings) -> dict[str, str]:
    """``--ray``: each cell a Ray task; with ``--serve``, one server per node (Ray actors)."""
    if settings.serve:
        from nip.sweeps.ray_servers import run_sweep_ray_served

        return run_sweep_ray_served(
            spec,
            sweep_dir,
            settings,
            address=args.ray,
            resources=args.cell_resources,
            server_resources=args.server_resources or "gpu=1",
        )
    from nip.sweeps.ray import parse_resources, run_sweep_ray

    parse_resources(args.cell_resources)  # refused before the cells start
    return run_sweep_ray(spec, sweep_dir, settings, address=args.ray, resources=args.cell_resources)
