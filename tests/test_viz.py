"""Figures: MALT trees and their viewer, accuracy with confidence intervals, protocols."""

from __future__ import annotations

import itertools
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from nip.parameters import (
    HyperParameters,
    NipProtocolParameters,
    PureTextAgentParameters,
    PureTextMaltParameters,
    RlParameters,
    TextRlParameters,
)
from nip.protocols import Decision, NipProtocol
from nip.rollouts import AgentTurn, Datapoint, Transcript
from nip.session import Session
from nip.settings import ExperimentSettings
from nip.training.algorithms.malt import build_trees, select_pairs
from nip.training.algorithms.malt_tree import ResponseTree
from nip.training.trainer import build_trainer
from nip.viz import (
    TreeViewer,
    compare_runs,
    confusion_matrix,
    load_run,
    plot_accuracy,
    plot_confusion,
    plot_rewards,
    plot_tree,
    plot_trees_summary,
    run_protocols,
    tree_layout,
    wilson_interval,
)
from nip.viz.tree_plot import ALL_TREES


# ------------------------------------------------------------------ fixtures
def hand_tree() -> ResponseTree:
    """The verifier asks (t.0) or rejects at once (t.1); the prover answers two ways under
    t.0; after the second answer the verifier accepts (t.0.1.0) or rejects (t.0.1.1)."""
    tree = ResponseTree.new("t", "nip", Datapoint("d1", "q", "s", y=1), seed=0, stances={})
    rewards = {
        Decision.ACCEPT: {"verifier": 1.0, "prover": 1.0},
        Decision.REJECT: {"verifier": -1.0, "prover": 0.0},
    }

    def say(parent, index, round_id, agent, text):
        turn = AgentTurn(round=round_id, agent=agent, raw_text=text)
        return tree.add_child(parent, index, round=round_id, turns=(turn,))

    def decide(parent, index, round_id, decision):
        text = f"Decision: {'accept' if decision is Decision.ACCEPT else 'reject'}"
        turn = AgentTurn(round=round_id, agent="verifier", raw_text=text, decision=decision)
        tree.add_child(
            parent,
            index,
            round=round_id,
            turns=(turn,),
            done=True,
            decision=decision,
            rewards=rewards[decision],
        )

    ask = say(tree.root, 0, 0, "verifier", "Question: why?")
    decide(tree.root, 1, 0, Decision.REJECT)
    first = say(ask, 0, 1, "prover", "Because. " * 100)
    second = say(ask, 1, 1, "prover", "It returns x + 1 <ok>.")
    decide(first, 0, 2, Decision.ACCEPT)
    decide(second, 0, 2, Decision.ACCEPT)
    decide(second, 1, 2, Decision.REJECT)
    tree.compute_expected_rewards(("prover", "verifier"))
    select_pairs(tree, NipProtocol(), PureTextMaltParameters(), seed=0)
    return tree


def trace(figure, role: str):
    return next(t for t in figure.data if t.meta == role)


def dummy_params(dataset: Path, **overrides) -> HyperParameters:
    values = dict(
        dataset=str(dataset),
        agents={n: PureTextAgentParameters(use_dummy_api=True) for n in ("prover", "verifier")},
        nip_protocol=NipProtocolParameters(max_message_rounds=5),
        rl=RlParameters(num_iterations=2, rollouts_per_iteration=8),
        text_rl=TextRlParameters(min_fine_tune_examples=1, test_scheme="all"),
    )
    return HyperParameters(**(values | overrides))


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    """12 train and 4 test items, half of them correct."""
    path = tmp_path_factory.mktemp("data") / "tiny.jsonl"
    rows = [
        {
            "id": f"item{i}",
            "question": f"Return {i} plus the argument.",
            "solution": f"def f(x):\n    return x + {i + i % 2}\n",
            "y": 1 - i % 2,
            "split": "train" if i < 12 else "test",
        }
        for i in range(16)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def ei_run(dataset, tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("ei") / "run"
    settings = ExperimentSettings(run_dir=run_dir, show_progress=False)
    build_trainer(dummy_params(dataset), settings).train()
    return run_dir


@pytest.fixture(scope="module")
def malt_trees(dataset, tmp_path_factory) -> list[ResponseTree]:
    run_dir = tmp_path_factory.mktemp("malt") / "run"
    hp = dummy_params(
        dataset,
        trainer="pure_text_malt",
        rl=RlParameters(num_iterations=1, rollouts_per_iteration=3),
        pure_text_malt=PureTextMaltParameters(num_responses_per_timestep=2),
    )
    build_trainer(hp, ExperimentSettings(run_dir=run_dir, show_progress=False)).train()
    return load_run(run_dir).trees(0)


# ---------------------------------------------------------------- tree layout
def test_leaves_sit_side_by_side_in_sampling_order():
    layout = tree_layout(hand_tree())
    leaves = ["t.0.0.0", "t.0.1.0", "t.0.1.1", "t.1"]
    assert [layout[i].x for i in leaves] == [0, 1, 2, 3]
    assert [layout[i].depth for i in leaves] == [3, 3, 3, 1]


def test_a_parent_is_centred_over_its_children(malt_trees):
    for tree in malt_trees:
        layout = tree_layout(tree)
        for node in tree.nodes.values():
            if node.children:
                first, last = layout[node.children[0]], layout[node.children[-1]]
                assert layout[node.id].x == (first.x + last.x) / 2
                assert first.depth == last.depth == layout[node.id].depth + 1


def test_nodes_on_a_level_are_at_least_one_apart(malt_trees):
    for tree in malt_trees:
        layout = tree_layout(tree)
        assert set(layout) == set(tree.nodes)
        for depth in {p.depth for p in layout.values()}:
            xs = sorted(p.x for p in layout.values() if p.depth == depth)
            assert all(b - a >= 1 for a, b in itertools.pairwise(xs))


# ----------------------------------------------------------------- tree figure
def test_nodes_are_coloured_by_the_chosen_agents_expected_reward():
    tree = hand_tree()
    for agent in ("verifier", "prover"):
        nodes = trace(plot_tree(tree, agent), "nodes")
        expected = [tree.nodes[i].expected_reward[agent] for i in nodes.customdata]
        assert list(nodes.marker.color) == expected
        assert agent in nodes.marker.colorbar.title.text


def test_nodes_carry_their_ids_for_click_handlers_and_sit_at_their_layout_positions():
    tree = hand_tree()
    nodes = trace(plot_tree(tree), "nodes")
    layout = tree_layout(tree)
    assert list(nodes.customdata) == list(layout)
    assert list(nodes.x) == [layout[i].x for i in nodes.customdata]
    assert list(nodes.y) == [layout[i].depth for i in nodes.customdata]


def test_every_edge_joins_a_node_to_its_parent():
    tree = hand_tree()
    edges = trace(plot_tree(tree), "edges")
    layout = tree_layout(tree)
    segments = {
        ((edges.x[k], edges.y[k]), (edges.x[k + 1], edges.y[k + 1]))
        for k in range(0, len(edges.x), 3)
    }
    assert segments == {
        ((layout[n.parent_id].x, layout[n.parent_id].depth), (layout[n.id].x, layout[n.id].depth))
        for n in tree.nodes.values()
        if n.parent_id is not None
    }


def test_every_preference_pair_of_the_agent_is_ringed_and_linked(malt_trees):
    for tree in malt_trees:
        for agent in ("verifier", "prover"):
            figure = plot_tree(tree, agent)
            pairs = [p for p in tree.pairs if p.agent == agent]
            assert list(trace(figure, "preferred").customdata) == [p.chosen_id for p in pairs]
            assert list(trace(figure, "non_preferred").customdata) == [p.rejected_id for p in pairs]
            assert len(trace(figure, "pair_links").x) == 3 * len(pairs)
    assert any(tree.pairs for tree in malt_trees)


def test_symbols_show_who_spoke_with_a_legend_entry_each():
    tree = hand_tree()
    figure = plot_tree(tree)
    nodes = trace(figure, "nodes")
    symbol = dict(zip(nodes.customdata, nodes.marker.symbol, strict=True))
    assert symbol["t.0"] == symbol["t.1"] != symbol["t.0.0"] != symbol["t"]
    legend = {t.name: t.marker.symbol for t in figure.data if t.meta == "speaker"}
    assert legend == {
        "start": symbol["t"],
        "verifier spoke": symbol["t.0"],
        "prover spoke": symbol["t.0.0"],
    }


def test_hover_shows_speaker_round_message_and_rewards_with_long_messages_cut():
    tree = hand_tree()
    nodes = trace(plot_tree(tree, max_chars=50), "nodes")
    hover = dict(zip(nodes.customdata, nodes.hovertext, strict=True))
    assert "<b>prover</b> · round 1" in hover["t.0.1"]
    assert "x + 1 &lt;ok&gt;." in hover["t.0.1"]  # escaped, not read as HTML
    assert "expected reward: <b>verifier +0</b>, prover +0.5" in hover["t.0.1"]
    assert "preferred for verifier" in hover["t.0.1.0"]
    assert "Because." in hover["t.0.0"] and len(hover["t.0.0"]) < 400


def test_a_tree_without_expected_rewards_for_the_agent_is_a_clear_error():
    with pytest.raises(ValueError, match=r"no expected rewards for 'judge'.*prover"):
        plot_tree(hand_tree(), "judge")


def test_the_same_tree_always_gives_the_same_figure():
    assert plot_tree(hand_tree()).to_json() == plot_tree(hand_tree()).to_json()


# ------------------------------------------------------------------- summary
def test_the_summary_has_one_branch_per_tree_sized_by_leaves(malt_trees):
    icicle = plot_trees_summary(malt_trees, "prover").data[0]
    parent = dict(zip(icicle.ids, icicle.parents, strict=True))
    value = dict(zip(icicle.ids, icicle.values, strict=True))
    colour = dict(zip(icicle.ids, icicle.marker.colors, strict=True))
    assert [i for i, p in parent.items() if p == ALL_TREES] == [t.tree_id for t in malt_trees]
    for tree in malt_trees:
        for node in tree.nodes.values():
            assert value[node.id] == node.num_leaves
            assert colour[node.id] == node.expected_reward["prover"]
            if node.children:  # branchvalues="total": children fill their parent exactly
                assert sum(value[c] for c in node.children) == value[node.id]
    assert value[ALL_TREES] == sum(t.root.num_leaves for t in malt_trees)


def test_the_summary_refuses_the_same_tree_twice():
    tree = hand_tree()
    with pytest.raises(ValueError, match="unique"):
        plot_trees_summary([tree, tree])


# -------------------------------------------------------------------- viewer
def _click(viewer: TreeViewer, node_id: str) -> None:
    """What the page sends when a node is clicked (tests/test_browser.py clicks in Chromium)."""
    nodes = [t.meta for t in viewer.figure.data].index("nodes")
    index = list(viewer.figure.data[nodes].customdata).index(node_id)
    viewer.clicks.clicked = {"trace": nodes, "index": index, "customdata": node_id, "at": 1}


def test_clicking_a_node_shows_it_in_the_panel():
    pytest.importorskip("anywidget")
    viewer = TreeViewer(hand_tree())
    _click(viewer, "t.0.1")
    assert viewer.selected == "t.0.1"
    assert "x + 1 &lt;ok&gt;." in viewer.details.value
    assert "The dialogue up to here" in viewer.details.value


def test_a_click_elsewhere_than_on_a_node_changes_nothing():
    pytest.importorskip("anywidget")
    viewer = TreeViewer(hand_tree())
    viewer.clicks.clicked = {"trace": 0, "index": 0, "customdata": None, "at": 1}
    assert viewer.selected == "t"


def test_choosing_another_agent_recolours_the_figure_and_clicks_still_pick_nodes():
    pytest.importorskip("anywidget")
    tree = hand_tree()
    viewer = TreeViewer(tree)
    viewer.agent_picker.value = "prover"  # as a user picks it
    nodes = trace(viewer.figure, "nodes")
    assert list(nodes.marker.color) == [
        tree.nodes[i].expected_reward["prover"] for i in nodes.customdata
    ]
    _click(viewer, "t.1")
    assert "Decision: reject" in viewer.details.value


def test_the_viewer_is_saved_without_a_copy_of_plotly_js():
    """A go.FigureWidget kept plotly.js (5 MB) in its saved widget state."""
    from ipywidgets.embed import dependency_state

    viewer = TreeViewer(hand_tree())
    state = json.dumps(dependency_state(viewer, drop_defaults=False))
    assert len(state) < 100_000, f"{len(state):,} bytes"


def test_without_clicks_the_viewer_uses_the_node_list():
    tree = hand_tree()
    viewer = TreeViewer(tree, interactive=False)
    viewer.agent_picker.value = "prover"  # as a user picks it
    assert viewer.clicks is None
    nodes = trace(viewer.figure, "nodes")
    prover = [tree.nodes[i].expected_reward["prover"] for i in nodes.customdata]
    assert list(nodes.marker.color) == prover
    viewer.node_picker.value = "t.1"
    assert "Decision: reject" in viewer.details.value
    assert repr(viewer) == "TreeViewer(tree='t', agent='prover', nodes=8, selected='t.1')"


def test_with_the_agents_the_viewer_shows_the_exact_prompt_behind_a_message(dataset):
    session = Session(dummy_params(dataset), ExperimentSettings(show_progress=False))
    items = session.datapoints(4)
    trees = build_trees(
        session.handler, session.agents, items, malt=PureTextMaltParameters(), seed=1
    )
    # A node two rounds down (the dummy verifier may decide at once in some trees).
    tree = next(t for t in trees if f"{t.tree_id}.0.0" in t.nodes)
    node = tree.nodes[f"{tree.tree_id}.0.0"]
    viewer = TreeViewer(tree, agents=session.agents, interactive=False)
    viewer.select(node.id)
    speaker = node.turns[0].agent
    prompt = session.agents[speaker].build_chat_prompt(
        tree.transcript_at(node.parent_id), node.round
    )
    assert f"{speaker}'s prompt ({len(prompt)} messages)" in viewer.details.value
    assert prompt[0]["content"][:40].replace("'", "&#x27;") in viewer.details.value


# ------------------------------------------------------------ run directories
def test_the_wilson_interval_matches_hand_computed_values():
    assert wilson_interval(0, 10) == pytest.approx((0.0, 0.27753), abs=1e-5)
    assert wilson_interval(5, 10) == pytest.approx((0.23659, 0.76341), abs=1e-5)
    assert wilson_interval(10, 10) == pytest.approx((0.72247, 1.0), abs=1e-5)
    assert all(math.isnan(v) for v in wilson_interval(0, 0))


def test_accuracy_has_a_wilson_interval_per_split_and_iteration(ei_run):
    figure = plot_accuracy(ei_run)
    assert {t.name for t in figure.data} == {"train", "test"}
    metrics = load_run(ei_run).run_dir.metrics_records()
    for series in figure.data:
        rows = sorted(
            (m for m in metrics if m["split"] == series.name), key=lambda m: m["iteration"]
        )
        for k, row in enumerate(rows):
            n = row["num_dialogues"]
            low, high = wilson_interval(round(row["accuracy"] * n), n)
            assert series.y[k] == row["accuracy"]
            assert series.y[k] - series.error_y.arrayminus[k] == pytest.approx(low)
            assert series.y[k] + series.error_y.array[k] == pytest.approx(high)
            assert low <= series.y[k] <= high


def test_splits_measured_at_the_same_iteration_are_drawn_side_by_side(ei_run):
    figure = plot_accuracy(ei_run)
    train, test = (next(t for t in figure.data if t.name == s) for s in ("train", "test"))
    metrics = load_run(ei_run).run_dir.metrics_records()
    shared = {m["iteration"] for m in metrics if m["split"] == "test"} & {
        m["iteration"] for m in metrics if m["split"] == "train"
    }
    assert shared  # the fixture's run tests after its last iteration's training

    def x_at(series, iteration):
        points = zip(series.x, series.customdata, strict=True)
        return next(x for x, data in points if data[4] == iteration)

    for iteration in shared:
        x_train, x_test = x_at(train, iteration), x_at(test, iteration)
        assert x_test != x_train and abs(x_test - x_train) < 0.25
    assert "iteration %{customdata[4]}" in train.hovertemplate


def test_counts_come_from_the_rollouts_when_metrics_lack_them(ei_run, tmp_path):
    copy = Path(shutil.copytree(ei_run, tmp_path / "run"))
    metrics = copy / "metrics/train_it0000.json"
    metrics.write_text(json.dumps({"accuracy": json.loads(metrics.read_text())["accuracy"]}))
    (copy / "metrics/test_it0001.json").unlink()
    table = load_run(copy).accuracy_table().set_index(["split", "iteration"])
    transcripts = load_run(copy).transcripts("test", 1)
    assert table.loc[("train", 0), "num_dialogues"] == 8
    assert table.loc[("test", 1), "num_dialogues"] == len(transcripts)
    assert table.loc[("test", 1), "correct"] == sum(t.correct for t in transcripts)


def test_a_metrics_table_without_counts_is_a_clear_error():
    frame = pd.DataFrame({"split": ["train"], "iteration": [0], "accuracy": [0.5]})
    with pytest.raises(ValueError, match="num_dialogues"):
        plot_accuracy(frame)


def test_a_plot_of_one_iteration_has_that_iterations_number_as_its_one_tick():
    columns = {"split": "test", "iteration": 3, "accuracy": 0.5, "num_dialogues": 4}
    frame = pd.DataFrame([{**columns, "prover.mean_episode_reward": 0.2}])
    for figure in (plot_accuracy(frame), plot_rewards(frame)):
        assert list(figure.layout.xaxis.tickvals) == [3]
        assert list(figure.layout.xaxis.range) == [2.5, 3.5]


def test_reward_curves_show_each_agents_mean_per_split(ei_run):
    figure = plot_rewards(ei_run)
    metrics = load_run(ei_run).metrics_dataframe()
    assert [t.name for t in figure.data][:2] == ["verifier (test)", "verifier (train)"]
    curve = next(t for t in figure.data if t.name == "prover (train)")
    expected = metrics[metrics["split"] == "train"]["prover.mean_episode_reward"]
    assert list(curve.y) == list(expected)


def test_a_run_prints_a_stable_one_line_summary_and_an_html_table(ei_run):
    run = load_run(ei_run)
    table = run.accuracy_table()
    last_test = table[table["split"] == "test"].iloc[-1]
    assert repr(run) == (
        f"RunResults({str(ei_run)!r}, protocol=nip, trainer=pure_text_ei, "
        f"train accuracy={table[table['split'] == 'train'].iloc[-1]['accuracy']:.3f} (n=8, it 1), "
        f"test accuracy={last_test['accuracy']:.3f} (n=4, it 1))"
    )
    assert "<table" in run._repr_html_() and "ci_high" in run._repr_html_()


# ----------------------------------------------------------------- confusion
def test_the_confusion_matrix_counts_decisions_per_true_label():
    def dialogue(y, decision):
        point = Datapoint("d", "q", "s", y=y)
        return Transcript(protocol="nip", datapoint=point, seed=0, decision=decision)

    transcripts = (
        [dialogue(1, Decision.ACCEPT)] * 3
        + [dialogue(1, Decision.NONE)]
        + [dialogue(0, Decision.ACCEPT)] * 2
        + [dialogue(0, Decision.REJECT)] * 5
    )
    counts = confusion_matrix(transcripts)
    assert counts.loc["correct solution"].tolist() == [3, 0, 1]
    assert counts.loc["incorrect solution"].tolist() == [2, 5, 0]
    heatmap = plot_confusion(transcripts).data[0]
    assert [list(row) for row in heatmap.z] == [[3, 0, 1], [2, 5, 0]]
    assert heatmap.x == ("accept", "reject", "no decision")


def test_the_confusion_matrix_has_a_neither_column_when_a_scale_ended_in_the_middle():
    point = Datapoint("d", "q", "s", y=1)
    transcripts = [
        Transcript(protocol="nip", datapoint=point, seed=0, decision=Decision.NEITHER),
        Transcript(protocol="nip", datapoint=point, seed=0, decision=Decision.ACCEPT),
    ]
    counts = confusion_matrix(transcripts)
    assert counts.columns.tolist() == ["accept", "reject", "no decision", "neither"]
    assert counts.loc["correct solution"].tolist() == [1, 0, 0, 1]


# ----------------------------------------------------------------- protocols
def test_protocols_run_on_the_same_items_and_compare_with_intervals(dataset):
    batches = run_protocols(dummy_params(dataset), ["nip", "adp", "solo_verifier"], n=6)
    items = [[t.datapoint.id for t in batch] for batch in batches.values()]
    assert items[0] == items[1] == items[2]
    figure, table = compare_runs(batches, by_label=True)
    overall = table[table["items"] == "all items"].set_index("series")
    for protocol, batch in batches.items():
        assert overall.loc[protocol, "accuracy"] == batch.accuracy
        assert overall.loc[protocol, "dialogues"] == 6
    assert [bar.name for bar in figure.data] == [
        "all items",
        "correct solutions",
        "incorrect solutions",
    ]
    assert list(figure.data[0].x) == ["nip", "adp", "solo_verifier"]
    assert (table["ci_low"] <= table["accuracy"]).all()
    assert (table["accuracy"] <= table["ci_high"]).all()


def test_protocols_compare_from_run_directories(ei_run):
    _, table = compare_runs({"nip": ei_run}, split="test", iteration=1, by_label=True)
    overall = table[table["items"] == "all items"].iloc[0]
    transcripts = load_run(ei_run).transcripts("test", 1)
    assert overall["dialogues"] == len(transcripts)
    assert overall["correct"] == sum(t.correct for t in transcripts)


# --------------------------------------------------------------------- import
def test_importing_nip_viz_loads_the_widgets_only_for_the_viewer():
    code = "import sys, nip.viz; print('ipywidgets' in sys.modules)"
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert output.stdout.strip() == "False"
