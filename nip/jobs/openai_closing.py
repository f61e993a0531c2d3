"""OpenAI's closing of self-serve fine-tuning (:data:`CLOSING_STAGES`, docs/training.md) and
the shutdown of its models (:data:`MODEL_SHUTDOWNS`), said before a run pays for rollouts: the
dry run and ``nip plan`` name the open-weight preset to use instead, and a refused job creation
(:func:`refused_job_error`) stops the run at once, its rollouts kept for a resume.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Collection
from typing import NamedTuple

from nip.errors import FineTuningClosedError
from nip.parameters import HyperParameters

#: Since when, and for whom, OpenAI accepts no new fine-tuning jobs.
CLOSING_STAGES: tuple[tuple[dt.date, str], ...] = (
    (dt.date(2026, 5, 7), "organisations that never used its self-serve fine-tuning"),
    (dt.date(2026, 7, 2), "organisations without inference on a fine-tuned model in 60 days"),
    (dt.date(2027, 1, 6), "every organisation"),
)


class Shutdown(NamedTuple):
    """When OpenAI shuts a model family down (its dated snapshots and fine-tunes with it)."""

    family: str
    date: dt.date
    source: str
    reported: bool  # True: said by third parties, not read on OpenAI's deprecations page


#: The day :data:`MODEL_SHUTDOWNS` was last checked.
SHUTDOWNS_READ_ON = "2026-12-01"
_GUIDES = "third-party migration guides; not on the copy of OpenAI's deprecations page read"
#: Published shutdown dates of the OpenAI models nip's presets use, by family.
MODEL_SHUTDOWNS: tuple[Shutdown, ...] = (
    Shutdown("gpt-4o", dt.date(2027, 1, 14), _GUIDES, reported=True),
    Shutdown("gpt-4o-mini", dt.date(2027, 1, 14), _GUIDES, reported=True),
    Shutdown("gpt-4.1", dt.date(2027, 1, 14), _GUIDES, reported=True),
    Shutdown("gpt-4.1-mini", dt.date(2027, 1, 14), _GUIDES, reported=True),
)


def model_shutdown(model: str) -> Shutdown | None:
    """The shutdown of ``model`` (a family, a dated snapshot or a fine-tune of one), or None."""
    for shutdown in sorted(MODEL_SHUTDOWNS, key=lambda s: -len(s.family)):
        if re.fullmatch(
            rf"(ft:)?{re.escape(shutdown.family)}(-\d{{4}}-\d{{2}}-\d{{2}})?(:.*)?", model
        ):
            return shutdown
    return None


def model_shutdown_notice(
    hyper_params: HyperParameters, *, instead: str | None = None
) -> str | None:
    """One sentence naming each agent whose OpenAI model has a published shutdown date, and
    what to use instead; None when no agent has one."""
    retired = _retired(hyper_params)
    return None if retired is None else f"{retired}; {instead or _advice(hyper_params)}"


def _retired(hyper_params: HyperParameters) -> str | None:
    found: dict[tuple[str, Shutdown], list[str]] = {}
    for name, agent in hyper_params.agents.items():
        shutdown = model_shutdown(agent.model_name) if agent.served_by == "OpenAI" else None
        if shutdown is not None:
            found.setdefault((agent.model_name, shutdown), []).append(name)
    if not found:
        return None
    models = "; ".join(
        f"{', '.join(agents)} on {model}: shut down with its fine-tunes on "
        f"{shutdown.date.isoformat()}"
        + (f" (reported, {shutdown.source} on {SHUTDOWNS_READ_ON})" if shutdown.reported else "")
        for (model, shutdown), agents in found.items()
    )
    return f"OpenAI retires this run's models ({models})"


#: Words in a refusal that say fine-tuning is closed rather than that the request is wrong.
_CLOSED_WORDS = ("no longer", "deprecat", "winding down", "wound down", "shut down")


def closing_text(today: dt.date | None = None) -> str:
    """Who can no longer create OpenAI fine-tuning jobs, as of ``today``."""
    today = today or dt.date.today()
    last_date, _ = CLOSING_STAGES[-1]
    if today >= last_date:
        return f"OpenAI accepts no new fine-tuning jobs since {last_date.isoformat()}"
    stages = "; ".join(
        f"{'since' if today >= date else 'from'} {date.isoformat()}: {who}"
        for date, who in CLOSING_STAGES
    )
    return f"OpenAI no longer accepts new fine-tuning jobs from most organisations ({stages})"


def open_weight_preset(hyper_params: HyperParameters) -> str:
    """The ``open/*`` preset of the run's protocol and algorithm (``open/nip-ei``), or the
    nearest one there is."""
    from nip.configs import list_presets

    algorithm = "malt" if hyper_params.trainer == "pure_text_malt" else "ei"
    names = {preset.name for preset in list_presets()}
    for name in (f"open/{hyper_params.interaction_protocol}-{algorithm}", "open/nip-ei"):
        if name in names:
            return name
    return "open/nip-ei"


def _advice(hyper_params: HyperParameters) -> str:
    preset = open_weight_preset(hyper_params)
    return (
        f"use the open-weight preset {preset} (`nip run {preset} --serve` on a GPU machine), "
        "or train open-weight models on hosted GPUs with Tinker or Together AI "
        "(--set agents.*.model_provider=...; docs/training.md, 'The paper's comparison on "
        "open weights' and 'Together AI')"
    )


def openai_fine_tuning_notice(
    hyper_params: HyperParameters,
    trained_agents: Collection[str],
    today: dt.date | None = None,
    *,
    instead: str | None = None,
) -> str | None:
    """What a run on OpenAI should know first: that it fine-tunes ``trained_agents`` through
    OpenAI, which is closing, and which of its models OpenAI retires; None when neither applies.
    ``instead`` defaults to the run's ``open/*`` preset."""
    through_openai = sorted(
        name for name in trained_agents if hyper_params.agents[name].served_by == "OpenAI"
    )
    retired = _retired(hyper_params)
    if not through_openai and retired is None:
        return None
    closing = through_openai and (
        f"this run fine-tunes {', '.join(through_openai)} through OpenAI, and "
        f"{closing_text(today)}: its first job will most likely be refused after an "
        "iteration of paid rollouts"
    )
    said = "; ".join(part for part in (closing, retired) if part)
    return f"{said}; {instead or _advice(hyper_params)}"


def refused_job_error(status: int, message: str) -> FineTuningClosedError | None:
    """The error that stops a run when the API refused a job: HTTP 403, or a refusal saying
    fine-tuning is closed; None for any other error (a bad file, a rate limit)."""
    closed = status in (400, 403, 404, 410) and any(w in message.lower() for w in _CLOSED_WORDS)
    if status != 403 and not closed:
        return None
    from nip.configs import open_model_overrides

    switch = " ".join(f"--set {path}={value}" for path, value in open_model_overrides().items())
    return FineTuningClosedError(
        f"the fine-tuning API refused to create the job (HTTP {status}: {message}); "
        f"{closing_text()}. The run stopped at once; its rollouts and datasets are kept: "
        f"resume it on the open-weight model with `nip resume RUN_DIR --serve "
        f"--accept-changes {switch}`, or run the experiment's open/* preset (nip presets)"
    )
