"""utils.netsim against closed forms: one message, a ring on a uniform network, a ring across a slow link.

Pure Python, no processes: well under a second. Run with `python -m pytest tests/test_netsim.py`.
"""

from __future__ import annotations

import math

import pytest
import torch

from utils.ledger import Message
from utils.netsim import Link, SimulationError, simulate, two_level, uniform

ALPHA, BETA = 3e-6, 1 / 10e9


def ring_messages(world: int, numel: int, itemsize: int = 4) -> list[list[Message]]:
    """What a ring all-reduce (irecv + isend per step, tensor_split chunks) records on each rank."""
    sizes = [len(c) * itemsize for c in torch.tensor_split(torch.arange(numel), world)]
    out = []
    for rank in range(world):
        left, right, ops = (rank - 1) % world, (rank + 1) % world, []
        for step in range(2 * (world - 1)):  # reduce-scatter steps, then all-gather steps
            shift = step if step < world - 1 else step - (world - 1) - 1
            ops.append(Message("recv", left, sizes[(rank - shift - 1) % world], False))
            ops.append(Message("send", right, sizes[(rank - shift) % world], False))
        out.append(ops)
    return out


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
    intra, inter = (2e-6, 1 / 600e9), (5e-6, 1 / 50e9)
    world, numel = 8, 8 * 2**20
    blocked = simulate(ring_messages(world, numel), two_level(2, 4, intra, inter, "blocked")).time
    assert blocked == pytest.approx(ring_formula(world, 4 * numel, *inter), rel=1e-12)
    fast_only = ring_formula(world, 4 * numel, *intra)
    assert blocked > 9 * fast_only  # 600 / 50 = 12x the bandwidth, less the latencies
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
