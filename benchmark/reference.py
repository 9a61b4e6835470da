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
2.6), two reduce-scatter groups posted ahead, one per receive buffer (the same two buffers as at N >= 3): segment
k's all-gather group travels while segment k + 1 arrives and is added. Gloo's segments are 1 MiB; ours are up to
SEGMENT_BYTES = 4 MiB, because from Python every message costs far more: posting one isend or irecv takes 50-100 us
of CPU on a 2-core machine (measured), against the ~1 ms that 1 MiB takes on the wire there. Full `make bench` runs
on 2 cores (ring / built-in busbw, median over 4-64 MB, N = 3): segments of 1 MiB 0.77-0.87, 3 MiB 0.90-0.95, 4 MiB
0.91-0.98 (four to six runs each).

At N = 2 the segments are SEGMENT_BYTES_AT_TWO = 2 MiB. There each phase is one step, so what no other segment hides
is a larger share: the first segment's transfer (nothing to add yet) and the last one's all-gather (nothing left to
add); smaller segments shorten that fill and drain, at a message each. Measured on 2 cores, N = 2, with the bench's
method, ring / built-in busbw (medians of paired ratios at 4, 8, 16, 32, 64 MB), other implementations interleaved
in the same runs, on a quiet machine (the built-in took 39-51 ms at 64 MB, 77 ms in one run):

- six `make bench` runs after this change, in the bench's balanced order (bench_common.interleaving; before it, the
  ring always ran right after the built-in, which cost it 3-8 %): median over sizes 0.92, 0.90, 0.96, 1.02, 0.85,
  0.94; per size 0.72-0.83 at 4 MB, 0.82-1.13 at 8-64 MB;
- with nine implementations interleaved (three more rings), this ring 0.82-0.88 against 0.78-0.85 for the previous
  design (every reduce-scatter group posted at once, into a buffer as large as a chunk, with 1-4 MiB segments: at
  64 MB 0.74-0.77 against 0.86-0.92), which also held a chunk, M/2 bytes, of memory more per call. With few
  implementations interleaved the two are within the noise of each other (paired ratios move by 0.05-0.1 from run
  to run); 3, 4 and 8 buffers, and 1, 3 and 4 MiB segments, were not better.

So on a quiet 2-core machine this ring is about as fast as Gloo's own from 8 MB up, and slower at 4 MB.
(In the machine's slow state, where the built-in took 55 ms at 64 MB, the previous design measured 1.05-1.29 at
8-64 MB; this one was not measured there.) Where the time goes, from `perf` at 64 MB (40 calls): both move the same
bytes through the same socket, and copying them in and out is most of either's CPU time. That costs this ring about
what it costs the built-in (samples in the kernel's copies: received 2372 against 1970-2224, sent 2073 against
2229-2519; the previous design 2715-3604 and 2609-3467, its received bytes landing in a 32 MiB buffer that the cache
does not hold). Gloo writes a send in the thread that posts it when the peer's "receive posted" notice has already
arrived, else its I/O thread does: the ring's main thread writes about a third of its sends, the built-in's work
thread about 45 %. What the ring pays on top is Python, about 0.2 ms of CPU per call (main-thread CPU per call at
4 KB: 276 us against the built-in's 66 us), 5-7 % of a 4 MB all-reduce.
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

__all__ = ["SEGMENT_BYTES", "SEGMENT_BYTES_AT_TWO", "bucketed_ddp", "naive_all_reduce", "preload", "ring_all_reduce",
           "segment_for", "tree_all_reduce"]

SEGMENT_BYTES = 4 << 20  # Gloo's own ring uses 1 MiB; from Python each message costs more (see above)
SEGMENT_BYTES_AT_TWO = 2 << 20  # at N = 2 (see above)
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


def segment_for(world: int) -> int:
    """The largest message, in bytes, of the benchmark's ring on `world` ranks: SEGMENT_BYTES, at N = 2
    SEGMENT_BYTES_AT_TWO, but never above SEGMENT_BYTES (which the tests shrink, to cut chunks into many pieces).

    >>> segment_for(2) >> 10, segment_for(3) >> 10  # KiB
    (2048, 4096)
    """
    return min(SEGMENT_BYTES, SEGMENT_BYTES_AT_TWO) if world == 2 else SEGMENT_BYTES


def ring_all_reduce(tensor: torch.Tensor) -> None:
    """Sum `tensor` over all ranks, in place, with lab 02's pipelined ring, in segments of segment_for(...) bytes.

    Every rank calls it with a contiguous tensor of the same shape and dtype; any length, also shorter than
    the world size. Per rank it sends 2(N-1) chunks of about numel/N elements, each cut into equal segments.
    Example, N = 3: tensor = [r, r] on rank r -> [3, 3] on every rank.
    """
    # segment_for reads SEGMENT_BYTES at each call: a benchmark or a test may change it.
    _lab02("pipelined_ring_all_reduce")(tensor, segment_for(dist.get_world_size()))


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
