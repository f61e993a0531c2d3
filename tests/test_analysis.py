"""Rollout analysis: LLM judges answer yes/no questions about each agent's messages."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from nip.analysis.judges import ANALYSERS, analyse_async, judge_prompt, summarise
from nip.backends import Completion, GenerationResult
from nip.parameters import CommonProtocolParameters, HyperParameters, PureTextAgentParameters
from nip.protocols import NipProtocol
from nip.rollouts import Datapoint
from nip.session import Session
from nip.settings import ExperimentSettings

ITEMS = [Datapoint(id=f"d{i}", question="q", solution=f"s{i}", y=i % 2) for i in range(6)]


def played(protocol: str):
    names = HyperParameters(interaction_protocol=protocol).agent_names
    hp = HyperParameters(
        interaction_protocol=protocol,
        agents={n: PureTextAgentParameters(use_dummy_api=True) for n in names},
    )
    session = Session(hp, ExperimentSettings(show_progress=False))
    return session, session.rollouts(ITEMS).transcripts


class Judge:
    """Answers from a fixed list, recording the prompts."""

    name = "judge"

    def __init__(self, answers):
        self.answers = list(answers)
        self.prompts = []

    async def generate(self, request):
        self.prompts.append(request.messages)
        text = self.answers.pop(0) if self.answers else "Yes"
        return GenerationResult((Completion(text, "stop"),))

    async def aclose(self):
        return None


def test_role_conformance_states_the_side_each_debater_argued():
    """The original told the judge every prover argued "correct"."""
    session, transcripts = played("debate")
    analyser = ANALYSERS["prover_role_conformance"]
    transcript = next(t for t in transcripts if t.turns_of("prover0"))
    for prover, side in (("prover0", "incorrect (reject)"), ("prover1", "correct (accept)")):
        channel = f"{prover}_channel"
        prompt = judge_prompt(analyser, transcript, session.handler, prover, channel)
        assert f"argue that the solution is {side}" in prompt[-1]["content"]
        assert prompt[-1]["content"].endswith("Answer Yes or No.")


@pytest.mark.parametrize(
    ("scale", "form"),
    [
        ("accept_reject", 'a final line "Decision: accept" or "Decision: reject"?'),
        ("out_of_10", '"Decision: <number>", where <number> is a whole number from 0 to 10'),
    ],
)
def test_format_conformance_asks_about_the_verifiers_decision_scale(scale, form):
    _, transcripts = played("nip")
    handler = NipProtocol(CommonProtocolParameters(verifier_decision_scale=scale))
    analyser = ANALYSERS["verifier_format_conformance"]
    prompt = judge_prompt(analyser, transcripts[0], handler, "verifier", "main")
    assert form in prompt[-1]["content"]


def test_every_agent_channel_pair_is_judged_by_each_applicable_analyser():
    session, transcripts = played("mnip")
    judge = Judge([])
    results = asyncio.run(
        analyse_async(
            transcripts,
            session.handler,
            judge,
            model="judge",
            analysers=["prover_direct_quotation", "verifier_format_conformance"],
        )
    )
    expected = sum(
        len({m.channel for m in t.messages if m.sender == a})
        for t in transcripts
        for a in ("prover0", "prover1")
    ) + sum(len({m.channel for m in t.messages if m.sender == "verifier"}) for t in transcripts)
    assert len(results) == expected == len(judge.prompts)
    assert {r.agent for r in results if r.analyser == "prover_direct_quotation"} <= {
        "prover0",
        "prover1",
    }


def test_an_answer_that_is_not_yes_or_no_is_retried_then_left_unanswered():
    session, transcripts = played("adp")
    judge = Judge(["Maybe.", "yes, clearly"] + ["Hmm"] * 100)
    results = asyncio.run(
        analyse_async(
            transcripts[:2], session.handler, judge, model="j", analysers=["follow_up"], retries=2
        )
    )
    assert results[0].answer is True and results[0].raw == "yes, clearly"
    assert all(r.answer is None for r in results[1:])


def test_the_summary_is_the_share_of_yes_per_agent_and_analyser():
    session, transcripts = played("nip")
    results = asyncio.run(
        analyse_async(
            transcripts, session.handler, Judge(["No"] * 200), model="j", analysers=["follow_up"]
        )
    )
    summary = summarise(results)
    assert summary == {"prover.follow_up": 0.0, "verifier.follow_up": 0.0}


@pytest.mark.filterwarnings("ignore:group .* fewer than")
def test_nip_analyse_judges_a_saved_run_and_stores_the_results(tmp_path):
    from nip.training.trainer import PureTextEiTrainer

    hp = HyperParameters.construct_test_params()
    hp.dataset = str(_dataset(tmp_path))
    run = tmp_path / "run"
    PureTextEiTrainer(hp, ExperimentSettings(run_dir=run, show_progress=False)).train()
    output = subprocess.run(
        [
            sys.executable,
            "-m",
            "nip.cli",
            "analyse",
            str(run),
            "--dummy",
            "--quiet",
            "--analysers",
            "follow_up",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    assert "verifier.follow_up" in output
    frame = PureTextEiTrainer.resume(run).analysis_dataframe()
    assert set(frame["analyser"]) == {"follow_up"} and len(frame) > 0


def _dataset(tmp_path):
    import json

    path = tmp_path / "data.jsonl"
    rows = [
        {
            "question": "Return x.",
            "solution": f"def f(x): return x + {i % 2}",
            "y": 1 - i % 2,
            "split": "train" if i < 8 else "test",
            "source_task_id": f"t{i}",
        }
        for i in range(10)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


class RecordingLogger:
    """A stat logger that keeps what it is given."""

    def __init__(self):
        self.records: list[tuple[dict, int | None]] = []
        self.finished = False

    def log(self, metrics, step):
        self.records.append((metrics, step))

    def finish(self):
        self.finished = True


@pytest.mark.filterwarnings("ignore:group .* fewer than")
def test_the_analysis_summary_is_logged_with_the_analysis_prefix(tmp_path):
    from nip.training.trainer import PureTextEiTrainer

    hp = HyperParameters.construct_test_params()
    hp.dataset = str(_dataset(tmp_path))
    run = tmp_path / "run"
    PureTextEiTrainer(hp, ExperimentSettings(run_dir=run, show_progress=False)).train()
    trainer = PureTextEiTrainer.resume(run, ExperimentSettings(show_progress=False))
    logger = RecordingLogger()
    trainer._make_logger = lambda: logger

    summary = trainer.analyse(PureTextAgentParameters(use_dummy_api=True), analysers=["follow_up"])

    metrics, step = logger.records[-1]
    assert step is None and metrics["analysis_iteration"] == trainer.state.iteration
    assert metrics == {
        "analysis_iteration": trainer.state.iteration,
        **{f"analysis_{k}": v for k, v in summary.items()},
    }
    assert "analysis_verifier.follow_up" in metrics and logger.finished
