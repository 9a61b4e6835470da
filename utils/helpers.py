"""What several labs need and none of them teaches twice: test data, byte counts, timing, argument checks.

    from utils.helpers import DTYPES, nbytes, raises_value_error, sample, time_call

    x = sample((5,), torch.float32, seed=rank)       # exact sums of up to 8 such tensors, in any order
    nbytes(x)                                        # 20: what one message of x carries
    time_call(dist.all_reduce, x)                    # seconds, all ranks starting together
    raises_value_error(fit, [], [])                  # "ValueError", or what happened instead

A helper moves here once a lab has taught it (d2l's rule); the notebooks import it, and never paste it. Two of
them are an earlier lab's answers, handed out on purpose to the labs that measure with them (README, "What a later
lab gives away"): `ping_pong_time` is lab 00's exercise 0.1 without its argument checks; `fit_alpha_beta_log` fits
the same line as lab 00's exercise 0.2 by another estimator (least squares on log t), which that exercise's
contract does not accept.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from utils.launch import rank_device, synchronize

__all__ = [
    "DTYPES", "chunk_bytes", "fit_alpha_beta_log", "iters_for", "nbytes", "ping_pong_time", "raises_value_error",
    "sample", "scratch", "shift_time", "time_call",
]

DTYPES = (torch.float32, torch.float64, torch.int64)  # the dtypes every collective is tested with


def sample(shape: Sequence[int] | int, dtype: torch.dtype, seed: int, device: torch.device | str | None = None,
           ) -> torch.Tensor:
    """A reproducible tensor whose sums of up to 8 such tensors are exact, in any order of addition.

    float32: multiples of 1/8 below 2**17 (20 significant bits); float64: multiples of 2**-30 below 2**15 (45
    significant bits, more than float32 holds); int64: integers below 2**40 (more than int32 holds). Drawn on the
    CPU, where the generator lives (the same numbers on every machine), and returned on `device`: by default the
    rank's device, rank_device().
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


def nbytes(tensor: torch.Tensor) -> int:
    """Bytes of the tensor's data: what one message of it carries."""
    return tensor.numel() * tensor.element_size()


def chunk_bytes(numel: int, world: int, itemsize: int) -> list[int]:
    """Bytes of each of the N chunks of torch.tensor_split(flat, N) on `numel` elements of `itemsize` bytes.

    The first numel % N chunks have numel // N + 1 elements, the others numel // N. Example: chunk_bytes(10, 4, 4)
    is [12, 12, 8, 8].
    """
    return [(numel // world + (k < numel % world)) * itemsize for k in range(world)]


def raises_value_error(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> str:
    """"ValueError" if fn(*args, **kwargs) raises one; otherwise "no error" or the exception it raised, named."""
    try:
        fn(*args, **kwargs)
    except ValueError:
        return "ValueError"
    except Exception as error:  # noqa: BLE001 (any other outcome is reported, for the assertion's message)
        return f"{type(error).__name__}: {error}"
    return "no error"


_SCRATCH: dict[tuple[Hashable, torch.dtype, torch.device, int], torch.Tensor] = {}
_SCRATCH_KEPT = 8  # buffers kept at most: a benchmark that sweeps sizes must not hoard memory


def scratch(name: Hashable, numel: int, like: torch.Tensor) -> torch.Tensor:
    """A receive buffer of `numel` elements with `like`'s dtype and device: the same memory at every call with the
    same name, numel, dtype and device (its contents are whatever the last user left; never return it).

    Why: memory fresh from the allocator is faulted in page by page by the kernel, on every call. For a pipelined
    ring's two receive buffers that was about 10 % of its CPU time at 4-64 MB on 2 cores (N = 3 and 4).
    Example: `inbox = scratch(("ring", 0), 1024, tensor)` in one call, the same tensor in the next.
    """
    key = (name, like.dtype, like.device, numel)
    if key not in _SCRATCH:
        if len(_SCRATCH) >= _SCRATCH_KEPT:
            _SCRATCH.clear()
        _SCRATCH[key] = torch.empty(numel, dtype=like.dtype, device=like.device)
    return _SCRATCH[key]


def iters_for(nbytes: int, budget: int, lowest: int, highest: int) -> int:
    """Repetitions for a message of `nbytes`: about `budget` bytes in all, clipped to [lowest, highest].

    Small messages get more repetitions than large ones, so that every measurement takes a similar time.
    """
    return int(np.clip(budget // nbytes, lowest, highest))


def time_call(fn: Callable[[torch.Tensor], Any], tensor: torch.Tensor) -> float:
    """Seconds one call fn(tensor) takes on this rank, all ranks starting together (after a barrier).

    The device is synchronised before each reading of the clock: on a GPU a call returns before its work is done.
    """
    dist.barrier()
    synchronize(tensor.device)
    start = time.perf_counter()
    fn(tensor)
    synchronize(tensor.device)
    return time.perf_counter() - start


def shift_time(nbytes: int, iters: int) -> float:
    """Time of one ring step: every rank isends nbytes to rank + 1 and irecvs nbytes from rank - 1, at once.

    On 2 ranks that is a bidirectional exchange. One untimed step first (a warm-up); returns the mean time of
    `iters` timed steps, on every rank.
    """
    rank, world, device = dist.get_rank(), dist.get_world_size(), rank_device()
    outgoing = torch.zeros(nbytes, dtype=torch.uint8, device=device)
    incoming = torch.empty(nbytes, dtype=torch.uint8, device=device)
    for i in range(iters + 1):  # step 0 is a warm-up
        if i == 1:
            synchronize(device)
            start = time.perf_counter()
        requests = [dist.irecv(incoming, src=(rank - 1) % world), dist.isend(outgoing, dst=(rank + 1) % world)]
        for request in requests:
            request.wait()
    synchronize(device)
    return (time.perf_counter() - start) / iters


def ping_pong_time(nbytes: int, iters: int) -> float | None:
    """Lab 00's ping-pong: one-way time of an nbytes message between ranks 0 and 1, on rank 0 (None elsewhere).

    Blocking send / recv, one direction at a time; one untimed round trip first, then the mean of `iters` round
    trips halved. Ranks >= 2 take no part.
    """
    rank, device = dist.get_rank(), rank_device()
    buffer = torch.zeros(nbytes, dtype=torch.uint8, device=device)
    for i in range(iters + 1):  # round trip 0 is a warm-up
        if i == 1:
            synchronize(device)
            start = time.perf_counter()
        if rank == 0:
            dist.send(buffer, dst=1)
            dist.recv(buffer, src=1)
        elif rank == 1:
            dist.recv(buffer, src=0)
            dist.send(buffer, dst=0)
    synchronize(device)
    return (time.perf_counter() - start) / (2 * iters) if rank == 0 else None


def fit_alpha_beta_log(sizes: Sequence[float], times: Sequence[float], steps: int = 30) -> tuple[float, float]:
    """Fit t(n) = alpha + beta * n by least squares on log t: minimise sum_i (log(alpha + beta n_i) - log t_i)^2.

    A relative fit like lab 00's (a 10% error weighs the same at every size), whose weights come from the model
    by construction; it estimates the median time where lab 00's reweighted fit estimates the mean. Gauss-Newton
    from the line through the fastest and the slowest point, halving a step that would make the model non-positive.

    Raises:
        ValueError: lengths differ, fewer than 2 distinct sizes, or a time <= 0.
    """
    n, t = np.asarray(sizes, dtype=np.float64).ravel(), np.asarray(times, dtype=np.float64).ravel()
    if n.shape != t.shape or np.unique(n).size < 2 or not np.all(t > 0):
        raise ValueError("need equally many sizes and times, at least 2 distinct sizes, and every time > 0")
    lo, hi = np.argmin(n), np.argmax(n)
    beta = max((t[hi] - t[lo]) / (n[hi] - n[lo]), 1e-3 * t[hi] / n[hi])  # a positive slope to start from
    x = np.array([max(t[lo] - beta * n[lo], 1e-3 * t[lo]), beta])
    scale = np.array([1.0, 1.0 / n.max()])  # alpha and beta * n_max are of similar size
    for _ in range(steps):
        m = x[0] + x[1] * n
        jacobian = np.stack([1 / m, n / m], axis=1) / scale  # d log m / d (x / scale)
        step, *_ = np.linalg.lstsq(jacobian, np.log(t) - np.log(m), rcond=None)
        step /= scale
        while np.any(x[0] + step[0] + (x[1] + step[1]) * n <= 0):
            step /= 2
        x = x + step
        if np.all(np.abs(step) <= 1e-12 * np.abs(x)):
            break
    return float(x[0]), float(x[1])
