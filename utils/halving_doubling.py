"""Recursive halving-doubling (Rabenseifner's all-reduce), a worked algorithm that lab 02 reads and measures.

    import torch.distributed as dist
    from utils.halving_doubling import halving_doubling_all_reduce

    def body():                                  # on every rank, e.g. through utils.launch.launch
        t = torch.full((10,), float(dist.get_rank()))
        halving_doubling_all_reduce(t)           # in place: every rank now holds 0 + 1 + ... + (N-1)
        return t

For N a power of two, log2 N rounds of a reduce-scatter by recursive halving (exchange half of the current range
with the partner at distance N/2, N/4, ..., 1, keep the half whose bit matches, add), then log2 N rounds of an
all-gather by recursive doubling (the same partners in reverse, each round doubling the range). Each rank sends
M/2 + M/4 + ... + M/N bytes in each phase, 2(N-1)/N M in all, like the ring, but in 2 log2 N messages instead of
2(N-1):  T = 2 log2(N) alpha + 2(N-1)/N beta M.

Other N: the first 2r ranks (r = N - p, p the largest power of two below N) fold in pairs before (rank 2i sends
its tensor to 2i + 1, which adds it) and unfold after (2i + 1 sends the result back), so p ranks run the
algorithm: two more messages of M bytes on the folded pairs. Only dist.send / recv and dist.batch_isend_irecv are
used, so utils.p2p_ledger counts every message; each exchange with a partner is one group, so it also runs under
NCCL's rules (utils.nccl_rules).
"""

from __future__ import annotations

import itertools

import torch
import torch.distributed as dist

__all__ = ["halving_doubling_all_reduce"]


def halving_doubling_all_reduce(tensor: torch.Tensor) -> None:
    """Sum `tensor` over all ranks, in place, by recursive halving then recursive doubling (any world size N >= 1).

    Every rank calls it with a contiguous tensor of one shape and dtype, any number of elements. Example, N = 4:
    [r, r] on rank r -> [6, 6] on every rank; each rank sends 2 log2 4 = 4 messages.
    """
    rank, world = dist.get_rank(), dist.get_world_size()
    if world == 1:
        return
    if not tensor.is_contiguous():
        raise ValueError("halving_doubling_all_reduce needs a contiguous tensor")
    flat = tensor.view(-1)
    p = 1 << (world.bit_length() - 1)  # the largest power of two <= N
    folded = 2 * (world - p)  # ranks 0 .. folded - 1 pair up: (0, 1), (2, 3), ...
    if rank < folded:
        if rank % 2 == 0:  # hand the tensor to the odd partner, and get the sum back at the end
            dist.send(flat, dst=rank + 1)
            dist.recv(flat, src=rank + 1)
            return
        incoming = torch.empty_like(flat)
        dist.recv(incoming, src=rank - 1)
        flat.add_(incoming)
    me = rank // 2 if rank < folded else rank - folded // 2  # index among the p ranks that take part

    def member(index: int) -> int:
        return 2 * index + 1 if index < folded // 2 else index + folded // 2

    # Chunk k of p (torch.tensor_split's sizes) spans flat[offsets[k]:offsets[k + 1]]; a range is [lo, hi) in chunks.
    offsets = [0, *itertools.accumulate(len(c) for c in torch.tensor_split(flat, p))]

    def span(lo: int, hi: int) -> torch.Tensor:
        return flat[offsets[lo]:offsets[hi]]

    def exchange(send: torch.Tensor, receive: torch.Tensor, peer: int) -> None:
        # One group: on NCCL an ungrouped irecv and isend with one peer run in posting order, and would both wait.
        group = [dist.P2POp(dist.irecv, receive, peer), dist.P2POp(dist.isend, send, peer)]
        for request in dist.batch_isend_irecv(group):
            request.wait()

    lo, hi = 0, p
    buffer = torch.empty(offsets[p // 2], dtype=flat.dtype, device=flat.device)  # the largest half: chunks come first
    distance = p // 2
    while distance:  # reduce-scatter: halve the range, keep the half that bit `distance` of `me` names
        mid = (lo + hi) // 2
        keep, give = ((lo, mid), (mid, hi)) if me & distance == 0 else ((mid, hi), (lo, mid))
        kept = span(*keep)
        incoming = buffer[: kept.numel()]
        exchange(span(*give), incoming, member(me ^ distance))
        kept.add_(incoming)
        lo, hi = keep
        distance //= 2
    distance = 1
    while distance < p:  # all-gather: the partner holds the neighbouring block of the same size
        size = hi - lo
        other = (hi, hi + size) if me & distance == 0 else (lo - size, lo)
        exchange(span(lo, hi), span(*other), member(me ^ distance))
        lo, hi = min(lo, other[0]), max(hi, other[1])
        distance *= 2
    if rank < folded:
        dist.send(flat, dst=rank - 1)
