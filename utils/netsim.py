"""Predict how long recorded point-to-point traffic takes on a network you do not have: an alpha-beta simulator.

    from utils.p2p_ledger import Message
    from utils.netsim import simulate, two_level

    topo = two_level(nodes=2, gpus_per_node=4, intra=(2e-6, 1 / 450e9), inter=(5e-6, 1 / 50e9), nic="gpu")
    per_rank = [...]                      # rank r's list of Message(kind, peer, nbytes, blocking, tag), in call order
    simulate(per_rank, topo).time         # seconds until the last rank is done

The message lists are what `utils.p2p_ledger.Ledger` records on each rank (`ledger.messages`, and `ledger.waits` for
where each rank waited), so an algorithm run on a laptop can be replayed on a described cluster. The rules, all
of the alpha-beta kind:

- Matching: rank a's k-th send to b with tag t pairs with b's k-th receive from a with tag t (messages between two
  ranks do not overtake one another, as in Gloo, NCCL and MPI). A receive from any source (peer None) is not
  supported.
- Time of one message of n bytes from a to b: it starts when both sides have posted it and every resource on its
  route is free, and it completes alpha + beta * n later, with the (alpha, beta) of its route.
- Resources. Inside a node (a switch such as NVSwitch): the sender's port out and the receiver's port in. A GPU
  has its full bandwidth each way, shared by all its destinations (two messages out of one GPU at once take
  twice as long), not a full link per pair. Between nodes: the network cards (NICs), one per direction, either
  one per node shared by all that node's ranks (nic="node") or one per GPU (nic="gpu", the rail-optimised H100
  and A100 systems such as DGX, whose fabric gives every NIC its full bandwidth). A resource carries one
  message at a time, first come first served, for beta * n seconds (the latency alpha does not occupy it). That
  is serialisation instead of fair sharing: k equal messages through one port finish together at k * beta * n
  under sharing, and the last of them at the same time here.
- Ranks: a blocking operation stops its rank until it completes. A rank posts non-blocking operations without
  stopping, and stops at each wait() (given as `waits`, what the ledger records) until the operation waited for
  completes. Without `waits` for a rank, its non-blocking operations are grouped into *phases*: a phase ends
  before an operation that repeats a (kind, peer, tag) of the current phase, and before a blocking one; the rank
  waits for every operation of a phase before it posts the next one (what `for request in requests:
  request.wait()` after each step of a ring does). At the end a rank waits for everything it posted.

Local work (additions, copies) takes no time: the simulator prices the network only.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from utils.p2p_ledger import Message

__all__ = ["Link", "Result", "SimulationError", "Topology", "ring_schedule", "simulate", "two_level", "uniform"]

NICS = ("node", "gpu")


class SimulationError(ValueError):
    """The message lists cannot be replayed: unmatched messages, a deadlock, or a peer outside the topology."""


@dataclass(frozen=True)
class Link:
    """One kind of connection: a message of n bytes over it takes alpha + beta * n seconds."""

    alpha: float  # seconds
    beta: float  # seconds per byte (1 / bandwidth), in one direction

    def time(self, nbytes: int) -> float:
        return self.alpha + self.beta * nbytes


@dataclass(frozen=True)
class Topology:
    """Ranks placed on nodes: `node_of[r]` is rank r's node; `intra` links ranks of one node, `inter` the nodes.

    `nic` says whose network card a message between nodes goes through: its node's ("node") or its GPU's ("gpu").
    """

    node_of: tuple[int, ...]
    intra: Link
    inter: Link
    nic: str = "node"

    def __post_init__(self) -> None:
        if self.nic not in NICS:
            raise ValueError(f"nic must be one of {NICS}, got {self.nic!r}")

    @property
    def world_size(self) -> int:
        return len(self.node_of)

    def route(self, src: int, dst: int) -> tuple[Link, tuple[tuple, ...]]:
        """The link a message src -> dst uses, and the resources it occupies (see the module docstring)."""
        if self.node_of[src] == self.node_of[dst]:
            return self.intra, (("out", src), ("in", dst))
        if self.nic == "gpu":
            return self.inter, (("nic up", src), ("nic down", dst))
        return self.inter, (("up", self.node_of[src]), ("down", self.node_of[dst]))


def uniform(world_size: int, alpha: float, beta: float) -> Topology:
    """N ranks on one switch, each with a port of the same (alpha, beta) each way: the plain alpha-beta model."""
    link = Link(alpha, beta)
    return Topology((0,) * world_size, link, link)


def two_level(
    nodes: int,
    gpus_per_node: int,
    intra: tuple[float, float],
    inter: tuple[float, float],
    placement: str = "blocked",
    nic: str = "node",
) -> Topology:
    """`nodes` x `gpus_per_node` ranks: (alpha, beta) `intra` inside a node, `inter` between nodes.

    placement "blocked" puts ranks 0..g-1 on node 0, g..2g-1 on node 1, ... (node-aware: a ring 0 -> 1 -> ... -> N-1
    crosses between nodes only `nodes` times); "interleaved" puts rank r on node r % nodes (every hop of that ring
    crosses nodes). nic "node": one network card per node, shared by its GPUs; "gpu": one per GPU.
    """
    world = nodes * gpus_per_node
    if placement == "blocked":
        node_of = tuple(r // gpus_per_node for r in range(world))
    elif placement == "interleaved":
        node_of = tuple(r % nodes for r in range(world))
    else:
        raise ValueError(f'placement must be "blocked" or "interleaved", got {placement!r}')
    return Topology(node_of, Link(*intra), Link(*inter), nic)


def ring_schedule(orders: Sequence[Sequence[int]], chunk_bytes: Sequence[int]) -> tuple[list, list]:
    """The messages and waits of a ring all-reduce over one or more rings (channels), as the ledger records them.

    Channel c runs the ring of lab 02 along `orders[c]` (a permutation of the ranks) on its own share of the
    tensor, with tag c: in each of the 2(N-1) steps every rank posts, for every channel, an irecv from its left
    neighbour in that ring and an isend to its right one, then waits for all of them. chunk_bytes[c][k] is the
    size of chunk k of channel c (chunks as torch.tensor_split cuts the channel's share).

    Returns:
        (messages, waits): per rank, the Message list and the (position, index) waits, for simulate().
    """
    world = len(orders[0])
    messages: list[list[Message]] = [[] for _ in range(world)]
    waits: list[list[tuple[int, int]]] = [[] for _ in range(world)]
    for step in range(2 * (world - 1)):
        shift = step if step < world - 1 else step - world  # all-gather steps send the chunk one place ahead
        for c, order in enumerate(orders):
            for pos, rank in enumerate(order):
                left, right = order[(pos - 1) % world], order[(pos + 1) % world]
                messages[rank].append(Message("recv", left, chunk_bytes[c][(pos - shift - 1) % world], False, c))
                messages[rank].append(Message("send", right, chunk_bytes[c][(pos - shift) % world], False, c))
        for rank in range(world):
            posted = len(messages[rank])
            waits[rank] += [(posted, i) for i in range(posted - 2 * len(orders), posted)]
    return messages, waits


@dataclass(frozen=True)
class Result:
    """`time`: when the last rank finished (all ranks start at 0); `finish[r]`: when rank r finished."""

    time: float
    finish: tuple[float, ...]
    busy: dict = field(default_factory=dict)  # resource -> seconds it carried data


Block = tuple[list[int], list[int]]  # (operations a rank posts together, operations it then waits for)


def _phases(ops: Sequence[Message]) -> list[Block]:
    """A rank's operations cut into phases, when its waits are unknown (module docstring)."""
    phases: list[list[int]] = []
    current: list[int] = []
    seen: set[tuple[str, int | None, int]] = set()
    for i, op in enumerate(ops):
        if current and (op.blocking or (op.kind, op.peer, op.tag) in seen):
            phases.append(current)
            current, seen = [], set()
        current.append(i)
        seen.add((op.kind, op.peer, op.tag))
        if op.blocking:
            phases.append(current)
            current, seen = [], set()
    if current:
        phases.append(current)
    return [(phase, phase) for phase in phases]


def _blocks(ops: Sequence[Message], waits: Sequence[tuple[int, int]]) -> list[Block]:
    """A rank's operations cut where it stopped: at each blocking call, and at each run of wait()s."""
    at: dict[int, list[int]] = defaultdict(list)  # position -> indices waited for there
    for position, index in waits:
        if not 0 <= index < position <= len(ops):
            raise SimulationError(f"a wait at position {position} for operation {index}, of {len(ops)}")
        at[position].append(index)
    blocks: list[Block] = []
    posted: list[int] = []
    for i in range(len(ops) + 1):
        if at.get(i):
            blocks.append((posted, at[i]))
            posted = []
        if i < len(ops):
            posted.append(i)
            if ops[i].blocking:
                blocks.append((posted, [i]))
                posted = []
    blocks.append((posted, list(range(len(ops)))))  # at the end, a rank waits for everything it posted
    return blocks


def simulate(
    messages: Sequence[Sequence[Message]],
    topology: Topology,
    waits: Sequence[Sequence[tuple[int, int]]] | None = None,
) -> Result:
    """Replay each rank's recorded messages on `topology` and return when every rank finishes.

    Args:
        messages: messages[r] is rank r's list of utils.p2p_ledger.Message, in the order rank r posted them.
        topology: where the ranks are and what their links cost; topology.world_size == len(messages).
        waits: waits[r] is rank r's `ledger.waits`: (messages posted so far, index of the message waited for), in
            order. None: guess the waits from phases (module docstring).

    Raises:
        SimulationError: a peer outside the group or None, sizes of a matched pair that differ, a message
            without its partner, a wait for a message not yet posted, or a deadlock (ranks waiting for one
            another in a cycle).
    """
    world = len(messages)
    if topology.world_size != world:
        raise SimulationError(f"{world} ranks of messages, but the topology has {topology.world_size} ranks")
    for r, ops in enumerate(messages):
        for op in ops:
            if op.peer is None or not 0 <= op.peer < world or op.peer == r:
                raise SimulationError(f"rank {r}: message {op} has no valid peer")
    blocks = [_phases(ops) if waits is None else _blocks(ops, waits[r]) for r, ops in enumerate(messages)]
    next_block = [0] * world
    clock = [0.0] * world  # when each rank posted its current block
    done = [[math.nan] * len(ops) for ops in messages]  # completion time of every operation
    posted: dict[tuple[str, int, int, int], list[tuple[int, float]]] = defaultdict(list)  # FIFO per channel
    ready: list[tuple[float, int, int, int, int, int]] = []  # heap: (ready time, seq, src, i_send, dst, i_recv)
    free_at: dict[tuple, float] = defaultdict(float)
    busy: dict[tuple, float] = defaultdict(float)
    seq = 0

    def post(rank: int) -> None:
        """Post rank's next block at clock[rank]; pair each operation with its partner if that one is posted."""
        nonlocal seq
        for i in blocks[rank][next_block[rank]][0]:
            op = messages[rank][i]
            src, dst = (rank, op.peer) if op.kind == "send" else (op.peer, rank)
            other = "recv" if op.kind == "send" else "send"
            waiting = posted[(other, src, dst, op.tag)]
            if waiting:  # the partner was posted earlier: the message can start once both are there
                j, t = waiting.pop(0)
                i_send, i_recv = (i, j) if op.kind == "send" else (j, i)
                if messages[src][i_send].nbytes != messages[dst][i_recv].nbytes:
                    raise SimulationError(f"{src} -> {dst}: a send of {messages[src][i_send].nbytes} bytes "
                                          f"meets a receive of {messages[dst][i_recv].nbytes} bytes")
                heapq.heappush(ready, (max(t, clock[rank]), seq, src, i_send, dst, i_recv))
                seq += 1
            else:
                posted[(op.kind, src, dst, op.tag)].append((i, clock[rank]))
        next_block[rank] += 1

    def advance(rank: int) -> None:
        """While what rank waits for is complete, move its clock to that completion and post its next block."""
        while next_block[rank] < len(blocks[rank]):
            awaited = blocks[rank][next_block[rank] - 1][1] if next_block[rank] else []
            times = [done[rank][i] for i in awaited]
            if any(math.isnan(t) for t in times):
                return
            clock[rank] = max([clock[rank], *times])
            post(rank)

    for rank in range(world):
        if blocks[rank]:
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
