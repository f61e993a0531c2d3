"""The dry run: calls, tokens and USD of a run, estimated without calling any model."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading

import pytest

from nip.parameters import (
    HyperParameters,
    NipProtocolParameters,
    PureTextAgentParameters,
    PureTextMaltParameters,
    RlParameters,
    TextRlParameters,
)
from nip.providers.openai import OPENAI_FINE_TUNING_PRICES_USD_PER_1M, OPENAI_PRICES_USD_PER_1M
from nip.session import Session
from nip.settings import ExperimentSettings
from nip.training.cost_estimate import estimate_cost
from nip.training.dialogue_sizes import (
    CharsPerTokenCounter,
    count_chat_tokens,
    encoding_name,
    filler_text,
    token_counter,
)

MODEL = "gpt-4o-mini"


@pytest.fixture(autouse=True)
def no_key_and_no_tiktoken_file(monkeypatch, tmp_path):
    """No API key anywhere, and tiktoken (if installed) finds no encoding file: chars/4."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENROUTER_API_KEY", raising=False)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "no-tiktoken-files"))


def openai_params(protocol: str = "nip", *, agent=None, **overrides) -> HyperParameters:
    from nip.protocols import protocol_class

    agent = agent or PureTextAgentParameters(model_provider="OpenAI", model_name=MODEL)
    values = dict(
        interaction_protocol=protocol,
        agents={name: agent for name in protocol_class(protocol).agent_names},
        nip_protocol=NipProtocolParameters(max_message_rounds=5),
        rl=RlParameters(num_iterations=2, rollouts_per_iteration=6),
        text_rl=TextRlParameters(test_scheme="last", test_on_whole_dataset=False),
    )
    values.update(overrides)
    return HyperParameters(**values)


def prompt_session(hp: HyperParameters) -> Session:
    """A session with the same prompts as ``hp``'s agents, on the dummy API (no key)."""
    values = hp.to_dict()
    for agent in values["agents"].values():
        agent["use_dummy_api"] = True
    return Session(HyperParameters.from_dict(values))


def lines(estimate, stage: str, iteration: int | None = None, agent: str | None = None):
    return [
        line
        for line in estimate.lines
        if line.stage == stage
        and (iteration is None or line.iteration == iteration)
        and (agent is None or line.agent == agent)
    ]


# ------------------------------------------------------------------- schedule
def test_calls_per_agent_follow_the_protocols_turn_schedule():
    # nip with 5 rounds: verifier, prover, verifier, prover, verifier.
    estimate = estimate_cost(openai_params())
    (verifier,) = lines(estimate, "train", 0, "verifier")
    (prover,) = lines(estimate, "train", 0, "prover")
    assert (verifier.calls, prover.calls) == (3 * 6, 2 * 6)
    assert verifier.dialogues == prover.dialogues == 6


def test_merlin_arthur_counts_each_prover_only_in_the_dialogues_whose_seed_picks_it():
    estimate = estimate_cost(openai_params("merlin_arthur"))
    train = {line.agent: line.calls for line in lines(estimate, "train", 0)}
    assert train["verifier"] == 6
    assert train["prover0"] + train["prover1"] == 6


def test_the_test_pass_follows_the_test_scheme_and_the_number_of_test_passes():
    last = estimate_cost(openai_params())
    assert [line.iteration for line in lines(last, "test", agent="verifier")] == [1]
    every = estimate_cost(
        openai_params(
            rl=RlParameters(num_iterations=2, rollouts_per_iteration=6, num_test_iterations=3),
            text_rl=TextRlParameters(test_scheme="all", test_on_whole_dataset=False),
        )
    )
    tests = lines(every, "test", agent="verifier")
    assert [line.iteration for line in tests] == [0, 1]
    assert all(line.dialogues == 3 * 6 and line.calls == 3 * 6 * 3 for line in tests)


def test_testing_on_the_whole_dataset_counts_every_test_item():
    hp = openai_params(text_rl=TextRlParameters(test_scheme="last", test_on_whole_dataset=True))
    test_items = len(prompt_session(hp).dataset("test"))
    (line,) = lines(estimate_cost(hp), "test", agent="verifier")
    assert line.items == test_items


def test_a_malt_tree_has_k_children_per_node_and_k_to_the_rounds_leaves():
    hp = openai_params(
        trainer="pure_text_malt",
        nip_protocol=NipProtocolParameters(max_message_rounds=3),
        pure_text_malt=PureTextMaltParameters(num_responses_per_timestep=3),
    )
    estimate = estimate_cost(hp)
    train = {line.agent: line for line in lines(estimate, "train", 0)}
    # Round 0: the root asks the verifier; round 1: 3 nodes ask the prover; round 2: 9 nodes.
    assert train["verifier"].calls == 6 * (1 + 9)
    assert train["prover"].calls == 6 * 3
    assert train["verifier"].dialogues == 6 * 27
    # Each request draws k samples, billed as completions.
    assert train["prover"].completion_tokens == 6 * 3 * 3 * 225


def test_rounds_where_only_frozen_agents_act_add_one_child_per_node():
    frozen = PureTextAgentParameters(model_provider="OpenAI", model_name=MODEL, freeze_agent=True)
    hp = openai_params(
        trainer="pure_text_malt",
        nip_protocol=NipProtocolParameters(max_message_rounds=3),
    )
    hp.agents["prover"] = frozen
    train = {line.agent: line for line in lines(estimate_cost(hp), "train", 0)}
    # Round 0: 1 verifier call, 2 children; round 1: the frozen prover adds one child each.
    assert train["prover"].calls == 6 * 2
    assert train["verifier"].calls == 6 * (1 + 2)
    assert train["verifier"].dialogues == 6 * 4


def test_dpo_pairs_are_at_most_one_per_node_and_agent():
    hp = openai_params(
        trainer="pure_text_malt",
        nip_protocol=NipProtocolParameters(max_message_rounds=3),
    )
    fine_tune = {line.agent: line for line in lines(estimate_cost(hp), "fine-tune", 0)}
    assert fine_tune["verifier"].examples == 6 * (1 + 4)
    assert fine_tune["prover"].examples == 6 * 2


# --------------------------------------------------------------------- tokens
def test_prompt_tokens_are_counted_on_the_real_prompts_of_the_items():
    hp = openai_params("solo_verifier", rl=RlParameters(num_iterations=1, rollouts_per_iteration=5))
    estimate = estimate_cost(hp, sample_items=5)
    session = prompt_session(hp)
    real = sum(
        count_chat_tokens(session.dialogue(item).prompt_for("verifier"), CharsPerTokenCounter())
        for item in session.datapoints(5, split="train")
    )
    (line,) = lines(estimate, "train", 0)
    assert line.prompt_tokens == real


def test_later_prompts_grow_by_the_earlier_responses():
    # nip with 3 rounds: the verifier's second prompt holds its first answer and the prover's.
    hp = openai_params(nip_protocol=NipProtocolParameters(max_message_rounds=3))
    estimate = estimate_cost(hp, sample_items=6)
    session = prompt_session(hp)
    first_prompts = sum(
        count_chat_tokens(session.dialogue(item).prompt_for("verifier"), CharsPerTokenCounter())
        for item in session.datapoints(6, split="train")
    )
    (verifier,) = lines(estimate, "train", 0, "verifier")
    response = hp.agents["verifier"].effective_max_tokens_per_message
    assert verifier.prompt_tokens - 2 * first_prompts >= 6 * 2 * response


def test_shorter_responses_give_fewer_completion_and_prompt_tokens():
    full = lines(estimate_cost(openai_params()), "train", 0, "verifier")[0]
    half = lines(estimate_cost(openai_params(), response_fill=0.5), "train", 0, "verifier")[0]
    assert half.completion_tokens * 2 == pytest.approx(full.completion_tokens, rel=0.01)
    assert half.prompt_tokens < full.prompt_tokens


# ----------------------------------------------------------------------- price
def test_api_calls_are_priced_from_the_table_and_settings_override_it():
    hp = openai_params("solo_verifier", rl=RlParameters(num_iterations=1, rollouts_per_iteration=4))
    (line,) = lines(estimate_cost(hp), "train", 0)
    price_in, price_out = OPENAI_PRICES_USD_PER_1M[MODEL]
    expected = (line.prompt_tokens * price_in + line.completion_tokens * price_out) / 1e6
    assert line.usd == pytest.approx(expected)
    cheaper = ExperimentSettings(prices_usd_per_1m={MODEL: (0.0, 1.0)})
    (line,) = lines(estimate_cost(hp, cheaper), "train", 0)
    assert line.usd == pytest.approx(line.completion_tokens / 1e6)


def test_fine_tuning_bills_examples_times_tokens_times_epochs_at_the_training_price():
    hp = openai_params(rl=RlParameters(num_iterations=2, rollouts_per_iteration=6, num_epochs=3))
    (job,) = lines(estimate_cost(hp), "fine-tune", 0, "verifier")
    assert job.examples == 6
    assert job.training_tokens > 0 and job.training_tokens % (6 * 3) == 0
    price = OPENAI_FINE_TUNING_PRICES_USD_PER_1M[MODEL]
    assert job.usd == pytest.approx(job.training_tokens * price / 1e6)


def test_the_last_iteration_submits_no_fine_tuning_job():
    estimate = estimate_cost(openai_params())
    assert {line.iteration for line in lines(estimate, "fine-tune")} == {0}


def test_after_a_job_the_agent_is_priced_as_its_fine_tuned_model():
    estimate = estimate_cost(openai_params())
    assert lines(estimate, "train", 0, "prover")[0].model == MODEL
    assert lines(estimate, "train", 1, "prover")[0].model == f"ft:{MODEL}"


def test_an_already_fine_tuned_model_is_priced_as_one_and_trained_at_its_bases_price():
    tuned = PureTextAgentParameters(
        model_provider="OpenAI", model_name=f"ft:{MODEL}-2024-07-18:my-org::abc123"
    )
    estimate = estimate_cost(openai_params(agent=tuned))
    assert lines(estimate, "train", 0, "prover")[0].model == f"ft:{MODEL}"
    assert lines(estimate, "fine-tune", 0, "prover")[0].model == MODEL


def test_a_frozen_agent_has_no_job_and_keeps_its_base_price():
    frozen = PureTextAgentParameters(model_provider="OpenAI", model_name=MODEL, freeze_agent=True)
    hp = openai_params()
    hp.agents["prover"] = frozen
    estimate = estimate_cost(hp)
    assert lines(estimate, "fine-tune", agent="prover") == []
    assert lines(estimate, "train", 1, "prover")[0].model == MODEL


def test_fine_tuning_on_all_previous_rollouts_grows_the_examples_each_iteration():
    hp = openai_params(
        rl=RlParameters(num_iterations=3, rollouts_per_iteration=6),
        text_rl=TextRlParameters(fine_tune_on_all_previous_rollouts=True),
    )
    jobs = lines(estimate_cost(hp), "fine-tune", agent="verifier")
    assert [job.examples for job in jobs] == [6, 12]


def test_malt_on_all_previous_rollouts_prices_the_pairs_of_every_earlier_malt_iteration():
    """As the trainer: iteration 2's DPO job holds the pairs of iterations 1 and 2 (iteration 0
    is Expert Iteration and has no trees)."""

    def jobs(all_previous: bool) -> list[int]:
        hp = openai_params(
            trainer="pure_text_malt",
            nip_protocol=NipProtocolParameters(max_message_rounds=3),
            rl=RlParameters(num_iterations=4, rollouts_per_iteration=2),
            text_rl=TextRlParameters(fine_tune_on_all_previous_rollouts=all_previous),
            pure_text_malt=PureTextMaltParameters(num_initial_ei_iterations=1),
        )
        return [j.examples for j in lines(estimate_cost(hp), "fine-tune", agent="verifier")]

    alone, together = jobs(False), jobs(True)
    assert together == [alone[0], alone[1], 2 * alone[2]]


def test_dummy_and_local_agents_cost_nothing_but_still_show_tokens():
    hp = openai_params(agent=PureTextAgentParameters(use_dummy_api=True))
    estimate = estimate_cost(hp)
    assert estimate.total_usd == 0.0
    assert all(line.free for line in estimate.lines)
    assert sum(line.prompt_tokens for line in estimate.lines) > 0
    assert all(row.split()[-1] == "free" for row in str(estimate).split("\n\n")[2].splitlines()[1:])


def test_a_model_without_a_price_makes_the_total_unknown_and_is_named():
    agent = PureTextAgentParameters(model_provider="OpenAI", model_name="my-own-model")
    estimate = estimate_cost(openai_params(agent=agent))
    assert estimate.total_usd is None
    assert "my-own-model" in estimate.unpriced
    assert "my-own-model" in str(estimate)


# ------------------------------------------------------------- no calls at all
def test_the_dry_run_sends_nothing_to_the_api_even_when_a_server_listens(monkeypatch):
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    accepted: list[object] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            try:
                accepted.append(listener.accept())
            except TimeoutError:
                continue

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        port = listener.getsockname()[1]
        monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{port}/v1")
        estimate = estimate_cost(openai_params())
    finally:
        stop.set()
        watcher.join(timeout=5)
        listener.close()
    assert estimate.total_calls > 0
    assert accepted == []


def test_the_dry_runs_agents_refuse_to_generate():
    from nip.training.dialogue_sizes import DryRunCallError, dry_run_session

    session = dry_run_session(openai_params(), ExperimentSettings(show_progress=False))
    dialogue = session.dialogue(session.datapoints(1)[0])
    with pytest.raises(DryRunCallError, match="no model call"):
        dialogue.step()


def test_sample_items_must_be_at_least_one():
    from nip.errors import InvalidParameterError

    with pytest.raises(InvalidParameterError, match="sample_items=0"):
        estimate_cost(openai_params(), sample_items=0)


def _closed_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        return probe.getsockname()[1]


def test_nip_run_dry_run_needs_no_key_makes_no_run_directory_and_prints_the_table(tmp_path):
    config = tmp_path / "exp.yaml"
    openai_params().save(config)
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["OPENAI_BASE_URL"] = f"http://127.0.0.1:{_closed_port()}/v1"
    env["TIKTOKEN_CACHE_DIR"] = str(tmp_path / "no-tiktoken-files")
    run_dir = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "-m", "nip.cli", "run", str(config), "--dry-run", "--run-dir", run_dir],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "model calls at most" in result.stdout
    assert "fine-tune" in result.stdout and "assumes:" in result.stdout
    assert not run_dir.exists() and not (tmp_path / "runs").exists()


def test_the_dry_run_shows_the_test_stages_share_and_how_to_test_after_training():
    """The paper's script trained without testing (``test_scheme: none``) and tested the saved
    models afterwards; the presets test inline. The dry run says what that testing costs."""
    inline = estimate_cost(openai_params(text_rl=TextRlParameters(test_scheme="first_and_last")))
    kinds = {row["stage"]: row["usd"] for row in inline.by_kind()}
    assert set(kinds) == {"train", "test", "fine-tune"}
    assert sum(kinds.values()) == pytest.approx(inline.total_usd)
    test_share = round(100 * kinds["test"] / inline.total_usd)
    shares = str(inline).splitlines()[1]
    assert f"test {test_share} % (${kinds['test']:,.2f})" in shares
    assert "--set text_rl.test_scheme=none, then nip retest RUN_DIR" in shares
    afterwards = estimate_cost(openai_params(text_rl=TextRlParameters(test_scheme="none")))
    assert "test" not in {row["stage"] for row in afterwards.by_kind()}
    assert "nip retest" not in str(afterwards)
    assert afterwards.total_usd == pytest.approx(inline.total_usd - kinds["test"])


# --------------------------------------------------------------------- display
def test_the_estimate_shows_as_text_html_and_a_dataframe():
    estimate = estimate_cost(openai_params())
    text = str(estimate)
    assert text.splitlines()[0].startswith("Dry run of nip with pure_text_ei, 2 iterations")
    assert "chars/4" in text
    html = estimate._repr_html_()
    assert html.count("<table>") == 2 and "assumes" in html
    frame = estimate.to_dataframe()
    assert len(frame) == len(estimate.lines)
    assert frame["usd"].sum() == pytest.approx(estimate.total_usd)


# ---------------------------------------------------------------- token counts
def test_openai_models_map_to_their_tiktoken_encoding_and_others_to_none():
    assert encoding_name("gpt-4o-mini-2024-07-18") == "o200k_base"
    assert encoding_name("ft:gpt-4.1-mini-2025-04-14:org::abc") == "o200k_base"
    assert encoding_name("gpt-4-turbo") == "cl100k_base"
    assert encoding_name("SmolLM2-135M-Instruct") is None


def test_without_the_encoding_file_tokens_are_counted_as_chars_over_four():
    # The fixture points tiktoken at an empty cache: it would have to download, so it is
    # not used at all.
    assert token_counter(MODEL).name == "chars/4"
    assert CharsPerTokenCounter().count("abcdefghi") == 3


def test_the_filler_stands_for_exactly_the_asked_number_of_tokens():
    assert CharsPerTokenCounter().count(filler_text(225)) == 225


def test_tiktoken_counts_the_filler_exactly_when_its_file_is_on_this_machine(monkeypatch):
    tiktoken = pytest.importorskip("tiktoken")
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR")
    counter = token_counter(MODEL)
    if counter.name == "chars/4":
        pytest.skip("o200k_base is not cached on this machine (tiktoken would download it)")
    assert counter.count(filler_text(225)) == 225
    assert counter.count("def f(x):\n    return x") == len(
        tiktoken.get_encoding("o200k_base").encode("def f(x):\n    return x")
    )


def test_the_shipped_quickstart_config_is_free_and_still_counts_its_calls():
    from importlib import resources

    text = (resources.files("nip.configs") / "quickstart.yaml").read_text()
    estimate = estimate_cost(HyperParameters.from_yaml(text))
    assert estimate.total_usd == 0.0  # the embedded model
    assert estimate.total_calls > 0
