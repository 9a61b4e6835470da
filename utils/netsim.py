"""Predict how long recorded point-to-point traffic takes on a network you do not have: an alpha-beta simulator.

    from utils.ledger import Message
    from utils.netsim import simulate, two_level

    topo = two_level(nodes=2, gpus_per_node=4, intra=(2e-6, 1 / 600e9), inter=(5e-6, 1 / 50e9))
    per_rank = [...]                      # rank r's list of Message(kind, peer, nbytes, blocking), in call order
    simulate(per_rank, topo).time         # seconds until the last rank is done

The message lists are what `utils.ledger.Ledger` records on each rank (`ledger.messages`), so an algorithm run on
a laptop can be replayed on a described cluster. The rules, all of the alpha-beta kind:

- Matching: rank a's k-th send to b pairs with b's k-th receive from a (messages between two ranks do not overtake
  one another, as in Gloo, NCCL and MPI). A receive from any source (peer None) is not supported.
- Time of one message of n bytes from a to b: it starts when both sides have posted it and every resource on its
  route is free, and it completes alpha + beta * n later, with the (alpha, beta) of its route.
- Resources: a message inside a node uses the directed link a -> b alone (a switch such as NVSwitch gives every
  pair its own full bandwidth). A message between nodes uses its source node's uplink and its destination node's
  downlink (one network card per node and direction, shared by all of that node's ranks). A resource carries one
  message at a time, first come first served, for beta * n seconds (the latency alpha does not occupy it). That
  is serialisation instead of fair sharing: k equal messages through one link finish together at k * beta * n
  under sharing, and the last of them at the same time here.
- Ranks: a blocking operation stops its rank until it completes. The ledger does not record `wait()`, so
  non-blocking operations are grouped into *phases*: a phase ends before an operation that repeats a (kind, peer)
  of the current phase, and before a blocking one; the rank waits for every operation of a phase before it posts
  the next phase (what `for request in requests: request.wait()` after each step of a ring does). At the end a
  rank waits for everything it posted.

Local work (additions, copies) takes no time: the simulator prices the network only.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from utils.ledger import Message

__all__ = ["Link", "Result", "SimulationError", "Topology", "simulate", "two_level", "uniform"]


class SimulationError(ValueError):
    """The message lists cannot be replayed: unmatched messages, a deadlock, or a peer outside the topology."""


@dataclass(frozen=True)
class Link:
    """One kind of connection: a message of n bytes over it takes alpha + beta * n seconds."""

    alpha: float  # seconds
    beta: float  # seconds per byte (1 / bandwidth)

    def time(self, nbytes: int) -> float:
        return self.alpha + self.beta * nbytes


@dataclass(frozen=True)
class Topology:
    """Ranks placed on nodes: `node_of[r]` is rank r's node; `intra` links ranks of one node, `inter` the nodes."""

    node_of: tuple[int, ...]
    intra: Link
    inter: Link

    @property
    def world_size(self) -> int:
        return len(self.node_of)

    def route(self, src: int, dst: int) -> tuple[Link, tuple[tuple, ...]]:
        """The link a message src -> dst uses, and the resources it occupies (see the module docstring)."""
        if self.node_of[src] == self.node_of[dst]:
            return self.intra, (("link", src, dst),)
        return self.inter, (("up", self.node_of[src]), ("down", self.node_of[dst]))


def uniform(world_size: int, alpha: float, beta: float) -> Topology:
    """N ranks, every pair joined by its own link with the same (alpha, beta): the plain alpha-beta model."""
    link = Link(alpha, beta)
    return Topology((0,) * world_size, link, link)


def two_level(
    nodes: int,
    gpus_per_node: int,
    intra: tuple[float, float],
    inter: tuple[float, float],
    placement: str = "blocked",
) -> Topology:
    """`nodes` x `gpus_per_node` ranks: (alpha, beta) `intra` inside a node, `inter` between nodes.

    placement "blocked" puts ranks 0..g-1 on node 0, g..2g-1 on node 1, ... (node-aware: a ring 0 -> 1 -> ... -> N-1
    crosses between nodes only `nodes` times); "interleaved" puts rank r on node r % nodes (every hop of that ring
    crosses nodes).
    """
    world = nodes * gpus_per_node
    if placement == "blocked":
        node_of = tuple(r // gpus_per_node for r in range(world))
    elif placement == "interleaved":
        node_of = tuple(r % nodes for r in range(world))
    else:
        raise ValueError(f'placement must be "blocked" or "interleaved", got {placement!r}')
    return Topology(node_of, Link(*intra), Link(*inter))


@dataclass(frozen=True)
class Result:
    """`time`: when the last rank finished (all ranks start at 0); `finish[r]`: when rank r finished."""

    time: float
    finish: tuple[float, ...]
    busy: dict = field(default_factory=dict)  # resource -> seconds it carried data


def _phases(ops: Sequence[Message]) -> list[list[int]]:
    """Indices of a rank's operations, cut into phases (module docstring)."""
    phases: list[list[int]] = []
    current: list[int] = []
    seen: set[tuple[str, int | None]] = set()
    for i, op in enumerate(ops):
        if current and (op.blocking or (op.kind, op.peer) in seen):
            phases.append(current)
            current, seen = [], set()
        current.append(i)
        seen.add((op.kind, op.peer))
        if op.blocking:
            phases.append(current)
            current, seen = [], set()
    if current:
        phases.append(current)
    return phases


def simulate(messages: Sequence[Sequence[Message]], topology: Topology) -> Result:
    """Replay each rank's recorded messages on `topology` and return when every rank finishes.

    Args:
        messages: messages[r] is rank r's list of utils.ledger.Message, in the order rank r posted them.
        topology: where the ranks are and what their links cost; topology.world_size == len(messages).

    Raises:
        SimulationError: a peer outside the group or None, sizes of a matched pair that differ, a message
            without its partner, or a deadlock (ranks waiting for one another in a cycle).
    """
    world = len(messages)
    if topology.world_size != world:
        raise SimulationError(f"{world} ranks of messages, but the topology has {topology.world_size} ranks")
    for r, ops in enumerate(messages):
        for op in ops:
            if op.peer is None or not 0 <= op.peer < world or op.peer == r:
                raise SimulationError(f"rank {r}: message {op} has no valid peer")
    phases = [_phases(ops) for ops in messages]
    next_phase = [0] * world
    clock = [0.0] * world  # when each rank posted its current phase
    done = [[math.nan] * len(ops) for ops in messages]  # completion time of every operation
    posted: dict[tuple[str, int, int], list[tuple[int, int, float]]] = defaultdict(list)  # FIFO per channel
    ready: list[tuple[float, int, int, int, int, int]] = []  # heap: (ready time, seq, src, i_send, dst, i_recv)
    free_at: dict[tuple, float] = defaultdict(float)
    busy: dict[tuple, float] = defaultdict(float)
    seq = 0

    def post(rank: int) -> None:
        """Post rank's next phase at clock[rank]; pair each operation with its partner if that one is posted."""
        nonlocal seq
        for i in phases[rank][next_phase[rank]]:
            op = messages[rank][i]
            src, dst = (rank, op.peer) if op.kind == "send" else (op.peer, rank)
            other = "recv" if op.kind == "send" else "send"
            waiting = posted[(other, src, dst)]
            if waiting:  # the partner was posted earlier: the message can start once both are there
                j_rank, j, t = waiting.pop(0)
                i_send, i_recv = (i, j) if op.kind == "send" else (j, i)
                if messages[src][i_send].nbytes != messages[dst][i_recv].nbytes:
                    raise SimulationError(f"{src} -> {dst}: a send of {messages[src][i_send].nbytes} bytes "
                                          f"meets a receive of {messages[dst][i_recv].nbytes} bytes")
                heapq.heappush(ready, (max(t, clock[rank]), seq, src, i_send, dst, i_recv))
                seq += 1
            else:
                posted[(op.kind, src, dst)].append((rank, i, clock[rank]))
        next_phase[rank] += 1

    def advance(rank: int) -> None:
        """While rank's current phase is complete, move its clock to that completion and post the next one."""
        while next_phase[rank] < len(phases[rank]):
            current = phases[rank][next_phase[rank] - 1] if next_phase[rank] else []
            times = [done[rank][i] for i in current]
            if any(math.isnan(t) for t in times):
                return
            clock[rank] = max([clock[rank], *times])
            post(rank)

    for rank in range(world):
        if phases[rank]:
            post(rank)
    for rank in range(world):
        advance(rank)
    while ready:  # schedule the message that can start first (first come, first served on every resource)
        t, _, src, i_send, dst, i_recv = heapq.heappop(ready)
        nbytes = messages[src][i_send].nbytes
        link, resources = topology.route(src, dst)
        start = max([t, *(free_at[res] for res in resources)])
        for res in resources:
            free_at[res] = start + link.beta * nbytes
            busy[res] += link.beta * nbytes
        done[src][i_send] = done[dst][i_recv] = start + link.time(nbytes)
        advance(src)
        advance(dst)
    stuck = [r for r in range(world) if any(math.isnan(t) for t in done[r])]
    if stuck:
        raise SimulationError(f"ranks {stuck} never complete: a message without its partner, or a deadlock")
    finish = tuple(max([0.0, *done[r]]) for r in range(world))
    return Result(max(finish, default=0.0), finish, dict(busy))
