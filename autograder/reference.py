"""Reference implementations for the instructor: a pipelined ring, a binomial tree and a naive all-reduce (lab 02),
and lab 04's BucketedDDP, read from its solution notebook (`bucketed_ddp()`, at the end).

    import torch.distributed as dist
    from autograder.reference import ring_all_reduce

    def body():                      # on every rank, e.g. through utils.launch.launch
        t = torch.full((10,), float(dist.get_rank()))
        ring_all_reduce(t)           # in place: every rank now holds 0 + 1 + ... + (N-1)
        return t

They live in autograder/ because they are lab 02's solutions: nothing here ships to students. All three
sum `tensor` in place over all ranks using only dist.isend / dist.irecv, so utils.ledger counts their
traffic. `python -m autograder.bench` measures them against the built-in dist.all_reduce.

The ring is the one to beat Gloo with. Its chunks are torch.tensor_split(tensor, N); step t of 2(N-1) sends
chunk (r - t) mod N to the right and receives chunk (r - t - 1) mod N from the left: steps 0..N-2 add what
arrives (reduce-scatter), steps N-1..2N-3 keep it (all-gather). Like Gloo's own ring, every chunk travels
in segments, and a segment goes on to the right as soon as it has arrived and been reduced, so sending one
segment overlaps receiving and reducing the next, across step boundaries too. Gloo's segments are 1 MiB;
ours are up to 4 MiB, because from Python every message costs far more: posting one isend or irecv takes
50-100 us of CPU on a 2-core machine (measured), against the ~1 ms that 1 MiB takes on the wire there. Large
segments pay that cost less often; small ones fill and drain the pipeline faster. Full `make bench` runs on
2 cores (ring / built-in busbw, median over 4-64 MB, N = 3): 1 MiB 0.77-0.87, 3 MiB 0.90-0.95, 4 MiB
0.91-0.98 (four to six runs each). Reduce-scatter segments land in two preallocated buffers (double buffering) and
are added in place; all-gather segments land directly where they belong, and those receives are all posted
at the start (Gloo ships a message only once its receive is posted). Segments add messages, never bytes:
each rank still sends exactly 2(N-1) chunks.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from autograder.tamper import meta, source
from utils.launch import rank_device

__all__ = ["SEGMENT_BYTES", "bucketed_ddp", "naive_all_reduce", "ring_all_reduce", "tree_all_reduce"]

LAB04_SOLUTION = Path(__file__).resolve().parents[1] / "solutions" / "04_bucketed_ddp" / "bucketed_ddp.ipynb"

SEGMENT_BYTES = 4 << 20  # Gloo's own ring uses 1 MiB; from Python each message costs more (see above)
_REDUCE, _GATHER = 0, 1  # message tags of the two phases
_IN_FLIGHT = 2  # receives posted ahead (double buffering): one lands while the previous one is reduced

_buffers: dict[tuple[torch.dtype, torch.device, int, int], list[torch.Tensor]] = {}  # receive buffers, reused


def _receive_buffers(dtype: torch.dtype, device: torch.device, numel: int) -> list[torch.Tensor]:
    """_IN_FLIGHT preallocated buffers of at least `numel` elements: no allocation per call."""
    key = (dtype, device, numel, _IN_FLIGHT)
    if key not in _buffers:
        if len(_buffers) >= 4:  # a benchmark sweeping sizes must not hoard memory
            _buffers.clear()
        _buffers[key] = [torch.empty(numel, dtype=dtype, device=device) for _ in range(_IN_FLIGHT)]
    return _buffers[key]


_one_way: dict[int, tuple[dist.ProcessGroup, list[dist.ProcessGroup]]] = {}  # id(default group) -> its pair


def _one_way_groups() -> list[dist.ProcessGroup]:
    """Two extra groups over all ranks, made once per default group; at N = 2, rank r sends on group r.

    Every rank must call it at the same point (creating a group is collective), as ring_all_reduce does.
    """
    world = dist.group.WORLD
    if id(world) not in _one_way:  # the entry keeps `world` alive, so its id cannot be reused
        _one_way[id(world)] = (world, [dist.new_group(), dist.new_group()])
    return _one_way[id(world)][1]


def _flat_view(tensor: torch.Tensor) -> torch.Tensor:
    if not tensor.is_contiguous():
        raise ValueError("the reference all-reduces need a contiguous tensor")
    return tensor.view(-1)


def ring_all_reduce(tensor: torch.Tensor) -> None:
    """Sum `tensor` over all ranks, in place, with a pipelined ring (reduce-scatter, then all-gather).

    Every rank calls it with a contiguous tensor of the same shape and dtype; any length, also shorter than
    the world size. Per rank it sends 2(N-1) chunks of about numel/N elements, each cut into equal segments of
    at most SEGMENT_BYTES. Example, N = 3: tensor = [r, r] on rank r -> [3, 3] on every rank.
    """
    world, rank = dist.get_world_size(), dist.get_rank()
    if world == 1:
        return
    flat = _flat_view(tensor)
    chunks = torch.tensor_split(flat, world)  # views: N chunks whose lengths differ by at most one
    longest = chunks[0].numel()
    # Equal pieces rather than full segments plus a short tail: 9 MiB goes as 3 x 3 MiB, not 4 + 4 + 1,
    # since a message costs the same overhead whatever its size. Every rank cuts chunk c alike, so pieces match up.
    pieces = max(1, -(-longest * flat.element_size() // SEGMENT_BYTES))  # segments per chunk, rounded up
    segments = [[piece for piece in chunk.tensor_split(pieces) if piece.numel()] for chunk in chunks]
    right, left = (rank + 1) % world, (rank - 1) % world
    # At N = 2 the right and left neighbour are one rank, so both directions would share one Gloo connection:
    # one socket, one lock, the reads of one waiting on the writes of the other. A group per direction gives
    # each its own (measured at N = 2: ring / built-in 0.82-1.11 on one connection, 0.94-1.19 on two).
    send_group, receive_group = (_one_way_groups()[rank], _one_way_groups()[left]) if world == 2 else (None, None)
    steps = 2 * (world - 1)
    # Receives in the order they arrive, as (step, segment); the left neighbour sends the same chunk index.
    # The two phases use two tags, so the all-gather's receives can be posted long before their turn.
    arrivals = [(t, k) for t in range(steps) for k in range(len(segments[(rank - t - 1) % world]))]
    reduces = sum(1 for t, _ in arrivals if t < world - 1)
    if reduces:
        buffers = _receive_buffers(flat.dtype, flat.device, -(-longest // pieces))  # the longest segment

    def post_receive(i: int) -> dist.Work:
        t, k = arrivals[i]
        target = segments[(rank - t - 1) % world][k]
        if t < world - 1:  # reduce-scatter: land in a buffer, add afterwards
            buffer = buffers[i % _IN_FLIGHT][: target.numel()]
            return dist.irecv(buffer, src=left, group=receive_group, tag=_REDUCE)
        # All-gather: land in place. We may still be sending this region's partial sum (step t + 1 - N), but
        # its final value cannot arrive before that partial sum has reached the right neighbour.
        return dist.irecv(target, src=left, group=receive_group, tag=_GATHER)

    # Receives first: Gloo ships a message only once the receiver has posted its receive.
    receives = {i: post_receive(i) for i in range(min(_IN_FLIGHT, reduces))}  # the reduce-scatter's window
    sends = [dist.isend(piece, dst=right, group=send_group, tag=_REDUCE) for piece in segments[rank]]  # step 0
    receives |= {i: post_receive(i) for i in range(reduces, len(arrivals))}  # every all-gather receive, now
    for i, (t, k) in enumerate(arrivals):
        receives.pop(i).wait()
        target = segments[(rank - t - 1) % world][k]
        if t < world - 1:
            target.add_(buffers[i % _IN_FLIGHT][: target.numel()])  # reduce in place, no temporary
            if i + _IN_FLIGHT < reduces:  # this buffer is free again: post the receive after next
                receives[i + _IN_FLIGHT] = post_receive(i + _IN_FLIGHT)
        if t + 1 < steps:  # what just arrived is what step t + 1 sends on, segment by segment
            tag = _REDUCE if t + 1 < world - 1 else _GATHER
            sends.append(dist.isend(target, dst=right, group=send_group, tag=tag))
    for request in sends:
        request.wait()


def tree_all_reduce(tensor: torch.Tensor) -> None:
    """Sum `tensor` over all ranks, in place: binomial-tree reduce to rank 0, then binomial broadcast.

    2 ceil(log2 N) rounds of whole-tensor messages: few messages (good for small tensors), but each rank
    moves up to 2 ceil(log2 N) M bytes (bad for large ones). Example, N = 5: [r] on rank r -> [10] everywhere.
    """
    world, rank = dist.get_world_size(), dist.get_rank()
    if world == 1 or tensor.numel() == 0:  # nothing to add up (an empty tensor is always contiguous)
        return
    flat = _flat_view(tensor)
    inbox = _receive_buffers(flat.dtype, flat.device, flat.numel())[0]
    mask = 1
    while mask < world:  # reduce: at round `mask`, ranks with that bit set hand their partial sum down
        if rank & mask:
            dist.isend(flat, dst=rank - mask).wait()
            break
        if rank + mask < world:
            dist.irecv(inbox, src=rank + mask).wait()
            flat.add_(inbox)
        mask <<= 1
    # Broadcast back down the same tree, largest subtrees first; `mask` is where this rank left the reduce.
    if rank:
        dist.irecv(flat, src=rank - mask).wait()
    mask >>= 1
    while mask:
        if rank + mask < world:
            dist.isend(flat, dst=rank + mask).wait()
        mask >>= 1


def naive_all_reduce(tensor: torch.Tensor) -> None:
    """Sum `tensor` over all ranks, in place: everyone sends everything to rank 0, which sends the sum back.

    Rank 0 receives and sends (N-1) M bytes: its link is the bottleneck. The baseline the ring improves on.
    """
    world, rank = dist.get_world_size(), dist.get_rank()
    if world == 1 or tensor.numel() == 0:  # nothing to add up (an empty tensor is always contiguous)
        return
    flat = _flat_view(tensor)
    if rank:
        dist.isend(flat, dst=0).wait()
        dist.irecv(flat, src=0).wait()
        return
    inbox = _receive_buffers(flat.dtype, flat.device, flat.numel())[0]
    for peer in range(1, world):
        dist.irecv(inbox, src=peer).wait()
        flat.add_(inbox)
    for request in [dist.isend(flat, dst=peer) for peer in range(1, world)]:
        request.wait()


def bucketed_ddp() -> type[nn.Module]:
    """Lab 04's BucketedDDP class, read from the solution notebook: the one place it is written.

    Executes the notebook's `BucketedDDP` solution cell (course/ gets only its stubs: students write it) in a
    namespace with the notebook's imports, and returns the class. autograder.bench_ddp times it
    against torch's DistributedDataParallel. Example: `bucketed_ddp()(model, bucket_cap_mb=4)` on every rank.
    """
    cells = json.loads(LAB04_SOLUTION.read_text())["cells"]
    [cell] = [c for c in cells if meta(c).get("grade_id") == "BucketedDDP"]
    namespace = {"contextlib": contextlib, "dist": dist, "nn": nn, "torch": torch, "rank_device": rank_device}
    exec(compile(source(cell), f"{LAB04_SOLUTION}:BucketedDDP", "exec"), namespace)
    return namespace["BucketedDDP"]
