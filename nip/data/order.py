"""The order in which a run walks its dataset: seeded, deterministic, shuffled.

Iteration ``i`` trains on positions ``[i * n, (i + 1) * n)`` of seeded permutations of the
train split (pass ``p`` shuffled with ``derive_seed(seed, "train-order", p)``); the test split
is shuffled once and walked ``n`` at a time (see docs/training.md). Pure functions of the
split's size and the seed, so a resumed run draws the same items.
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
    """The ``n`` elements of ``sequence`` from position ``step * n`` on, wrapping around."""
    if not sequence:
        return []
    return [sequence[(step * n + k) % len(sequence)] for k in range(n)]


def held_out_indices(size: int, n: int | None, seed: int, iteration: int = 0) -> list[int]:
    """A test split's indices: all (``n`` None), or step ``iteration`` of a walk, n at a time."""
    if size <= 0:
        return []
    order = _permutation(size, derive_seed(seed, "test-order"))
    return order if n is None else walk(order, n, iteration)
