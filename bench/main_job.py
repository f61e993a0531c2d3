"""Where the README's main job spends its time, stage by stage, with timestamps.

Run (the same work as ``nip run quickstart``)::

    HF_HUB_OFFLINE=1 .venv/bin/python bench/main_job.py --run-dir /tmp/qs-bench
    HF_HUB_OFFLINE=1 .venv/bin/python bench/main_job.py --run-dir /tmp/qs-bench --json out.json

The trainer is built as ``nip run`` builds it; each stage method is wrapped to record its wall
time and the CPU time (user + sys) of this process and of its finished children, with the
load average beside it. Afterwards every fine-tuning job's own files give its timeline:
submitted (``spec.json`` written), training started (the first step's event), finished
(``status.json``). The local backend's engine is wrapped to time model loads, adapter loads
and ``model.generate``. Peak memory is this process's maximum RSS (and the children's).

A first run (no converted model, no cached responses), a second one (the first run's
responses cached), and one that does all the work again (response cache off)::

    .venv/bin/python bench/main_job.py --cache-dir /tmp/nip-cache --fresh-cache
    .venv/bin/python bench/main_job.py --cache-dir /tmp/nip-cache
    .venv/bin/python bench/main_job.py --cache-dir /tmp/nip-cache --cache off
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import tempfile
import time
from pathlib import Path


def _cpu() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


def _timed(record: list[dict], label: str, function):
    """Wrap a sync function so each call appends a timing record."""

    def wrapper(*args, **kwargs):
        start, cpu = time.time(), time.thread_time()
        try:
            return function(*args, **kwargs)
        finally:
            entry = {"what": label, "start": start, "seconds": time.time() - start}
            entry["thread_cpu_s"] = time.thread_time() - cpu
            if label == "generate":  # (engine, prepared requests, model key)
                entry["rows"] = sum(len(p.rows) for p in args[1])
                entry["prompt_tokens"] = sum(len(p.prompt_ids) * len(p.rows) for p in args[1])
            record.append(entry)

    return wrapper


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="quickstart")
    parser.add_argument("--run-dir", default=None)
    parser.add_argument("--cache-dir", default=None, help="NIP_CACHE_DIR: models, responses")
    parser.add_argument("--fresh-cache", action="store_true", help="empty --cache-dir first")
    parser.add_argument("--cache", default="auto", help="the response cache: auto, on or off")
    parser.add_argument(
        "--prefix-cache-mb",
        type=float,
        default=None,
        help="the embedded model's prefix cache (LocalBackend's default when not given)",
    )
    parser.add_argument(
        "--local-engine",
        default="transformers",
        choices=["transformers", "vllm"],
        help="what runs the embedded model (vllm: its processes' memory is not in the peak)",
    )
    parser.add_argument("--stages", type=int, default=None, help="stop after this many")
    parser.add_argument("--json", default=None, help="write the figures here too")
    args = parser.parse_args()

    if args.cache_dir:
        if args.fresh_cache:
            shutil.rmtree(args.cache_dir, ignore_errors=True)
        os.environ["NIP_CACHE_DIR"] = args.cache_dir
    run_dir = Path(args.run_dir or tempfile.mkdtemp(prefix="nip-qs-"))
    shutil.rmtree(run_dir, ignore_errors=True)
    t0 = time.time()
    load_before = os.getloadavg()

    from nip.backends.local import _engine
    from nip.cli._args import load_config as _load_config
    from nip.settings import ExperimentSettings
    from nip.training.stages import STAGES
    from nip.training.trainer import build_trainer

    engine_calls: list[dict] = []
    if args.prefix_cache_mb is not None:
        engine_init = _engine.Engine.__init__

        def with_prefix_cache(self, *a, **kw):
            engine_init(self, *a, **{**kw, "prefix_cache_mb": args.prefix_cache_mb})

        _engine.Engine.__init__ = with_prefix_cache
    _engine.Engine.__init__ = _timed(engine_calls, "model load", _engine.Engine.__init__)
    _engine.Engine._load_layer = _timed(engine_calls, "adapter load", _engine.Engine._load_layer)
    _engine.Engine._generate = _timed(engine_calls, "generate", _engine.Engine._generate)

    hyper_params = _load_config(args.config)
    trainer = build_trainer(
        hyper_params,
        ExperimentSettings(run_dir=run_dir, cache=args.cache, local_engine=args.local_engine),
        overwrite=True,
    )
    stages: list[dict] = []
    for stage, work in list(STAGES.items()):  # this script's process: its own table

        async def timed(run, callbacks, work=work, stage=stage):
            start, (own, kids) = time.time(), _cpu()
            await work(run, callbacks)
            own2, kids2 = _cpu()
            stages.append(
                {
                    "iteration": trainer.state.iteration,
                    "stage": stage,
                    "start": start - t0,
                    "seconds": time.time() - start,
                    "cpu_s": own2 - own,
                    "children_cpu_s": kids2 - kids,
                    "load": os.getloadavg()[0],
                }
            )

        STAGES[stage] = timed
    trainer.train(max_stages=args.stages)
    wall = time.time() - t0
    own, kids = _cpu()
    jobs = _job_timelines(run_dir / "jobs", t0)
    figures = {
        "wall_s": wall,
        "cpu_s": own,
        "children_cpu_s": kids,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "children_peak_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "stages": stages,
        "jobs": jobs,
        "engine": [{**c, "start": c["start"] - t0} for c in engine_calls],
    }
    _print(figures)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


def _job_timelines(jobs_dir: Path, t0: float) -> list[dict]:
    timelines = []
    for job_dir in sorted(p for p in jobs_dir.glob("*") if p.is_dir()):
        events = [
            json.loads(line)
            for line in (job_dir / "events.jsonl").read_text().splitlines()
            if line.strip()
        ]
        steps = [e for e in events if "loss" in e.get("data", {})]
        began = [e for e in events if e.get("data", {}).get("step") == 0]
        submitted = (job_dir / "spec.json").stat().st_mtime
        status = json.loads((job_dir / "status.json").read_text())
        timelines.append(
            {
                "job": job_dir.name,
                "submitted": submitted - t0,
                "training_began": began[0]["created_at"] - t0 if began else None,
                "first_step_logged": steps[0]["created_at"] - t0 if steps else None,
                "steps": len(steps),
                "finished": status["updated"] - t0,
                "status": status["status"],
            }
        )
    return timelines


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _print(figures: dict) -> None:
    print(
        f"\nwall {figures['wall_s']:.1f} s · CPU {figures['cpu_s']:.1f} s "
        f"(+ {figures['children_cpu_s']:.1f} s in child processes) · peak RSS "
        f"{figures['peak_rss_mb']:.0f} MB (children {figures['children_peak_rss_mb']:.0f} MB) · "
        f"load {figures['load_before'][0]:.2f} -> {figures['load_after'][0]:.2f}"
    )
    print(f"\n{'it':>2} {'stage':<22}{'start':>8}{'wall':>8}{'CPU':>8}{'child CPU':>10}{'load':>6}")
    for s in figures["stages"]:
        print(
            f"{s['iteration']:>2} {s['stage']:<22}{s['start']:>8.1f}{s['seconds']:>8.1f}"
            f"{s['cpu_s']:>8.1f}{s['children_cpu_s']:>10.1f}{s['load']:>6.2f}"
        )
    print(
        f"\n{'job':<16}{'submitted':>10}{'began':>8}{'start delay':>12}{'1st step':>10}"
        f"{'done':>8}{'steps':>6}"
    )
    for j in figures["jobs"]:
        began, first = j.get("training_began"), j["first_step_logged"]
        delay = began - j["submitted"] if began is not None else None
        print(
            f"{j['job']:<16}{j['submitted']:>10.1f}{_num(began):>8}{_num(delay):>12}"
            f"{_num(first):>10}{j['finished']:>8.1f}{j['steps']:>6}"
        )
    totals: dict[str, list[float]] = {}
    for call in figures["engine"]:
        totals.setdefault(call["what"], []).append(call["seconds"])
    print()
    for what, seconds in totals.items():
        print(f"{what:<14} {len(seconds):>3} calls {sum(seconds):>7.1f} s")


if __name__ == "__main__":
    main()
