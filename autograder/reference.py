"""Reference implementations for the instructor: lab 02's pipelined ring, a binomial tree and a naive all-reduce,
and lab 04's BucketedDDP (`bucketed_ddp()`, at the end).

    import torch.distributed as dist
    from autograder.reference import ring_all_reduce

    def body():                      # on every rank, e.g. through utils.launch.launch
        t = torch.full((10,), float(dist.get_rank()))
        ring_all_reduce(t)           # in place: every rank now holds 0 + 1 + ... + (N-1)
        return t

They live in autograder/ because they are solutions: nothing here ships to students. All three sum
`tensor` in place over all ranks using only dist.isend / dist.irecv, so utils.p2p_ledger counts their traffic.
`python -m autograder.bench` measures them against the built-in dist.all_reduce.

There is one ring: the solution of lab 02's exercise 2.6 (`pipelined_ring_all_reduce`), read from the solution
notebook when this module is imported, so that the ring students read in the solution is the one `make bench`
measures. Like Gloo's own ring it sends every chunk in segments, each going on to the right as soon as it has
arrived and been reduced, so that sending one segment overlaps receiving and reducing the next, across step
boundaries too. Gloo's segments are 1 MiB; ours are up to SEGMENT_BYTES = 4 MiB, because from Python every
message costs far more: posting one isend or irecv takes 50-100 us of CPU on a 2-core machine (measured), against
the ~1 ms that 1 MiB takes on the wire there. Full `make bench` runs on 2 cores (ring / built-in busbw, median over
4-64 MB, N = 3): segments of 1 MiB 0.77-0.87, 3 MiB 0.90-0.95, 4 MiB 0.91-0.98 (four to six runs each).
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from autograder.tamper import meta, source
from utils.launch import rank_device
from utils.memory import scratch

__all__ = ["SEGMENT_BYTES", "bucketed_ddp", "naive_all_reduce", "ring_all_reduce", "tree_all_reduce"]

SEGMENT_BYTES = 4 << 20  # Gloo's own ring uses 1 MiB; from Python each message costs more (see above)
SOLUTIONS = Path(__file__).resolve().parents[1] / "solutions"
LAB02_SOLUTION = SOLUTIONS / "02_ring_allreduce" / "ring_allreduce.ipynb"
LAB04_SOLUTION = SOLUTIONS / "04_bucketed_ddp" / "bucketed_ddp.ipynb"

def _solution(notebook: Path, grade_id: str, **imports: Any) -> Any:
    """What the solution cell `grade_id` of `notebook` defines under the name `grade_id`: the one place it is written.

    The cell runs in a namespace holding torch, dist and `imports` (the notebook's own imports that it uses).
    """
    cells = json.loads(notebook.read_text())["cells"]
    [cell] = [c for c in cells if meta(c).get("grade_id") == grade_id]
    namespace = {"torch": torch, "dist": dist, **imports}
    exec(compile(source(cell), f"{notebook}:{grade_id}", "exec"), namespace)
    return namespace[grade_id]


_pipelined_ring = _solution(LAB02_SOLUTION, "pipelined_ring_all_reduce", scratch=scratch)


def _flat_view(tensor: torch.Tensor) -> torch.Tensor:
    if not tensor.is_contiguous():
        raise ValueError("the reference all-reduces need a contiguous tensor")
    return tensor.view(-1)


def ring_all_reduce(tensor: torch.Tensor) -> None:
    """Sum `tensor` over all ranks, in place, with lab 02's pipelined ring, in segments of at most SEGMENT_BYTES.

    Every rank calls it with a contiguous tensor of the same shape and dtype; any length, also shorter than
    the world size. Per rank it sends 2(N-1) chunks of about numel/N elements, each cut into equal segments.
    Example, N = 3: tensor = [r, r] on rank r -> [3, 3] on every rank.
    """
    _pipelined_ring(tensor, SEGMENT_BYTES)  # read at each call: a benchmark may change it


def tree_all_reduce(tensor: torch.Tensor) -> None:
    """Sum `tensor` over all ranks, in place: binomial-tree reduce to rank 0, then binomial broadcast.

    2 ceil(log2 N) rounds of whole-tensor messages: few messages (good for small tensors), but each rank
    moves up to 2 ceil(log2 N) M bytes (bad for large ones). Example, N = 5: [r] on rank r -> [10] everywhere.
    """
    world, rank = dist.get_world_size(), dist.get_rank()
    if world == 1 or tensor.numel() == 0:  # nothing to add up (an empty tensor is always contiguous)
        return
    flat = _flat_view(tensor)
    inbox = scratch("inbox", flat.numel(), flat)
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
    inbox = scratch("inbox", flat.numel(), flat)
    for peer in range(1, world):
        dist.irecv(inbox, src=peer).wait()
        flat.add_(inbox)
    for request in [dist.isend(flat, dst=peer) for peer in range(1, world)]:
        request.wait()


def bucketed_ddp() -> type[nn.Module]:
    """Lab 04's BucketedDDP class, read from the solution notebook (course/ gets only its stubs: students write it).

    autograder.bench_ddp times it against torch's DistributedDataParallel.
    Example: `bucketed_ddp()(model, bucket_cap_mb=4)` on every rank.
    """
    return _solution(LAB04_SOLUTION, "BucketedDDP", contextlib=contextlib, nn=nn, rank_device=rank_device)
