"""The order a run walks its dataset: a seeded shuffled walk of the train split (re-drawn for
each pass), and the test split shuffled once with the run's seed (``docs/training.md``)."""

from __future__ import annotations

from collections import Counter

from nip.parameters import HyperParameters
from nip.session import Session


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
