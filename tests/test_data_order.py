"""The order a run walks its dataset: a seeded shuffled walk of the train split (re-drawn for
each pass), and the test split shuffled once with the run's seed, its test passes reading it
on pass after pass (``docs/training.md``)."""

from __future__ import annotations

from collections import Counter

from nip.parameters import HyperParameters
from nip.session import Session
from nip.settings import ExperimentSettings
from nip.training.plan import make_run_plan
from nip.training.trainer import build_trainer


def session(seed: int = 6198) -> Session:
    params = HyperParameters.construct_test_params()
    params.seed = seed
    return Session(params)


def ids(datapoints) -> list[str]:
    return [d.id for d in datapoints]


def test_the_train_split_is_walked_in_a_seeded_shuffled_order_not_the_files_order():
    """The file puts each problem's correct and buggy solutions side by side; iteration 0
    must not train on the first rows of the file."""
    first = session()
    in_file_order = [item.id for item in list(first.dataset("train"))[:16]]
    walk = ids(first.datapoints(16, iteration=0))
    assert walk != in_file_order
    assert len({i.split("/")[1] for i in walk}) > 12  # problems spread out, not paired
    assert walk == ids(session().datapoints(16, iteration=0))  # the seed decides it
    assert walk != ids(session(seed=1).datapoints(16, iteration=0))


def test_iterations_continue_the_walk_and_a_new_pass_reshuffles_without_repeats():
    run = session()
    size = len(run.dataset("train"))
    n = 32  # divides the split: each pass is whole iterations
    passes = (size * 2) // n  # two whole passes over the split
    walked = [i for it in range(passes) for i in ids(run.datapoints(n, iteration=it))]
    first, second = walked[:size], walked[size : 2 * size]
    assert set(first) == set(second) == {item.id for item in run.dataset("train")}
    assert max(Counter(first).values()) == 1
    assert first != second  # the second pass has an order of its own


def test_the_test_split_is_shuffled_once_with_the_runs_seed():
    run = session()
    whole = ids(run.datapoints(None, split="test"))
    assert whole != [item.id for item in run.dataset("test")]
    assert sorted(whole) == sorted(item.id for item in run.dataset("test"))
    assert whole == ids(session().datapoints(None, split="test"))
    assert ids(run.datapoints(10, split="test")) == whole[:10]


def test_without_the_whole_split_each_test_pass_plays_the_next_items_as_the_original_did(
    tmp_path,
):
    """The original's test loader drew ``num_envs x num_test_iterations`` items in a row from
    the shuffled test split: with ``test_on_whole_dataset`` off, two passes of three play six
    different items, the first six of the run's test order."""
    params = HyperParameters.construct_test_params()
    params.rl.num_iterations, params.rl.rollouts_per_iteration = 1, 3
    params.rl.num_test_iterations = 2
    params.text_rl.test_on_whole_dataset = False
    params.text_rl.test_scheme = "last"
    settings = ExperimentSettings(run_dir=tmp_path / "run", show_progress=False, cache="off")
    trainer = build_trainer(params, settings)
    try:
        trainer.train()
    finally:
        trainer.session.close()
    played = [t.datapoint.id for t in trainer.run_dir.load_rollouts("test", 0)]
    assert len(played) == 6 and len(set(played)) == 6
    assert played == ids(session().datapoints(6, split="test"))


def test_test_passes_wrap_around_the_split_only_when_it_runs_out():
    params = HyperParameters.construct_test_params()
    params.rl.rollouts_per_iteration, params.rl.num_test_iterations = 3, 2
    params.text_rl.test_on_whole_dataset = False
    params.text_rl.test_scheme = "all"
    split = ["a", "b", "c", "d"]
    first, second = make_run_plan(params, test_ids=split)[0].test_pass_item_ids
    assert len(set(first)) == len(set(second)) == 3  # no item twice in a pass
    assert set(first) | set(second) == set(split)  # every item before any twice
    assert second[1:] == first[:2]  # then the walk starts the same order again
    params.text_rl.test_on_whole_dataset = True
    whole = make_run_plan(params, test_ids=split)[0]
    assert whole.test_pass_item_ids == (whole.test_item_ids, whole.test_item_ids)
    assert sorted(whole.test_item_ids) == split
