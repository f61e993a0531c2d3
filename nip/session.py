"""A session: a protocol, its agents and their backends, ready to run dialogues.

::

    session = Session(HyperParameters.construct_test_params())
    batch = session.rollouts(n=8)            # or: await session.rollouts_async(n=8)
    batch.accuracy, batch.to_dataframe()
    dialogue = session.dialogue(session.datapoints(n=1)[0])   # step through one
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from nip.agents.agent import PureTextWholeAgent
from nip.data.order import held_out_indices, train_indices
from nip.parameters import HyperParameters
from nip.protocols import ProtocolHandler, build_protocol_handler
from nip.providers.pool import BackendPool
from nip.rollouts.dialogue import Dialogue
from nip.rollouts.engine import RolloutBatch, run_dialogues_async
from nip.rollouts.records import Datapoint
from nip.settings import ExperimentSettings
from nip.utils.seeding import derive_seed
from nip.utils.sync import run_sync


def to_datapoint(item: Any) -> Datapoint:
    """A :class:`Datapoint` from a dataset item (record with id/question/solution/y) or dict."""
    if isinstance(item, Datapoint):
        return item
    from nip.protocols import datapoint_stance

    get = item.get if isinstance(item, Mapping) else lambda k, d=None: getattr(item, k, d)
    solution, stance = get("solution"), get("prover_stance")
    return Datapoint(
        id=str(get("id")),
        question=get("question"),
        solution=solution,
        y=int(get("y")),
        stance=int(stance) if stance is not None else datapoint_stance(solution),
    )


class Session:
    """Runs dialogues under one configuration.

    Args:
        backends: A pool of backends to share with other sessions (made if omitted).
        protocol: The class of a protocol of your own, which ``interaction_protocol`` names.
    """

    def __init__(
        self,
        hyper_params: HyperParameters,
        settings: ExperimentSettings | None = None,
        *,
        backends: BackendPool | None = None,
        protocol: type[ProtocolHandler] | None = None,
    ):
        self.hyper_params = hyper_params
        self.settings = settings or ExperimentSettings()
        self.handler = build_protocol_handler(hyper_params, protocol)
        self.backends = backends or BackendPool(self.settings)
        self.agents: dict[str, PureTextWholeAgent] = {
            name: PureTextWholeAgent(
                hyper_params,
                self.settings,
                name,
                self.handler,
                backend=self.backends.backend_for(hyper_params.agents[name]),
            )
            for name in self.handler.agent_names
        }
        self._datasets: dict[str, Any] = {}
        self._by_id: dict[str, dict[str, Any]] = {}

    def dataset(self, split: str = "train"):
        """The configured dataset's ``split`` (loaded once)."""
        if split not in self._datasets:
            from nip.data import load_configured_dataset

            self._datasets[split] = load_configured_dataset(self.hyper_params, split)
        return self._datasets[split]

    def datapoints(
        self, n: int | None = None, *, split: str = "train", iteration: int = 0
    ) -> list[Datapoint]:
        """``n`` datapoints of ``split`` (all when None) for ``iteration`` (see nip.data.order)."""
        items = self.dataset(split)
        seed = self.hyper_params.seed
        if split == "train" and n is not None:
            indices = train_indices(len(items), n, iteration, seed)
        else:
            indices = held_out_indices(len(items), n, seed, iteration)
        return [to_datapoint(items[i]) for i in indices]

    def datapoints_by_id(self, ids: Sequence[str], *, split: str = "train") -> list[Datapoint]:
        """The datapoints of ``split`` with these ids, in order (``KeyError`` if one is missing)."""
        if split not in self._by_id:
            self._by_id[split] = {str(item.id): item for item in self.dataset(split)}
        items = self._by_id[split]
        missing = [i for i in ids if i not in items]
        if missing:
            raise KeyError(f"no item {missing[0]!r} in the {split} split ({len(missing)} missing)")
        return [to_datapoint(items[i]) for i in ids]

    def dialogue(
        self, item: Any, *, seed: int | None = None, iteration: int = 0, index: int = 0
    ) -> Dialogue:
        """A new dialogue about ``item``, ready to step through."""
        if seed is None:
            seed = derive_seed(self.hyper_params.seed, "dialogue", iteration, index)
        return Dialogue.start(
            self.handler,
            self.agents,
            to_datapoint(item),
            seed=seed,
            iteration=iteration,
            dialogue_id=f"it{iteration}-{index:05d}",
        )

    async def rollouts_async(
        self,
        items: Sequence[Any] | None = None,
        *,
        n: int | None = None,
        split: str = "train",
        iteration: int = 0,
        description: str | None = None,
        on_progress: Callable[[int, int], None] | None = None,
    ) -> RolloutBatch:
        """Play a batch of dialogues concurrently.

        Args:
            items: The datapoints; by default ``n`` (``rl.rollouts_per_iteration``) of ``split``.
            iteration: Seeds and dialogue ids depend on it.
            on_progress: Called with ``(done, total)`` dialogues as they finish.
        """
        if items is None:
            items = self.datapoints(
                n or self.hyper_params.rl.rollouts_per_iteration, split=split, iteration=iteration
            )
        dialogues = [
            self.dialogue(item, iteration=iteration, index=i) for i, item in enumerate(items)
        ]
        transcripts = await run_dialogues_async(
            dialogues,
            show_progress=self.settings.show_progress,
            description=description or f"{self.handler.name} dialogues",
            on_progress=on_progress,
        )
        return RolloutBatch(transcripts)

    def rollouts(self, items: Sequence[Any] | None = None, **kwargs: Any) -> RolloutBatch:
        """Sync :meth:`rollouts_async` (works in scripts and inside Jupyter)."""
        return run_sync(self.rollouts_async(items, **kwargs))

    async def aclose(self) -> None:
        """Close the backends."""
        await self.backends.aclose()

    def close(self) -> None:
        run_sync(self.aclose())

    def __repr__(self) -> str:
        agents = ", ".join(
            f"{n}: {a.agent_params.model_provider}/{a.model_name}" for n, a in self.agents.items()
        )
        return f"Session(protocol={self.handler.name!r}, agents={{{agents}}})"
