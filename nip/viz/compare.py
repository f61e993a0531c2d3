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
    agents = {}
    for name in names:
        source = params.agents.get(name, fallback)
        if source is not None:
            agents[name] = source.to_dict()
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

    Agents keep their parameters where the protocol has them; an agent ``params`` lacks
    (``prover0`` and ``prover1`` of debate when ``params`` is for nip) gets
    ``default_agent``, or else the parameters of ``params``' first prover.

    Args:
        params: The base experiment.
        protocols: Protocol names.
        items: The datapoints; by default ``n`` items of ``split``.
        n: How many items when ``items`` is omitted (default ``rl.rollouts_per_iteration``).
        split: Which split to draw items from.
        settings: Runtime settings (backends are shared by all protocols' sessions).
        default_agent: Parameters for agents that ``params`` does not configure.

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
