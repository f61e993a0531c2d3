"""The order in which a run walks its dataset: seeded, deterministic, shuffled.

The original re-seeded a shuffling loader with the run's seed every iteration and fast-forwarded
it by ``num_envs x iteration``: iteration ``i`` trains on the items at positions
``[i * n, (i + 1) * n)`` of one seeded permutation of the train split. nip does the same, and
when a run walks past the end of the train split it continues with a new seeded permutation
(pass ``p`` of the split is shuffled with ``derive_seed(seed, "train-order", p)``), so no item is
seen twice before every item was seen once. The test (or validation) split is shuffled once
with the run's seed and read from its start: a test stage plays all of it in every pass, or
(``text_rl.test_on_whole_dataset`` off) ``n`` items per pass, pass after pass, as the original
drew ``num_envs x num_test_iterations`` items in a row, wrapping around only when the split
runs out (:func:`walk`). Every test stage of a run plays the same items.

Both are pure functions of the split's size and the seed: a resumed run (even after
``kill -9``) draws the same items, and the response cache still makes a rerun free.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TypeVar

from nip.utils.seeding import derive_seed

T = TypeVar("T")


def _permutation(size: int, seed: int) -> list[int]:
    order = list(range(size))
    random.Random(seed).shuffle(order)
    return order


def train_indices(size: int, n: int, iteration: int, seed: int) -> list[int]:
    """The indices of the ``n`` train items of ``iteration`` in a split of ``size`` items."""
    if size <= 0:
        return []
    indices = []
    passes: dict[int, list[int]] = {}
    for position in range(iteration * n, (iteration + 1) * n):
        walk, offset = divmod(position, size)
        if walk not in passes:
            passes[walk] = _permutation(size, derive_seed(seed, "train-order", walk))
        indices.append(passes[walk][offset])
    return indices


def walk(sequence: Sequence[T], n: int, step: int) -> list[T]:
    """Step ``step`` of a walk through ``sequence`` ``n`` elements at a time: the ``n`` elements
    from position ``step * n`` on, wrapping around at its end."""
    if not sequence:
        return []
    return [sequence[(step * n + k) % len(sequence)] for k in range(n)]


def held_out_indices(size: int, n: int | None, seed: int, iteration: int = 0) -> list[int]:
    """The indices of a test split of ``size`` items: all (``n`` None) or ``n`` of them, from
    one permutation seeded by the run's seed (walked on by ``iteration``, wrapping around)."""
    if size <= 0:
        return []
    order = _permutation(size, derive_seed(seed, "test-order"))
    return order if n is None else walk(order, n, iteration)
