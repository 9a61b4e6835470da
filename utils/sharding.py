"""The two collectives of sharded training, built from point-to-point messages, and byte counts of state.

    import torch.distributed as dist
    from utils.sharding import all_gather_into_tensor, reduce_scatter_tensor, tensor_bytes

    def body():                                  # on every rank, e.g. through utils.launch.launch
        full = torch.arange(6.0) * (dist.get_rank() + 1)           # (N * s,) with s = 6 // N
        mine = torch.empty(6 // dist.get_world_size())             # (s,)
        reduce_scatter_tensor(mine, full)        # rank r: chunk r of the sum over ranks
        all_gather_into_tensor(full, mine)       # every rank: the whole sum
        return tensor_bytes(mine)                # 4 * s

Both collectives have the signatures of torch.distributed's `reduce_scatter_tensor` (op SUM) and
`all_gather_into_tensor`, with equal chunks of s elements, and use the *direct* algorithms of lab 01 (each
rank exchanges one chunk with every other rank; all receives and sends posted at once). They move exactly
(N-1) s elements per rank in each direction, the same as a ring, and, being made of dist.isend / dist.irecv,
every byte of them is counted by utils.ledger.Ledger. Lab 07 (ZeRO) uses them for that. They hand out
lab 01's reduce_scatter and all_gather for equal chunks, on purpose: lab 07 builds on them.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial

import torch
import torch.distributed as dist

__all__ = ["all_gather_into_tensor", "all_reduce", "reduce_scatter_tensor", "tensor_bytes"]


def _chunks(full: torch.Tensor, shard: torch.Tensor, name: str) -> list[torch.Tensor]:
    """The N views of `full` that shards of `shard`'s size make, after checking that they fit exactly."""
    world = dist.get_world_size()
    if not (full.is_contiguous() and shard.is_contiguous()):
        raise ValueError(f"{name} needs contiguous tensors")
    if full.dtype != shard.dtype or full.device != shard.device:
        raise ValueError(f"{name}: both tensors need one dtype and device, got {full.dtype} on {full.device} and "
                         f"{shard.dtype} on {shard.device}")
    if full.numel() != world * shard.numel():
        raise ValueError(f"{name}: the full tensor has {full.numel()} elements, not N * shard = {world} * "
                         f"{shard.numel()}: pad it to a multiple of N first")
    flat, size = full.view(-1), shard.numel()
    return [flat[k * size:(k + 1) * size] for k in range(world)]  # (not split(): size may be 0)


def _exchange(sends: list[torch.Tensor], receives: list[torch.Tensor]) -> None:
    """Rank r sends sends[k] to and receives receives[k] from every rank k != r, all posted at once.

    Posting everything before waiting means no send waits on a peer that is itself sending (Gloo). Within each
    pair the lower rank sends first and the higher one receives first: NCCL runs a pair's messages in order on
    one stream, where two receives posted first would wait for each other.
    """
    rank = dist.get_rank()
    requests = []
    for peer in range(dist.get_world_size()):
        if peer != rank:
            send = partial(dist.isend, sends[peer], dst=peer)  # looked up now: a Ledger's recording version
            receive = partial(dist.irecv, receives[peer], src=peer)
            first, second = (send, receive) if rank < peer else (receive, send)
            requests += [first(), second()]
    for request in requests:
        request.wait()


def reduce_scatter_tensor(output: torch.Tensor, input: torch.Tensor) -> None:
    """Rank r's `output` (s elements) receives the sum over ranks of chunk r of their `input` (N s elements).

    Called on every rank of the default process group; `input` is not modified. Chunk k is
    input.view(-1)[k * s:(k + 1) * s]. Sums in rank order, so every rank's result is the same bits as any other
    run of this function on the same inputs.
    """
    chunks = _chunks(input, output, "reduce_scatter_tensor")
    rank = dist.get_rank()
    parts = [chunks[rank] if k == rank else torch.empty_like(output) for k in range(len(chunks))]
    _exchange(chunks, parts)  # parts[k]: rank k's contribution to my chunk
    total = parts[0].clone()
    for part in parts[1:]:
        total += part
    output.view(-1).copy_(total.view(-1))


def all_gather_into_tensor(output_tensor: torch.Tensor, input_tensor: torch.Tensor) -> None:
    """Every rank's `output_tensor` (N s elements) receives chunk k = rank k's `input_tensor` (s elements).

    Called on every rank of the default process group. `input_tensor` may be a view into `output_tensor` (its
    own chunk): it is then already in place.
    """
    chunks = _chunks(output_tensor, input_tensor, "all_gather_into_tensor")
    rank = dist.get_rank()
    mine = input_tensor.clone()  # what we send: safe even if input_tensor is a view into output_tensor
    _exchange([mine] * len(chunks), chunks)
    chunks[rank].copy_(mine.view_as(chunks[rank]))


def all_reduce(tensor: torch.Tensor) -> None:
    """Sum a 1-D tensor of N s elements over the ranks, in place: reduce_scatter_tensor, then all_gather_into_tensor.

    What DDP does with a (padded) flat gradient: 2 (N-1) s elements sent per rank, the same as a ring.
    """
    world = dist.get_world_size()
    if tensor.dim() != 1 or tensor.numel() % world:
        raise ValueError(f"all_reduce needs a 1-D tensor whose length N = {world} divides, got shape "
                         f"{tuple(tensor.shape)}")
    mine = torch.empty(tensor.numel() // world, dtype=tensor.dtype, device=tensor.device)
    reduce_scatter_tensor(mine, tensor)
    all_gather_into_tensor(tensor, mine)


def tensor_bytes(obj: object) -> int:
    """The bytes of every tensor found in `obj`, through dicts, lists and tuples (e.g. an optimizer's state).

    >>> tensor_bytes({"exp_avg": torch.zeros(10), "step": torch.tensor(3.0)})
    44
    """
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return tensor_bytes(list(obj.values()))
    if isinstance(obj, Iterable) and not isinstance(obj, str | bytes):
        return sum(tensor_bytes(item) for item in obj)
    return 0
