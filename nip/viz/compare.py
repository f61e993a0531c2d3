"""The same items under each protocol, for :func:`~nip.viz.compare_runs` to compare.

::

    batches = run_protocols(params, ["nip", "debate", "solo_verifier"], n=32)
    figure, table = compare_runs(batches, by_label=True)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from nip.parameters import HyperParameters, PureTextAgentParameters
from nip.protocols import protocol_class
from nip.settings import ExperimentSettings

if TYPE_CHECKING:
    from nip.rollouts.engine import RolloutBatch


def _protocol_params(
    params: HyperParameters, protocol: str, default_agent: PureTextAgentParameters | None
) -> HyperParameters:
    names = protocol_class(protocol).agent_names
    provers = sorted(a for a in params.agents if a != "verifier")
    fallback = default_agent or (params.agents[provers[0]] if provers else None)
    sources = {name: params.agents.get(name, fallback) for name in names}
    agents = {name: source.to_dict() for name, source in sources.items() if source is not None}
    return HyperParameters.from_dict(
        {**params.to_dict(), "interaction_protocol": protocol, "agents": agents}
    )


async def run_protocols_async(
    params: HyperParameters,
    protocols: Sequence[str],
    *,
    items: Sequence[Any] | None = None,
    n: int | None = None,
    split: str = "test",
    settings: ExperimentSettings | None = None,
    default_agent: PureTextAgentParameters | None = None,
) -> dict[str, RolloutBatch]:
    """Run the same items under each protocol, with ``params`` otherwise unchanged.

    An agent ``params`` lacks (debate's provers for a nip config) gets ``default_agent``,
    or else ``params``' first prover's parameters.

    Args:
        items: The datapoints; by default ``n`` (``rl.rollouts_per_iteration``) of ``split``.

    Returns:
        Protocol -> ``RolloutBatch``, ready for :func:`~nip.viz.compare_runs`.
    """
    from nip.providers.pool import BackendPool
    from nip.session import Session

    settings = settings or ExperimentSettings(show_progress=False)
    pool = BackendPool(settings)
    batches = {}
    try:
        for protocol in protocols:
            session = Session(
                _protocol_params(params, protocol, default_agent), settings, backends=pool
            )
            if items is None:
                items = session.datapoints(n or params.rl.rollouts_per_iteration, split=split)
            batches[protocol] = await session.rollouts_async(items, description=protocol)
    finally:
        await pool.aclose()
    return batches


def run_protocols(
    params: HyperParameters, protocols: Sequence[str], **kwargs: Any
) -> dict[str, RolloutBatch]:
    """Sync :func:`run_protocols_async` (works in scripts and inside Jupyter)."""
    from nip.utils.sync import run_sync

    return run_sync(run_protocols_async(params, protocols, **kwargs))
