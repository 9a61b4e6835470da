"""utils.netsim against closed forms: one message, a ring on a uniform network, rings across slow links.

Pure Python, no processes: well under a second. Run with `python -m pytest tests/test_netsim.py`.
"""

from __future__ import annotations

import math

import pytest
import torch

from utils.netsim import Link, SimulationError, Topology, ring_schedule, simulate, two_level, uniform
from utils.p2p_ledger import Message

ALPHA, BETA = 3e-6, 1 / 10e9
INTRA, INTER = (2e-6, 1 / 450e9), (5e-6, 1 / 50e9)  # H100 NVLink 4 and InfiniBand NDR, per direction


def ring_messages(world: int, numel: int, itemsize: int = 4) -> list[list[Message]]:
    """What a ring all-reduce (irecv + isend per step, tensor_split chunks) records on each rank."""
    sizes = [len(c) * itemsize for c in torch.tensor_split(torch.arange(numel), world)]
    return ring_schedule([range(world)], [sizes])[0]


def ring_formula(world: int, nbytes: float, alpha: float, beta: float) -> float:
    return 2 * (world - 1) * (alpha + beta * nbytes / world)


def test_one_message_costs_alpha_plus_beta_n() -> None:
    for blocking in (True, False):
        msgs = [[Message("send", 1, 1000, blocking)], [Message("recv", 0, 1000, blocking)]]
        result = simulate(msgs, uniform(2, ALPHA, BETA))
        assert result.time == pytest.approx(ALPHA + BETA * 1000, rel=1e-12)
        assert result.finish == pytest.approx((ALPHA + BETA * 1000,) * 2, rel=1e-12)


def test_blocking_messages_add_up_and_a_late_partner_delays_the_message() -> None:
    # Rank 0 sends twice to 1; rank 1 first receives from 2 (a 10x larger message), then twice from 0.
    msgs = [
        [Message("send", 1, 100, True), Message("send", 1, 100, True)],
        [Message("recv", 2, 1000, True), Message("recv", 0, 100, True), Message("recv", 0, 100, True)],
        [Message("send", 1, 1000, True)],
    ]
    t = simulate(msgs, uniform(3, ALPHA, BETA)).time
    assert t == pytest.approx(3 * ALPHA + BETA * 1200, rel=1e-12)


@pytest.mark.parametrize("world", [1, 2, 3, 4, 5, 8])
def test_ring_on_a_uniform_network_is_the_ring_formula(world: int) -> None:
    numel = 1000 * world  # chunks of equal size
    t = simulate(ring_messages(world, numel), uniform(world, ALPHA, BETA)).time
    assert t == pytest.approx(ring_formula(world, 4 * numel, ALPHA, BETA), rel=1e-12)


def test_ring_with_uneven_chunks_is_set_by_the_larger_chunks() -> None:
    # 10 elements on 4 ranks: chunks of 3, 3, 2, 2 elements; every step some rank sends a 3-element chunk.
    t = simulate(ring_messages(4, 10, itemsize=8), uniform(4, ALPHA, BETA)).time
    assert t == pytest.approx(6 * (ALPHA + BETA * 24), rel=1e-12)


def test_ring_across_nodes_is_bound_by_the_slow_link() -> None:
    intra, inter = INTRA, INTER
    world, numel = 8, 8 * 2**20
    blocked = simulate(ring_messages(world, numel), two_level(2, 4, intra, inter, "blocked")).time
    assert blocked == pytest.approx(ring_formula(world, 4 * numel, *inter), rel=1e-12)
    fast_only = ring_formula(world, 4 * numel, *intra)
    assert 7 < blocked / fast_only < 9  # 450 / 50 = 9x the bandwidth each way, less the latencies
    # Interleaved: every hop crosses nodes, and each node's 4 ranks share its uplink: about 4x slower.
    interleaved = simulate(ring_messages(world, numel), two_level(2, 4, intra, inter, "interleaved")).time
    assert 3.5 < interleaved / blocked <= 4.0 + 1e-9


def test_placements_and_errors() -> None:
    assert two_level(2, 3, (0, 1), (0, 2)).node_of == (0, 0, 0, 1, 1, 1)
    assert two_level(2, 3, (0, 1), (0, 2), "interleaved").node_of == (0, 1, 0, 1, 0, 1)
    assert Link(1.0, 2.0).time(3) == 7.0
    with pytest.raises(ValueError):
        two_level(2, 2, (0, 1), (0, 1), "random")
    with pytest.raises(SimulationError):  # a send nobody receives
        simulate([[Message("send", 1, 8, True)], []], uniform(2, ALPHA, BETA))
    with pytest.raises(SimulationError):  # two blocking sends facing each other: Gloo deadlocks, and so do we
        simulate([[Message("send", 1, 8, True), Message("recv", 1, 8, True)],
                  [Message("send", 0, 8, True), Message("recv", 0, 8, True)]], uniform(2, ALPHA, BETA))
    with pytest.raises(SimulationError):  # sizes that differ
        simulate([[Message("send", 1, 8, True)], [Message("recv", 0, 16, True)]], uniform(2, ALPHA, BETA))
    assert simulate([[], []], uniform(2, ALPHA, BETA)).time == 0.0
    assert math.isclose(simulate([[Message("send", 1, 0, False)], [Message("recv", 0, 0, False)]],
                                 uniform(2, ALPHA, BETA)).time, ALPHA)


def test_a_gpu_shares_its_switch_port_among_its_destinations() -> None:
    # NVSwitch: rank 0 sends n bytes to 1 and to 2 at once; both leave through rank 0's one port out.
    n = 10**6
    msgs = [[Message("send", 1, n, False), Message("send", 2, n, False)],
            [Message("recv", 0, n, False)], [Message("recv", 0, n, False)]]
    result = simulate(msgs, uniform(3, ALPHA, BETA))
    assert result.finish[1] == pytest.approx(ALPHA + BETA * n, rel=1e-12)
    assert result.finish[2] == pytest.approx(ALPHA + 2 * BETA * n, rel=1e-12)  # not a full link per pair
    # Two senders into one receiver share its port in the same way; two disjoint pairs do not interact.
    into_one = [[Message("send", 2, n, False)], [Message("send", 2, n, False)],
                [Message("recv", 0, n, False), Message("recv", 1, n, False)]]
    assert simulate(into_one, uniform(3, ALPHA, BETA)).time == pytest.approx(ALPHA + 2 * BETA * n, rel=1e-12)
    pairs = [[Message("send", 1, n, False)], [Message("recv", 0, n, False)],
             [Message("send", 3, n, False)], [Message("recv", 2, n, False)]]
    assert simulate(pairs, uniform(4, ALPHA, BETA)).time == pytest.approx(ALPHA + BETA * n, rel=1e-12)


def test_with_one_nic_per_gpu_the_interleaved_ring_is_as_fast_as_the_blocked_one() -> None:
    world, numel = 8, 8 * 2**20
    formula = ring_formula(world, 4 * numel, *INTER)
    for placement in ("blocked", "interleaved"):
        t = simulate(ring_messages(world, numel), two_level(2, 4, INTRA, INTER, placement, nic="gpu")).time
        assert t == pytest.approx(formula, rel=1e-12), placement  # one inter-node hop per NIC per step, at most


def test_channels_use_every_nic() -> None:
    # Four rings on 2 nodes x 4 GPUs, each a quarter of the tensor: ring c crosses between nodes at GPUs c and
    # 4 + c (rail c), so each NIC carries one ring's traffic. One NIC per GPU: about 4x faster than one ring;
    # one NIC per node: every ring's crossing goes through the same two cards, no gain.
    world, numel, channels = 8, 8 * 2**20, 4
    orders = [[(c + 1 + j) % 4 for j in range(4)] + [4 + (c + 1 + j) % 4 for j in range(4)] for c in range(channels)]
    share = [len(part) * 4 for part in torch.tensor_split(torch.arange(numel), channels)]
    sizes = [[len(chunk) * 4 for chunk in torch.tensor_split(torch.arange(n // 4), world)] for n in share]
    messages, waits = ring_schedule(orders, sizes)
    one_ring = ring_formula(world, 4 * numel, *INTER)
    per_gpu = simulate(messages, two_level(2, 4, INTRA, INTER, nic="gpu"), waits).time
    per_node = simulate(messages, two_level(2, 4, INTRA, INTER, nic="node"), waits).time
    assert per_gpu == pytest.approx(ring_formula(world, numel, *INTER), rel=1e-9)  # a quarter of the bytes each
    assert 3 < one_ring / per_gpu < 4  # 4x the bandwidth, the same latencies
    assert per_node == pytest.approx(one_ring, rel=0.1)  # the same bytes through the same two cards


def test_recorded_waits_give_the_phases_their_guess_gives() -> None:
    world, numel = 5, 1003
    sizes = [len(c) * 4 for c in torch.tensor_split(torch.arange(numel), world)]
    messages, waits = ring_schedule([range(world)], [sizes])
    guessed = simulate(messages, uniform(world, ALPHA, BETA)).time
    assert simulate(messages, uniform(world, ALPHA, BETA), waits).time == pytest.approx(guessed, rel=1e-12)
    # Without its waits, a rank that waits for nothing posts everything at once: the ring's steps overlap.
    assert simulate(messages, uniform(world, ALPHA, BETA), [[] for _ in range(world)]).time < guessed
    with pytest.raises(SimulationError):  # a wait for a message posted later
        simulate(messages, uniform(world, ALPHA, BETA), [[(0, 1)]] * world)


def test_tags_keep_two_streams_apart() -> None:
    # Rank 0 sends tag 1 then tag 0; rank 1 receives tag 0 first: tags, not the order, pair the messages.
    msgs = [[Message("send", 1, 100, False, tag=1), Message("send", 1, 300, False, tag=0)],
            [Message("recv", 0, 300, False, tag=0), Message("recv", 0, 100, False, tag=1)]]
    assert simulate(msgs, uniform(2, ALPHA, BETA)).time > 0
    with pytest.raises(ValueError):
        Topology((0, 0), Link(0, 1), Link(0, 1), nic="rack")
