"""Timing: one call and one ring step on N ranks, steps timed in turns, lab 00's ping-pong, the alpha-beta fit,
and measuring again until a busy machine's timings resolve.

    from utils.timing import (fit_alpha_beta_log, interleaved_times, iters_for, ping_pong_time, shift_time,
                              time_call, until_resolved)

    time_call(dist.all_reduce, x)                    # seconds, all ranks starting together
    shift_time(2**20, iters=10)                      # one ring step of 1 MiB per rank, on every rank
    interleaved_times({"a": f, "b": g}, 5)           # {"a": [five times in s], "b": [...]}: the steps in turns
    alpha, beta = fit_alpha_beta_log(sizes, times)   # t(n) = alpha + beta n, a relative fit
    alpha, beta = until_resolved(attempt, 40)        # attempt() again (it pools) until it returns a fit, 40 s at most

Every clock reading follows utils.launch.synchronize(device): on a GPU a call returns before its work is done.
Two of these are an earlier lab's answers, handed out on purpose to the labs that measure with them
(docs/instructors.md, "What a later lab gives away"): `ping_pong_time` is lab 00's exercise 0.1 without its argument
checks; `fit_alpha_beta_log` fits the same line as lab 00's exercise 0.2 by another estimator (least squares on log
t), which that exercise's contract does not accept.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
import torch
import torch.distributed as dist

from utils.launch import rank_device, synchronize

__all__ = ["fit_alpha_beta_log", "interleaved_times", "iters_for", "ping_pong_time", "shift_time", "time_call",
           "until_resolved"]

T = TypeVar("T")


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


def interleaved_times(steps: Mapping[str, Callable[[], Any]], repeats: int) -> dict[str, list[float]]:
    """Seconds of each step() in each of `repeats` rounds, on this rank: {name: [seconds, ...]}.

    A round calls every step once, in order, each after a barrier, so that load from elsewhere slows all of them
    alike; one untimed round first (a warm-up). Called on every rank; the device is synchronised around each call.
    """
    device, times = rank_device(), {name: [] for name in steps}
    for repetition in range(repeats + 1):  # round 0 is a warm-up
        for name, step in steps.items():
            dist.barrier()
            synchronize(device)
            start = time.perf_counter()
            step()
            synchronize(device)
            if repetition:
                times[name].append(time.perf_counter() - start)
    return times


def shift_time(nbytes: int, iters: int) -> float:
    """Time of one ring step: every rank sends nbytes to rank + 1 and receives nbytes from rank - 1, as one group.

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
        # One group: at N = 2 both go to one peer, which NCCL would run one after the other (utils.nccl_rules).
        group = [dist.P2POp(dist.irecv, incoming, (rank - 1) % world),
                 dist.P2POp(dist.isend, outgoing, (rank + 1) % world)]
        for request in dist.batch_isend_irecv(group):
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


def until_resolved(attempt: Callable[[], T | str], within_s: float) -> T:
    """Call attempt() until it returns a result rather than a str; start no attempt after `within_s` seconds.

    attempt() measures once more, pooling with what it measured before (the fastest of more repeats is less
    disturbed), and returns its result, or a str that says what the timings do not resolve yet. On a busy machine
    the small messages' times scatter with the load, and a fit through them can come out with alpha < 0 or
    beta <= 0; a burst of load passes, so measuring for longer resolves what measuring three times did not. Each
    unresolved attempt prints a line (the progress); an exception of attempt() ends it at once.

    Raises:
        RuntimeError: attempt() still returned a str after `within_s` seconds; the message ends with that str.
    """
    start, number = time.perf_counter(), 0
    while True:
        number += 1
        outcome = attempt()
        if not isinstance(outcome, str):
            return outcome
        waited = time.perf_counter() - start
        if waited >= within_s:
            raise RuntimeError(f"after {number} attempts in {waited:.0f} s the timings still do not resolve alpha and "
                               "beta: the machine is too busy. Close other programs (or wait for other jobs to end) "
                               f"and run this cell again. The last attempt: {outcome}")
        print(f"attempt {number} ({waited:.0f} s): {outcome}; measuring again", flush=True)
