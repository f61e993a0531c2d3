"""The six protocols: turn order, visibility, decision windows and rewards."""

from __future__ import annotations

import pytest

from nip.errors import InvalidParameterError, UnknownProtocolError
from nip.parameters import (
    CommonProtocolParameters,
    DebateProtocolParameters,
    HyperParameters,
    MnipProtocolParameters,
    NipProtocolParameters,
)
from nip.protocols import (
    PROTOCOLS,
    AdpProtocol,
    DebateProtocol,
    Decision,
    MerlinArthurProtocol,
    MnipProtocol,
    NipProtocol,
    ProtocolHandler,
    SoloVerifierProtocol,
    build_protocol_handler,
    datapoint_stance,
    protocol_class,
)

ACCEPT, REJECT, NONE = Decision.ACCEPT, Decision.REJECT, Decision.NONE


def turns(handler, seed: int = 0) -> list[dict[str, tuple[str, ...]]]:
    """Who writes to which channels, round by round."""
    return [dict(handler.speakers(r, seed)) for r in range(handler.num_rounds())]


def build_handler(name: str, common: dict, protocol_params: dict) -> ProtocolHandler:
    """The handler of protocol ``name`` with common and protocol-specific parameters set."""
    hp = HyperParameters.from_dict(
        {
            "interaction_protocol": name,
            "protocol_common": common,
            **({f"{name}_protocol": protocol_params} if protocol_params else {}),
        }
    )
    return build_protocol_handler(hp)


# ------------------------------------------------------------------ the paper's table
@pytest.mark.parametrize(
    ("name", "rounds"),
    [
        ("adp", 2),
        ("merlin_arthur", 2),
        ("solo_verifier", 1),
        ("nip", 9),
        ("debate", 9),
        ("mnip", 9),
    ],
)
def test_episode_lengths_follow_the_protocol_table(name, rounds):
    """adp and MAC have 2 rounds; nip, debate and mnip have T (default 9) rounds."""
    assert build_protocol_handler(HyperParameters(interaction_protocol=name)).num_rounds() == rounds


@pytest.mark.parametrize("rounds", [3, 5, 9, 11])
def test_t_round_protocols_take_their_length_from_the_parameters(rounds):
    hp = HyperParameters(
        nip_protocol=NipProtocolParameters(max_message_rounds=rounds),
        debate_protocol=DebateProtocolParameters(max_message_rounds=rounds),
        mnip_protocol=MnipProtocolParameters(max_message_rounds=rounds),
    )
    for name in ("nip", "debate", "mnip"):
        handler = build_protocol_handler(
            HyperParameters.from_dict({**hp.to_dict(), "interaction_protocol": name, "agents": {}})
        )
        assert handler.num_rounds() == rounds


def test_every_protocol_is_registered_by_name():
    assert set(PROTOCOLS) == {"nip", "adp", "debate", "merlin_arthur", "mnip", "solo_verifier"}


def test_an_unknown_protocol_name_is_a_typed_error():
    with pytest.raises(UnknownProtocolError, match="choose one of nip, adp"):
        protocol_class("socratic")


# --------------------------------------------------------------------------- turn order
def test_nip_verifier_and_prover_alternate_starting_with_the_verifier():
    assert turns(NipProtocol(params=NipProtocolParameters(max_message_rounds=5))) == [
        {"verifier": ("main",)},
        {"prover": ("main",)},
        {"verifier": ("main",)},
        {"prover": ("main",)},
        {"verifier": ("main",)},
    ]


def test_nip_with_the_prover_first_ends_on_the_verifiers_last_turn():
    """With verifier_first=False and 5 rounds the prover's 5th-round message would never be
    read, so the episode ends after the verifier's last turn, in round 3."""
    handler = NipProtocol(
        CommonProtocolParameters(verifier_first=False),
        NipProtocolParameters(max_message_rounds=5),
    )
    assert turns(handler) == [
        {"prover": ("main",)},
        {"verifier": ("main",)},
        {"prover": ("main",)},
        {"verifier": ("main",)},
    ]


def test_adp_prover_speaks_once_then_the_verifier_decides():
    handler = AdpProtocol()
    assert turns(handler) == [{"prover": ("main",)}, {"verifier": ("main",)}]
    assert not handler.can_decide(0) and handler.can_decide(1)


def test_mac_one_prover_chosen_by_the_seed_speaks_then_the_verifier_decides():
    handler = MerlinArthurProtocol()
    assert turns(handler, seed=4) == [{"prover0": ("main",)}, {"verifier": ("main",)}]
    assert turns(handler, seed=7) == [{"prover1": ("main",)}, {"verifier": ("main",)}]


def test_mac_provers_are_anonymous():
    handler = MerlinArthurProtocol()
    assert handler.agent("prover0").anonymous and handler.agent("prover1").anonymous
    assert not handler.agent("verifier").anonymous


def test_solo_verifier_decides_alone_in_one_round():
    handler = SoloVerifierProtocol()
    assert turns(handler) == [{"verifier": ("main",)}]
    assert handler.can_decide(0)


def test_simultaneous_debate_verifier_questions_both_then_both_provers_answer():
    handler = DebateProtocol(params=DebateProtocolParameters(max_message_rounds=3))
    assert turns(handler) == [
        {"verifier": ("prover0_channel", "prover1_channel")},
        {"prover0": ("prover0_channel",), "prover1": ("prover1_channel",)},
        {"verifier": ("prover0_channel", "prover1_channel")},
    ]


@pytest.mark.parametrize(
    ("prover0_first", "order"), [(True, ("prover0", "prover1")), (False, ("prover1", "prover0"))]
)
def test_sequential_debate_is_a_three_round_cycle(prover0_first, order):
    handler = DebateProtocol(
        params=DebateProtocolParameters(
            max_message_rounds=7, sequential=True, prover0_first=prover0_first
        )
    )
    first, second = order
    both = ("prover0_channel", "prover1_channel")
    assert turns(handler) == [
        {"verifier": both},
        {first: (f"{first}_channel",)},
        {second: (f"{second}_channel",)},
        {"verifier": both},
        {first: (f"{first}_channel",)},
        {second: (f"{second}_channel",)},
        {"verifier": both},
    ]


def test_sequential_debate_counts_its_own_verifier_turns():
    """The original reused nip's ceil(T/2) question count for the 3-round cycle."""
    sequential = DebateProtocol(
        params=DebateProtocolParameters(max_message_rounds=7, sequential=True)
    )
    simultaneous = DebateProtocol(params=DebateProtocolParameters(max_message_rounds=7))
    assert sequential.max_verifier_questions == 3
    assert simultaneous.max_verifier_questions == 4


def test_mnip_has_the_same_timing_as_debate():
    debate = DebateProtocol(params=DebateProtocolParameters(max_message_rounds=5))
    mnip = MnipProtocol(params=MnipProtocolParameters(max_message_rounds=5))
    assert turns(debate) == turns(mnip)


# ---------------------------------------------------------------------------- visibility
P0, P1 = "prover0_channel", "prover1_channel"

#: Who reads which channel, as the paper describes each protocol.
VISIBILITY_TABLE = [
    # nip, adp: the verifier and its one prover share a single channel.
    ("nip", {}, {"prover": ("main",), "verifier": ("main",)}),
    ("adp", {}, {"prover": ("main",), "verifier": ("main",)}),
    # MAC: whichever prover speaks writes where the verifier (and the other prover) can read.
    ("merlin_arthur", {}, {"prover0": ("main",), "prover1": ("main",), "verifier": ("main",)}),
    # solo verifier: nobody else is there.
    ("solo_verifier", {}, {"verifier": ("main",)}),
    # debate: a channel per prover, and everyone reads both (the debaters answer each other).
    ("debate", {}, {"prover0": (P0, P1), "prover1": (P0, P1), "verifier": (P0, P1)}),
    (
        "debate",
        {"sequential": True},
        {"prover0": (P0, P1), "prover1": (P0, P1), "verifier": (P0, P1)},
    ),
    # mnip: each prover is questioned in private; only the verifier reads both channels.
    ("mnip", {}, {"prover0": (P0,), "prover1": (P1,), "verifier": (P0, P1)}),
    ("mnip", {"sequential": True}, {"prover0": (P0,), "prover1": (P1,), "verifier": (P0, P1)}),
]


@pytest.mark.parametrize(("name", "protocol_params", "visible"), VISIBILITY_TABLE)
def test_who_reads_which_channel(name, protocol_params, visible):
    handler = build_handler(name, {}, protocol_params)
    assert {agent: handler.visible_channels(agent) for agent in handler.agent_names} == visible


def test_a_debate_prover_reads_the_other_channel_first_and_its_own_last():
    handler = DebateProtocol()
    assert handler.channel_order("prover0", 1) == ("prover1_channel", "prover0_channel")
    assert handler.channel_order("prover1", 1) == ("prover0_channel", "prover1_channel")


#: The verifier's reading order, pinned: a change of seeding or shuffling would change which
#: channel a verifier reads first in saved runs, so it must show up here.
CHANNEL_ORDERS = [
    # protocol, seed, order in rounds 0, 2 and 4
    ("debate", 0, [(P0, P1), (P0, P1), (P1, P0)]),
    ("debate", 1, [(P1, P0), (P0, P1), (P0, P1)]),
    ("mnip", 0, [(P0, P1), (P1, P0), (P0, P1)]),
    ("mnip", 2, [(P1, P0), (P0, P1), (P1, P0)]),
]


@pytest.mark.parametrize(("name", "seed", "orders"), CHANNEL_ORDERS)
def test_the_verifiers_channel_order_is_shuffled_reproducibly_per_round(name, seed, orders):
    handler = build_handler(name, {}, {})
    assert [handler.channel_order("verifier", r, seed) for r in (0, 2, 4)] == orders


def test_the_verifiers_channel_order_is_fixed_when_randomisation_is_off():
    handler = DebateProtocol(params=DebateProtocolParameters(randomize_channel_order=False))
    assert {handler.channel_order("verifier", r, seed=s) for s in range(10) for r in (0, 2)} == {
        ("prover0_channel", "prover1_channel")
    }


def test_multi_channel_verifiers_have_a_header_per_channel():
    for handler in (DebateProtocol(), MnipProtocol()):
        assert handler.agent("verifier").response_channel_headers == {
            "prover0_channel": "Question for Expert_1:",
            "prover1_channel": "Question for Expert_2:",
        }


def test_agents_have_the_human_names_used_in_prompts():
    assert [a.human_name for a in NipProtocol().agents] == ["Expert", "Verifier"]
    assert [a.human_name for a in DebateProtocol().agents] == ["Expert_1", "Expert_2", "Verifier"]


# --------------------------------------------------------------------- decision windows
#: When the verifier may decide, as the paper describes each protocol: in its own turns, from
#: round ``min_message_rounds - 1`` on, and always in its last turn. ``rounds`` is the episode
#: length: it ends after the verifier's last turn, so a prover's trailing message nobody
#: would read is never generated.
DECISION_WINDOWS = [
    # name, common, protocol params, rounds, rounds in which the verifier may decide
    pytest.param("nip", {}, {}, 9, [0, 2, 4, 6, 8], id="nip: every other round, T=9"),
    pytest.param(
        "nip",
        {"verifier_first": False},
        {"max_message_rounds": 5},
        4,
        [1, 3],
        id="nip: prover first, T=5 ends on the verifier's turn",
    ),
    pytest.param(
        "nip", {}, {"min_message_rounds": 4}, 9, [4, 6, 8], id="nip: no decision before round 3"
    ),
    pytest.param("adp", {}, {}, 2, [1], id="adp: one prover message, then the decision"),
    pytest.param("merlin_arthur", {}, {}, 2, [1], id="mac: one prover message, then decision"),
    pytest.param("solo_verifier", {}, {}, 1, [0], id="solo: decides at once"),
    pytest.param("debate", {}, {}, 9, [0, 2, 4, 6, 8], id="debate simultaneous: 2-round cycle"),
    pytest.param(
        "debate", {}, {"sequential": True}, 7, [0, 3, 6], id="debate sequential: 3-round cycle"
    ),
    pytest.param(
        "debate",
        {"verifier_first": False},
        {"sequential": True, "max_message_rounds": 7},
        6,
        [2, 5],
        id="debate sequential, provers first",
    ),
    pytest.param(
        "debate",
        {},
        {"sequential": True, "min_message_rounds": 5},
        7,
        [6],
        id="debate sequential: min rounds leave only the last turn",
    ),
    pytest.param("mnip", {}, {}, 9, [0, 2, 4, 6, 8], id="mnip simultaneous: 2-round cycle"),
    pytest.param(
        "mnip", {}, {"sequential": True}, 7, [0, 3, 6], id="mnip sequential: 3-round cycle"
    ),
]


@pytest.mark.parametrize(("name", "common", "params", "rounds", "windows"), DECISION_WINDOWS)
def test_when_the_verifier_may_decide(name, common, params, rounds, windows):
    handler = build_handler(name, common, params)
    assert handler.num_rounds() == rounds
    for seed in (0, 1):  # MAC's seed picks the prover, never the verifier's turns
        assert [r for r in range(handler.max_message_rounds) if handler.can_decide(r, seed)] == (
            windows
        )


@pytest.mark.parametrize(("name", "common", "params", "rounds", "windows"), DECISION_WINDOWS)
def test_a_decision_ends_the_episode_and_is_refused_outside_the_window(
    name, common, params, rounds, windows
):
    handler = build_handler(name, common, params)
    for r in range(rounds):
        if r in windows:
            outcome = handler.step(r, REJECT, y=0)
            assert outcome.done and not outcome.terminated and outcome.decision is REJECT
        else:
            with pytest.raises(ValueError, match=f"may not decide in round {r}"):
                handler.step(r, ACCEPT, y=1)


@pytest.mark.parametrize(("name", "common", "params", "rounds", "windows"), DECISION_WINDOWS)
def test_only_the_last_round_without_a_decision_terminates_the_episode(
    name, common, params, rounds, windows
):
    """Reaching the verifier's last turn undecided ends the episode, terminated, with
    ``verifier_terminated_penalty``; every earlier undecided round goes on."""
    handler = build_handler(name, common, params)
    for r in range(rounds):
        outcome = handler.step(r, NONE, y=1)
        last = r == rounds - 1
        assert (outcome.done, outcome.terminated) == (last, last)
        if last:
            assert outcome.rewards["verifier"] == handler.common.verifier_terminated_penalty


# ------------------------------------------------------------------------------ rewards
REWARD_TABLE = [
    # protocol, decision, y, expected rewards
    ("nip", ACCEPT, 1, {"prover": 1.0, "verifier": 1.0}),
    ("nip", ACCEPT, 0, {"prover": 1.0, "verifier": -1.0}),
    ("nip", REJECT, 0, {"prover": 0.0, "verifier": 1.0}),
    ("adp", REJECT, 1, {"prover": 0.0, "verifier": -1.0}),
    ("debate", REJECT, 0, {"prover0": 1.0, "prover1": 0.0, "verifier": 1.0}),
    ("debate", ACCEPT, 0, {"prover0": 0.0, "prover1": 1.0, "verifier": -1.0}),
    ("merlin_arthur", REJECT, 1, {"prover0": 1.0, "prover1": 0.0, "verifier": -1.0}),
    ("merlin_arthur", ACCEPT, 1, {"prover0": 0.0, "prover1": 1.0, "verifier": 1.0}),
    ("mnip", ACCEPT, 1, {"prover0": 1.0, "prover1": 1.0, "verifier": 1.0}),
    ("mnip", REJECT, 1, {"prover0": 0.0, "prover1": 0.0, "verifier": -1.0}),
    ("solo_verifier", ACCEPT, 0, {"verifier": -1.0}),
]


@pytest.mark.parametrize(("name", "decision", "y", "expected"), REWARD_TABLE)
def test_decision_rewards(name, decision, y, expected):
    """Verifier: +1 right, -1 wrong. Provers: +1 when the decision matches their side."""
    handler = build_protocol_handler(HyperParameters(interaction_protocol=name))
    decision_round = handler.last_decision_round
    assert handler.step(decision_round, decision, y).rewards == expected


def test_mnip_rewards_both_provers_for_accept():
    """The original's v1 rewarded mnip's prover0 for *reject* (a mixin-order slip)."""
    handler = MnipProtocol()
    assert handler.prover_stance("prover0") == handler.prover_stance("prover1") == 1


def test_a_verifier_turn_without_a_decision_earns_the_no_guess_reward():
    handler = NipProtocol(CommonProtocolParameters(verifier_no_guess_reward=0.25))
    assert handler.step(0, NONE, y=1).rewards == {"prover": 0.0, "verifier": 0.25}
    assert handler.step(1, NONE, y=1).rewards == {"prover": 0.0, "verifier": 0.0}


def test_shared_reward_gives_provers_the_verifiers_reward():
    handler = DebateProtocol(CommonProtocolParameters(shared_reward=True))
    rewards = handler.step(0, ACCEPT, y=0).rewards
    assert rewards == {"prover0": -1.0, "prover1": -1.0, "verifier": -1.0}


@pytest.mark.parametrize(
    ("force", "y", "effective"),
    [("zero", 1, REJECT), ("one", 0, ACCEPT), ("y", 1, ACCEPT), ("y", 0, REJECT)],
)
def test_force_guess_overrides_the_verifiers_decision(force, y, effective):
    handler = NipProtocol(CommonProtocolParameters(force_guess=force))
    decided = ACCEPT if effective is REJECT else REJECT
    assert handler.step(0, decided, y).decision is effective


# ----------------------------------------------------------------------------- stances
@pytest.mark.parametrize("name", ["nip", "adp", "mnip"])
def test_stance_randomisation_applies_where_the_protocol_allows_it(name):
    hp = HyperParameters(
        interaction_protocol=name,
        protocol_common=CommonProtocolParameters(randomize_prover_stance=True),
    )
    handler = build_protocol_handler(hp)
    for prover in handler.prover_names:
        assert handler.prover_stance(prover, datapoint_stance=0) == 0
        assert handler.prover_stance(prover, datapoint_stance=1) == 1
    last = handler.last_decision_round
    rewards = handler.step(last, REJECT, y=0, datapoint_stance=0).rewards
    assert all(rewards[p] == 1.0 for p in handler.prover_names)


@pytest.mark.parametrize("name", ["debate", "merlin_arthur"])
def test_debate_and_mac_stances_are_never_randomised(name):
    """Their stances are fixed: asking to randomise them is refused, naming the field and the
    protocol, rather than accepted and ignored."""
    with pytest.raises(InvalidParameterError, match=rf"randomize_prover_stance.*{name}"):
        HyperParameters(
            interaction_protocol=name,
            protocol_common=CommonProtocolParameters(randomize_prover_stance=True),
        )
    handler = build_protocol_handler(HyperParameters(interaction_protocol=name))
    assert handler.prover_stance("prover0", datapoint_stance=1) == 0
    assert handler.prover_stance("prover1", datapoint_stance=0) == 1


@pytest.mark.parametrize("name", ["adp", "merlin_arthur", "solo_verifier"])
def test_verifier_first_false_is_refused_where_the_schedule_is_fixed(name):
    """The original accepted it there and ignored it: the provers (or the verifier alone)
    open whatever it says."""
    common = CommonProtocolParameters(verifier_first=False)
    with pytest.raises(InvalidParameterError, match=r"verifier_first.*fixed schedule"):
        HyperParameters(interaction_protocol=name, protocol_common=common)
    with pytest.raises(InvalidParameterError, match="verifier_first_applies is False"):
        protocol_class(name)(common)


def test_without_randomisation_single_provers_argue_accept():
    assert NipProtocol().prover_stance("prover", datapoint_stance=0) == 1


@pytest.mark.parametrize(
    ("solution", "stance"),
    [
        ("def f(): pass", 1),
        ("def add(a, b):\n    return a + b\n", 0),
        ("def add(a, b):\n    return a - b\n", 0),
        ("", 1),
    ],
)
def test_the_datapoint_stance_is_a_deterministic_hash_of_the_solution(solution, stance):
    """Pinned values: the parity of the last byte of SHA-256, so saved runs keep their stances."""
    assert datapoint_stance(solution) == stance


def test_the_datapoint_stance_takes_both_values():
    stances = [datapoint_stance(f"def f():\n    return {i}\n") for i in range(40)]
    assert set(stances) == {0, 1}


# -------------------------------------------------------------------- reward ranges
@pytest.mark.parametrize(
    ("name", "agent", "low", "mid", "high"),
    [
        ("nip", "verifier", -1.0, 0.0, 1.0),
        ("nip", "prover", 0.0, 0.5, 1.0),
        ("debate", "prover0", 0.0, 0.5, 1.0),
        ("solo_verifier", "verifier", -1.0, 0.0, 1.0),
    ],
)
def test_reward_ranges_and_mid_points_with_default_rewards(name, agent, low, mid, high):
    handler = build_protocol_handler(HyperParameters(interaction_protocol=name))
    assert (handler.min_reward(agent), handler.reward_mid_point(agent)) == (low, mid)
    assert handler.max_reward(agent) == high


def test_reward_ranges_account_for_no_guess_rewards():
    """Asking every question then deciding correctly earns 4 x 0.5 + 1 in a 9-round nip."""
    handler = NipProtocol(CommonProtocolParameters(verifier_no_guess_reward=0.5))
    assert handler.max_reward("verifier") == 3.0
    assert handler.min_reward("verifier") == -1.0
    assert handler.reward_mid_point("verifier") == 1.0


# ------------------------------------------------------------------------------ display
def test_a_handler_shows_its_schedule_as_html_and_text():
    handler = DebateProtocol()
    assert "Expert_1" in handler._repr_html_() and "may decide" in handler._repr_html_()
    assert repr(handler).startswith("DebateProtocol(name='debate'")
