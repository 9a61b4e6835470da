"""Test data whose sums are exact (a distributed result compared bit for bit with torch's), and a rank's share.

    from utils.testdata import DTYPES, my_share, sample

    x = sample((5,), torch.float32, seed=rank)       # exact sums of up to 8 such tensors, in any order
    my_share(global_x)                               # this rank's rows of a batch that every rank holds whole

A tensor of random floats sums differently in another order of addition (rounding), so a correct all-reduce and
torch's built-in would differ in the last bits; `sample` draws values whose sums have no rounding at all.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist

from utils.launch import rank_device

__all__ = ["DTYPES", "my_share", "sample"]

DTYPES = (torch.float32, torch.float64, torch.int64)  # the dtypes every collective is tested with


def sample(shape: Sequence[int] | int, dtype: torch.dtype, seed: int, device: torch.device | str | None = None,
           ) -> torch.Tensor:
    """A reproducible tensor whose sums of up to 8 such tensors are exact, in any order of addition.

    float32: multiples of 1/8 below 2**17 (20 significant bits); float64: multiples of 2**-30 below 2**15 (45
    significant bits, more than float32 holds); int64: integers below 2**40 (more than int32 holds). Drawn on the
    CPU, where the generator lives (the same numbers on every machine), and returned on `device`: by default the
    rank's device, rank_device().

    >>> x = sample((4,), torch.float32, seed=0, device="cpu")
    >>> bool(torch.all(x * 8 == torch.round(x * 8)))     # multiples of 1/8
    True
    """
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.float32:
        drawn = torch.randint(-(2**20), 2**20, shape, generator=g).to(dtype) / 8
    elif dtype == torch.float64:
        drawn = torch.randint(-(2**45), 2**45, shape, generator=g).to(dtype) / 2**30
    elif dtype == torch.int64:
        drawn = torch.randint(-(2**40), 2**40, shape, generator=g)
    else:
        raise ValueError(f"sample makes {[str(d) for d in DTYPES]}, not {dtype}")
    return drawn.to(rank_device() if device is None else device)


def my_share(batch: torch.Tensor) -> torch.Tensor:
    """This rank's rows of a global batch that every rank holds: rows r b to (r + 1) b - 1, b = len(batch) // N.

    A view, no copy. Equal shares only: with N not dividing the batch, the last len(batch) % N rows belong to no
    rank (the tests' batches divide evenly; lab 03's `shard` is how uneven batches are split). Default group.
    """
    b = len(batch) // dist.get_world_size()
    return batch[dist.get_rank() * b:(dist.get_rank() + 1) * b]
