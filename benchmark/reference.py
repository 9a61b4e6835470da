"""Reference implementations for the instructor: lab 02's pipelined ring, a binomial tree and a naive all-reduce,
and lab 04's BucketedDDP (`bucketed_ddp()`, at the end).

    import torch.distributed as dist
    from benchmark.reference import ring_all_reduce

    def body():                      # on every rank, e.g. through utils.launch.launch
        t = torch.full((10,), float(dist.get_rank()))
        ring_all_reduce(t)           # in place: every rank now holds 0 + 1 + ... + (N-1)
        return t

They live in benchmark/ because they are solutions: nothing here ships to students. All three sum
`tensor` in place over all ranks using only point-to-point messages, so utils.p2p_ledger counts their traffic.
`python -m benchmark.bench` measures them against the built-in dist.all_reduce.

There is one ring and one tree: the solutions of lab 02's exercises 2.6 (`pipelined_ring_all_reduce`) and 2.2
(`tree_all_reduce`), read from the solution notebook at their first call (`preload` reads them at once), so that
what students read in the solution is what `make bench` measures. A solution cell runs in the namespace of its
notebook's own setup cell: the names that cell imports, so an import added there reaches the solutions too (its
other statements, such as torch.set_num_threads, are left out: they would change the benchmark's process). The ring,
like Gloo's own, sends every chunk in segments, each going on to the right as soon as it has arrived and been
reduced, so that sending one segment overlaps receiving and reducing the next, across step boundaries too. At N = 2,
where both neighbours are one rank, each segment's send and receive go as one group (NCCL's rule: lab 02, exercise
2.6), and every reduce-scatter group is posted before the first is waited for, into a landing buffer as large as a
chunk: adding segment k overlaps the transfers of the segments after it, and segment k's all-gather group travels
while segment k + 1 is added. Gloo's segments are 1 MiB; ours are up to SEGMENT_BYTES = 4 MiB, because from Python
every message costs far more: posting one isend or irecv takes 50-100 us of CPU on a 2-core machine (measured),
against the ~1 ms that 1 MiB takes on the wire there. Full `make bench` runs on 2 cores (ring / built-in busbw,
median over 4-64 MB, N = 3): segments of 1 MiB 0.77-0.87, 3 MiB 0.90-0.95, 4 MiB 0.91-0.98 (four to six runs each).

At N = 2 each phase is one step, so what no other segment hides is a larger share: the first segment's transfer
(nothing to add yet) and the last one's all-gather (nothing left to add). With chunks of one or two 4 MiB segments
(tensors of 4 to 16 MB) that fill and drain are half the phase or all of it. So at N = 2 `segment_for` cuts every chunk
into at least PIECES_AT_TWO = 4 segments, none below 1 MiB (Gloo's size): 4 MB in 2 pieces per chunk, 8 MB and
up in 4 or more (Gloo cuts every chunk in at least 2). Not at N >= 3: there a segment goes on across 2(N - 1) steps,
and with more ranks than cores each extra message costs CPU that the ranks share.

Measured with the bench's own method, N = 2, both rings in the same runs (six runs, the ranks at real-time priority,
`chrt -r 1`, so that the other jobs on the 2 shared cores wait), ring / built-in busbw at 4, 8, 16, 32, 64 MB. The
machine switched between two states in which the built-in took 26-28 ms or 55-56 ms at 64 MB (the ring 33-36 or
43-45 ms). In the fast state: 4 MiB segments 0.84-0.87, 0.73-0.77, 0.78-0.82, 0.78-0.81, 0.76-0.77; these segments
0.82-0.87, 0.80-0.86, 0.83-0.84, 0.74-0.80, 0.77-0.78. In the slow state: 4 MiB segments 0.73-0.76, 0.81-0.85,
0.98-1.09, 1.10-1.28, 1.23-1.29; these segments 0.83-0.84, 1.05-1.08, 1.16-1.23, 1.19-1.29, 1.24-1.26. So the
smaller segments gain at 4-16 MB and change nothing above; in the fast state the built-in stays ahead at every size
(its CPU per call is lower: in a `perf` profile at 64 MB the ring's I/O thread spent 57 % more samples copying the
same received bytes, which land in a buffer as large as a chunk, 32 MiB, that the cache does not hold).
"""

from __future__ import annotations

import ast
import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from nbplumbing.cells import meta, parse_cell, source
from utils.memory import scratch

__all__ = ["SEGMENT_BYTES", "bucketed_ddp", "naive_all_reduce", "preload", "ring_all_reduce", "segment_for",
           "tree_all_reduce"]

SEGMENT_BYTES = 4 << 20  # Gloo's own ring uses 1 MiB; from Python each message costs more (see above)
PIECES_AT_TWO = 4  # at N = 2, segments per chunk at least (the pipeline's fill and drain: see above)
MIN_SEGMENT_BYTES = 1 << 20  # ... but none smaller than Gloo's own segments
SOLUTIONS = Path(__file__).resolve().parents[1] / "solutions"
LAB02_SOLUTION = SOLUTIONS / "02_ring_allreduce" / "ring_allreduce.ipynb"
LAB04_SOLUTION = SOLUTIONS / "04_bucketed_ddp" / "bucketed_ddp.ipynb"
SETUP_CELL = "setup"  # the grade_id of every lab's first code cell, the one that imports what the lab uses


@functools.cache
def _solution(notebook: Path, grade_id: str) -> Any:
    """What the solution cell `grade_id` of `notebook` defines under the name `grade_id`: the one place it is written.

    The cell runs in the namespace that the imports of the notebook's setup cell make (read once per process).
    """
    cells = {meta(c).get("grade_id"): c for c in json.loads(notebook.read_text())["cells"]}
    if grade_id not in cells or SETUP_CELL not in cells:
        raise LookupError(f"{notebook} has no cell {grade_id!r} or {SETUP_CELL!r}: the benchmark reads them")
    namespace: dict[str, Any] = {}
    exec(compile(_imports_of(source(cells[SETUP_CELL])), f"{notebook}:{SETUP_CELL}", "exec"), namespace)
    exec(compile(source(cells[grade_id]), f"{notebook}:{grade_id}", "exec"), namespace)
    return namespace[grade_id]


def _imports_of(setup: str) -> ast.Module:
    """The import statements of a setup cell's source, as a module to compile.

    >>> ast.unparse(_imports_of("import os\\nFAST = os.environ.get('COURSE_FAST')\\nfrom torch import nn"))
    'import os\\nfrom torch import nn'
    """
    tree = parse_cell(setup)
    if tree is None:
        raise SyntaxError("a solution notebook's setup cell is not valid Python")
    return ast.Module([node for node in tree.body if isinstance(node, ast.Import | ast.ImportFrom)], type_ignores=[])


def _lab02(grade_id: str) -> Callable[..., None]:
    return _solution(LAB02_SOLUTION, grade_id)


def preload() -> None:
    """Read every reference implementation from its notebook now, e.g. before forking ranks that inherit them."""
    for grade_id in ("pipelined_ring_all_reduce", "tree_all_reduce"):
        _lab02(grade_id)
    bucketed_ddp()


def segment_for(numel: int, element_size: int, world: int) -> int:
    """The largest message, in bytes, of the benchmark's ring for a tensor of `numel` elements on `world` ranks.

    SEGMENT_BYTES; at N = 2 less, so that every chunk goes in at least PIECES_AT_TWO segments, but not below
    MIN_SEGMENT_BYTES (never above SEGMENT_BYTES). A 4 MB float32 tensor on 2 ranks: chunks of 2 MiB in 1 MiB
    segments; 64 MB: chunks of 32 MiB in 4 MiB segments.

    >>> [segment_for(n << 20, 4, 2) >> 10 for n in (1, 2, 4, 8, 16)]  # KiB, for tensors of 4, 8, 16, 32, 64 MB
    [1024, 1024, 2048, 4096, 4096]
    >>> segment_for(4 << 20, 4, 3) >> 10, segment_for(1000, 8, 2) >> 10
    (4096, 1024)
    """
    if world != 2:
        return SEGMENT_BYTES
    chunk = -(-numel // world) * element_size  # the longest chunk's bytes
    return min(SEGMENT_BYTES, max(MIN_SEGMENT_BYTES, -(-chunk // PIECES_AT_TWO)))


def ring_all_reduce(tensor: torch.Tensor) -> None:
    """Sum `tensor` over all ranks, in place, with lab 02's pipelined ring, in segments of segment_for(...) bytes.

    Every rank calls it with a contiguous tensor of the same shape and dtype; any length, also shorter than
    the world size. Per rank it sends 2(N-1) chunks of about numel/N elements, each cut into equal segments.
    Example, N = 3: tensor = [r, r] on rank r -> [3, 3] on every rank.
    """
    segment = segment_for(tensor.numel(), tensor.element_size(), dist.get_world_size())
    _lab02("pipelined_ring_all_reduce")(tensor, segment)  # read at each call: a benchmark may change SEGMENT_BYTES


def tree_all_reduce(tensor: torch.Tensor) -> None:
    """Sum `tensor` over all ranks, in place, with lab 02's binomial tree (exercise 2.2): reduce to rank 0, then
    broadcast back down the same tree.

    2 ceil(log2 N) rounds of whole-tensor messages: few messages (good for small tensors), but each rank
    moves up to 2 ceil(log2 N) M bytes (bad for large ones). Example, N = 5: [r] on rank r -> [10] everywhere.
    """
    _lab02("tree_all_reduce")(tensor)


def naive_all_reduce(tensor: torch.Tensor) -> None:
    """Sum `tensor` over all ranks, in place: everyone sends everything to rank 0, which sends the sum back.

    Rank 0 receives and sends (N-1) M bytes: its link is the bottleneck. The baseline the ring improves on.
    """
    world, rank = dist.get_world_size(), dist.get_rank()
    if world == 1 or tensor.numel() == 0:  # nothing to add up (an empty tensor is always contiguous)
        return
    if not tensor.is_contiguous():
        raise ValueError("the naive all-reduce needs a contiguous tensor")
    flat = tensor.view(-1)
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

    benchmark.bench_ddp times it against torch's DistributedDataParallel.
    Example: `bucketed_ddp()(model, bucket_cap_mb=4)` on every rank.
    """
    return _solution(LAB04_SOLUTION, "BucketedDDP")
