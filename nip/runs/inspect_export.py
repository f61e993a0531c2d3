"""A run's dialogues as Inspect evaluation logs, for ``inspect view`` and Inspect's data frames.

``nip export inspect RUN_DIR [--out DIR]`` (a sweep: one folder per cell) or
``export_inspect("runs/my-run")``; then ``inspect view --log-dir RUN_DIR/inspect``. Made with
inspect_ai's own types and writer (the ``inspect`` extra): one log per saved rollout file
(``{split}_it{NNNN}.eval``), one sample per dialogue. A sample's input is the question and
solution, its target the true label (``accept``/``reject``), its messages each agent turn as an
assistant message of its model (``agent``, ``round``, ``channels`` in metadata), its output the
verifier's decision; scores ``decision``, ``correct``, ``score`` (when continuous) and
``reward_<agent>``. The run's parameters are ``eval.metadata["hyper_params"]``, each agent's
model its model role.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nip._version import __version__
from nip.extras import needs
from nip.rollouts.records import Transcript
from nip.runs.run_dir import RunDirectory
from nip.runs.sweep_dir import CELLS, is_sweep_dir
from nip.utils.files import read_json_object

__all__ = ["export_inspect"]


def export_inspect(run_dir: str | Path, out_dir: str | Path | None = None) -> list[Path]:
    """Write the dialogues of the run (or every cell of the sweep) in ``run_dir`` as Inspect
    logs in ``out_dir`` (default ``run_dir/inspect``; cells in ``out_dir/<cell>/``); returns
    the logs written, one per split and iteration.

    Raises:
        NotARunDirectoryError: ``run_dir`` holds neither a run nor a sweep.
        MissingExtraError: inspect_ai is not installed (``pip install 'nip[inspect]'``).
    """
    path = Path(run_dir)
    out = Path(out_dir) if out_dir is not None else path / "inspect"
    if is_sweep_dir(path):
        cells = sorted(p for p in (path / CELLS).glob("*") if (p / "hyper_params.json").is_file())
        return [log for cell in cells for log in export_inspect(cell, out / cell.name)]
    directory = RunDirectory.of_run(path)
    with needs("inspect"):
        from inspect_ai.log import write_eval_log
    logs = []
    for rollouts in sorted((directory.path / "rollouts").glob("*_it*.jsonl")):
        split, _, number = rollouts.stem.rpartition("_it")
        transcripts = directory.load_rollouts(split, int(number))
        log = eval_log(directory, split, int(number), transcripts)
        target = out / f"{rollouts.stem}.eval"
        target.parent.mkdir(parents=True, exist_ok=True)
        write_eval_log(log, str(target))
        logs.append(target)
    return logs


def eval_log(
    directory: RunDirectory, split: str, iteration: int, transcripts: Sequence[Transcript]
) -> Any:
    """One split and iteration of a run as an ``inspect_ai.log.EvalLog``."""
    from inspect_ai.log import (
        EvalConfig,
        EvalDataset,
        EvalLog,
        EvalMetric,
        EvalResults,
        EvalScore,
        EvalSpec,
        EvalStats,
    )
    from inspect_ai.model import ModelUsage

    params = read_json_object(directory.path / "hyper_params.json")
    created = _iso(read_json_object(directory.path / "meta.json").get("created"))
    agents = params.get("agents") or {}
    roles = {name: _model_config(agent) for name, agent in agents.items()}
    run = directory.path.name
    log_id = f"{run}-{split}-{iteration}"
    providers = {name: role.model.split("/")[0] for name, role in roles.items()}
    samples = [
        _sample(t, number, created, log_id, providers) for number, t in enumerate(transcripts)
    ]
    usage: dict[str, ModelUsage] = {}
    for sample in samples:
        for model, used in sample.model_usage.items():
            usage[model] = usage[model] + used if model in usage else used
    names = sorted({name for sample in samples for name in sample.scores or {}})
    scores = [
        EvalScore(
            name=name,
            scorer=name,
            metrics={"mean": EvalMetric(name="mean", value=_mean(samples, name))},
        )
        for name in names
        if _mean(samples, name) is not None
    ]
    verifier = roles.get("verifier")
    return EvalLog(
        status="success",
        eval=EvalSpec(
            run_id=run,
            eval_id=log_id,
            task_id=f"{run}-{split}",
            created=created,
            task=f"nip/{params.get('interaction_protocol', 'nip')}",
            task_display_name=f"{run} · {split} · iteration {iteration}",
            dataset=EvalDataset(
                name=str(params.get("dataset", "")),
                samples=len(samples),
                sample_ids=[s.id for s in samples],
            ),
            model=verifier.model if verifier is not None else "none/none",
            model_roles=roles or None,
            config=EvalConfig(),
            packages={"nip": __version__},
            metadata={"hyper_params": params, "split": split, "iteration": iteration},
        ),
        results=EvalResults(
            total_samples=len(samples), completed_samples=len(samples), scores=scores
        ),
        stats=EvalStats(started_at=created, completed_at=created, model_usage=usage),
        samples=samples,
    )


def _sample(
    transcript: Transcript, number: int, created: str, log_id: str, providers: dict[str, str]
) -> Any:
    from inspect_ai.event import ModelEvent
    from inspect_ai.log import EvalSample
    from inspect_ai.model import (
        ChatCompletionChoice,
        ChatMessageAssistant,
        ChatMessageUser,
        GenerateConfig,
        ModelOutput,
        ModelUsage,
    )
    from inspect_ai.scorer import Score

    point = transcript.datapoint
    claim = f"{point.question}\n\nProposed solution:\n{point.solution}"
    sample_id = transcript.id or str(number)
    uuid = f"{log_id}-{sample_id}"  # unique across logs: Inspect's frames join on it
    messages: list[Any] = [ChatMessageUser(id=f"{uuid}-0", content=claim, source="input")]
    # One model event per turn (what messages_df and the viewer's transcript read): its
    # input is the dialogue so far, not the agent's own prompt, which the run does not keep.
    events: list[Any] = []
    usage: dict[str, ModelUsage] = {}
    for turn in transcript.turns:
        model = _model_name(turn.model, providers.get(turn.agent))
        message = ChatMessageAssistant(
            id=f"{uuid}-{len(messages)}",
            content=turn.raw_text,
            model=model,
            source="generate",
            metadata={
                "agent": turn.agent,
                "round": turn.round,
                "channels": list(turn.channels),
                "valid": turn.valid,
                "decision": turn.decision.word,
            },
        )
        used = ModelUsage(
            input_tokens=turn.prompt_tokens,
            output_tokens=turn.completion_tokens,
            total_tokens=turn.prompt_tokens + turn.completion_tokens,
        )
        stop = "max_tokens" if turn.token_limit else "stop"
        events.append(
            ModelEvent(
                timestamp=created,
                model=model,
                role=turn.agent,
                input=list(messages),
                tools=[],
                tool_choice="none",
                config=GenerateConfig(),
                output=ModelOutput(
                    model=model,
                    choices=[ChatCompletionChoice(message=message, stop_reason=stop)],
                    usage=used,
                ),
                retries=turn.retries,
                error=turn.error,
                cache="read" if turn.cached else None,
                working_time=turn.latency_s,
            )
        )
        messages.append(message)
        usage[model] = usage[model] + used if model in usage else used
    scores = {
        "decision": Score(value=transcript.decision.word),
        "correct": Score(value=1.0 if transcript.correct else 0.0),
        **{f"reward_{a}": Score(value=r) for a, r in transcript.episode_rewards.items()},
    }
    if transcript.score is not None:
        scores["score"] = Score(value=transcript.score)
    verifier = next((t.model for t in reversed(transcript.turns) if t.agent == "verifier"), None)
    verifier = _model_name(verifier, providers.get("verifier"))
    return EvalSample(
        id=sample_id,
        uuid=uuid,
        epoch=1,
        input=claim,
        target="accept" if point.y == 1 else "reject",
        messages=messages,
        output=ModelOutput.from_content(verifier, transcript.decision.word),
        scores=scores,
        metadata={
            "datapoint_id": point.id,
            "question": point.question,
            "solution": point.solution,
            "label": point.y,
            "stance": point.stance,
            "stances": dict(transcript.stances),
            "protocol": transcript.protocol,
            "iteration": transcript.iteration,
            "seed": transcript.seed,
            "rounds": transcript.num_rounds,
        },
        model_usage=usage,
        events=events,
    )


def _model_name(model: str | None, provider: str | None = None) -> str:
    """A model as Inspect names them, ``provider/model`` (the agent's provider)."""
    if not model:
        model = "unknown"
    return model if "/" in model else f"{provider or 'nip'}/{model}"


def _model_config(agent: dict[str, Any]) -> Any:
    from inspect_ai.model import GenerateConfig, ModelConfig

    provider = "dummy" if agent.get("use_dummy_api") else agent.get("model_provider", "nip")
    model = str(agent.get("model_name", "unknown"))
    name = model if "/" in model else f"{str(provider).lower()}/{model}"
    return ModelConfig(model=name, config=GenerateConfig())


def _mean(samples: Sequence[Any], name: str) -> float | None:
    values = [
        s.scores[name].value
        for s in samples
        if name in (s.scores or {}) and isinstance(s.scores[name].value, int | float)
    ]
    return sum(values) / len(values) if values else None


def _iso(created: Any) -> str:
    seconds = float(created) if isinstance(created, int | float) else 0.0
    return dt.datetime.fromtimestamp(seconds, dt.UTC).isoformat()
