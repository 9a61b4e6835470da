"""The derivation exercises' time budgets, measured: does utils.checks.SEARCH pass every right answer and no walk?

    python -m tests.measure_speed_checks [RUNS]      (default 20; two spinning processes keep both cores busy)

Each exercise whose test times it (1.8, 1.9, 2.4, 3.0, 4.1, 7.1, 8.1, 8.2, 8.3) is timed here as its test times it:
utils.checks.slowdown, the test's reference and the test's cases, copied from the test cell. Each is written five
ways that a right answer may take: as the solution writes it; with exact fractions.Fraction; with a validation loop
that checks every input (each element of a list too) with isinstance; with NumPy scalars; with `math`'s functions. And
two ways that are not a closed form: a walk of what the formula counts (rank by rank, step by step, sample by sample),
which the budget must refuse, and, where the result can be found that way, a bisection or a search over a closed form
of the cost, which no time budget can tell from a formula (it costs a few dozen evaluations): the oracle's functions
raising while the exercise runs is what stands against it, and these lines say how far it lands.
Printed: per exercise and way, the smallest, median and largest ratio over RUNS runs and how many passed SEARCH.
The exercises without a time budget (0.4, 5.0, 5.3, 6.3, 6.4) are not timed by their tests: nothing here to measure.
"""

from __future__ import annotations

import math
import multiprocessing
import numbers
import statistics
import sys
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np

from utils.checks import SEARCH, exact_operations, slowdown

COLLECTIVES = ("broadcast", "scatter", "gather", "all_gather", "reduce_scatter", "all_reduce")
PIECES = {"broadcast": (0, 1), "scatter": (0, 1), "gather": (0, 1), "all_gather": (1, 1), "reduce_scatter": (1, 1),
          "all_reduce": (1, 2)}  # (the power of N, the factor) of N - 1 pieces


def checked(*values: Any) -> None:
    """A validation loop over the inputs, as a careful student writes one: every number, every element of a list."""
    for value in values:
        for v in (value if isinstance(value, list) else [value]):
            if isinstance(v, bool) or not isinstance(v, (numbers.Real, str)):
                raise ValueError(f"not a number: {v!r}")


# 1.8 and 1.9: the floors, and a walk that counts rank by rank what each rank must receive
def traffic(num: Callable, collective: str, N: int, m: int) -> int:
    power, factor = PIECES[collective]
    return int(num(factor) * num(N) ** power * (num(N) - 1) * num(m))


def traffic_math(collective: str, N: int, m: int) -> int:
    power, factor = PIECES[collective]
    return math.prod((factor, N ** power, N - 1, m))


def traffic_walk(collective: str, N: int, m: int) -> int:
    power, factor = PIECES[collective]
    return sum(factor * (N - 1 if power else 1) * m for _ in range(N if power else N - 1))


def traffic_lookup(collective: str, N: int, piece_bytes: int) -> int:  # the test's reference
    if isinstance(N, bool) or not isinstance(N, numbers.Integral) or N < 1 or piece_bytes < 0:
        raise ValueError(f"N={N!r}, piece_bytes={piece_bytes!r}")
    return dict.fromkeys(COLLECTIVES, 1)[collective] * N * piece_bytes


def messages(num: Callable, collective: str, N: int) -> int:
    return int((num(1) if PIECES[collective][0] == 0 else num(2)) * (num(N) - 1))


def messages_math(collective: str, N: int) -> int:
    return math.prod((1 if PIECES[collective][0] == 0 else 2, N - 1))


def messages_walk(collective: str, N: int) -> int:
    return sum(1 if PIECES[collective][0] == 0 else 2 for _ in range(N - 1))


def messages_lookup(collective: str, N: int) -> int:
    if isinstance(N, bool) or not isinstance(N, numbers.Integral) or N < 1:
        raise ValueError(f"N={N!r}")
    return dict.fromkeys(COLLECTIVES, 1)[collective] * N


# 2.4: the crossover; a bisection on the two formulas, in log space, to 12 digits
def ring(M: float, N: int, alpha: float, beta: float) -> float:
    return 2 * (N - 1) * (alpha + beta * M / N)


def tree(M: float, N: int, alpha: float, beta: float) -> float:
    return 2 * math.ceil(math.log2(N)) * (alpha + beta * M)


def crossover(num: Callable, N: int, alpha: float, beta: float) -> float:
    L = (int(N) - 1).bit_length()
    n = num(N)
    return float(num(alpha) / num(beta) * n * (n - 1 - L) / (n * L - n + 1))


def crossover_math(N: int, alpha: float, beta: float) -> float:
    L = math.ceil(math.log2(N))
    return math.prod((alpha / beta, N, N - 1 - L)) / math.fsum((N * L, -N, 1))


def crossover_bisection(N: int, alpha: float, beta: float) -> float:
    low, high = -700.0, 700.0  # ln M
    while high - low > 1e-13:
        middle = (low + high) / 2
        M = math.exp(middle)
        if 2 * (N - 1) * (alpha + beta * M / N) > 2 * math.ceil(math.log2(N)) * (alpha + beta * M):
            low = middle
        else:
            high = middle
    return math.exp(low)


def both_formulas(N: int, alpha: float, beta: float) -> float:
    return ring(1e3, N, alpha, beta) - tree(1e3, N, alpha, beta)


# 3.0: c = h_SGD + h_DP; a walk of the sums, sample by sample
def rounding(num: Callable, sizes: list[int], k: int) -> int:
    total = sum((num(b) for b in sizes), num(0))
    return int(num(k) + total - 1 + num(k) + max(sizes) - 1 + 2 + len(sizes) - 1)


def rounding_math(sizes: list[int], k: int) -> int:
    return math.fsum(sizes).__int__() + 2 * k + max(sizes) + len(sizes) - 1


def rounding_walk(sizes: list[int], k: int) -> int:
    depth = k
    for b in sizes:
        for _ in range(b):
            depth += 1
    return depth - 1 + k + max(sizes) + len(sizes)


def one_pass(sizes: list[int], chain: int) -> int:
    total = chain
    for b in sizes:
        total += b
    return total


# 4.1: K* and T(K*); a scan of K over the closed-form T; a ternary search over it
def step(C: float, M: float, K: int, alpha: float, beta: float) -> float:
    return float(max(C / K + K * alpha + beta * M, C + alpha + beta * M / K))


def bucket(num: Callable, C: float, M: float, alpha: float, beta: float) -> tuple[int, float]:
    C, M, alpha, beta = num(C), num(M), num(alpha), num(beta)
    D = C - beta * M
    real = D / alpha if D >= alpha and D * D >= alpha * C else max(num(1), num(float(C / alpha) ** 0.5))
    K = min((max(1, math.floor(real)), math.ceil(real)), key=lambda k: step(C, M, k, alpha, beta))
    return int(K), step(C, M, K, alpha, beta)


def bucket_math(C: float, M: float, alpha: float, beta: float) -> tuple[int, float]:
    D = C - beta * M
    real = D / alpha if D >= max(alpha, math.sqrt(alpha * C)) else max(1.0, math.sqrt(C / alpha))
    K = min((max(1, math.floor(real)), math.ceil(real)), key=lambda k: step(C, M, k, alpha, beta))
    return K, step(C, M, K, alpha, beta)


def bucket_scan(C: float, M: float, alpha: float, beta: float) -> tuple[int, float]:
    K = 1
    while step(C, M, K + 1, alpha, beta) < step(C, M, K, alpha, beta):
        K += 1
    return K, step(C, M, K, alpha, beta)


def bucket_ternary(C: float, M: float, alpha: float, beta: float) -> tuple[int, float]:
    low, high = 1, 2
    while step(C, M, high, alpha, beta) < step(C, M, high - 1, alpha, beta):
        high *= 2
    while high - low > 2:
        a, b = low + (high - low) // 3, high - (high - low) // 3
        if step(C, M, a, alpha, beta) <= step(C, M, b, alpha, beta):
            high = b
        else:
            low = a
    K = min(range(low, high + 1), key=lambda k: step(C, M, k, alpha, beta))
    return K, step(C, M, K, alpha, beta)


def one_bucket(C: float, M: float, alpha: float, beta: float) -> float:  # simulated_step_time with one bucket
    comm, finish = alpha + beta * M, 0.0
    for k in range(1, 2):
        finish = max(k * C, finish) + comm
    return finish


# 7.1: ZeRO's bytes per rank; the tally, element by element
REPLICATED = ((1, 1, 1), (1, 1, 0), (1, 0, 0), (0, 0, 0))  # per stage: parameter, gradient, optimizer state kept whole


def zero(num: Callable, psi: int, n: int, stage: int, p: float = 2, g: float = 2, k: float = 12) -> float:
    sizes = (num(p), num(g), num(k))
    return float(sum((s * num(psi) if whole else s * num(psi) / num(n))
                     for s, whole in zip(sizes, REPLICATED[stage], strict=True)))


def zero_math(psi: int, n: int, stage: int, p: float = 2, g: float = 2, k: float = 12) -> float:
    return math.fsum(s * psi / (1 if whole else n) for s, whole in zip((p, g, k), REPLICATED[stage], strict=True))


def zero_tally(psi: int, n: int, stage: int, p: float = 2, g: float = 2, k: float = 12) -> float:
    held = [0.0] * n
    for rank in range(n):
        for size, whole in zip((p, g, k), REPLICATED[stage], strict=True):
            for i in range(psi):
                if whole or i % n == rank:
                    held[rank] += size
    return sum(held) / n


def one_tally(*args: Any) -> float:  # the test's reference: tallied_bytes(1, 1, 0)
    return zero_tally(1, 1, 0)


# 8.1 to 8.3: FSDP's peak, traffic and prefetch batch; walks unit by unit, ring step by ring step
def peak(num: Callable, psi: int, n: int, u: int, p: int, phase: str, s: float = 16, c: float = 2,
         g: float = 2) -> float:
    return float(num(s) * num(psi) / num(n) + (1 + num(p)) * num(u) * num(c)
                 + (2 * num(u) * num(g) if phase == "backward" else 0))


def peak_math(psi: int, n: int, u: int, p: int, phase: str, s: float = 16, c: float = 2, g: float = 2) -> float:
    return math.fsum((s * psi / n, math.prod((1 + p, u, c)), math.prod((2, u, g)) if phase == "backward" else 0))


def peak_walk(psi: int, n: int, u: int, p: int, phase: str, s: float = 16, c: float = 2, g: float = 2) -> float:
    shards, highest, units = s * psi / n, 0.0, psi // u
    for i in range(units):  # unit i computing, the next p gathered
        held = shards + min(p + 1, units - i) * u * c + (2 * u * g if phase == "backward" else 0)
        highest = max(highest, held)
    return highest


def few_operations(*args: Any) -> float:
    return float(args[0] / args[1] + args[2] * args[3])


def traffic_step(num: Callable, units: list[int], n: int, c: int = 2, r: int | None = None) -> int:
    r = c if r is None else r
    return int(sum(((num(n) - 1) * num(-(-p // n)) * (2 * num(c) + num(r)) for p in units), num(0)))


def traffic_step_math(units: list[int], n: int, c: int = 2, r: int | None = None) -> int:
    r = c if r is None else r
    return sum(math.prod((n - 1, math.ceil(p / n), 2 * c + r)) for p in units)


def traffic_step_walk(units: list[int], n: int, c: int = 2, r: int | None = None) -> int:
    r = c if r is None else r
    sent = 0
    for p in units:
        for element_bytes in (c, c, r):  # two gathers and a scatter, ring step by ring step
            for _ in range(n - 1):
                sent += -(-p // n) * element_bytes
    return sent


def units_pass(units: list[int], *args: Any) -> int:
    total = 0
    for numel in units:
        total += numel
    return total


def batch(num: Callable, P: int, n: int, F: float, B: float, c: float = 2, alpha: float = 0.0) -> float:
    gather = (num(n) - 1) * (num(alpha) + num(P) * num(c) / (num(n) * num(B)))
    return float(gather * num(F) / (2 * num(P)))


def batch_math(P: int, n: int, F: float, B: float, c: float = 2, alpha: float = 0.0) -> float:
    return math.fsum((alpha, P * c / (n * B))) * (n - 1) * F / math.prod((2, P))


def batch_walk(P: int, n: int, F: float, B: float, c: float = 2, alpha: float = 0.0) -> float:
    def gather() -> float:  # the next unit's all-gather, ring step by ring step
        return sum(alpha + P * c / (n * B) for _ in range(n - 1))

    low, high = 0.0, 1.0
    while 2 * P * high / F < gather():
        high *= 2
    while high - low > 1e-12 * high:
        middle = (low + high) / 2
        low, high = (middle, high) if 2 * P * middle / F < gather() else (low, middle)
    return high


def batch_bisection(P: int, n: int, F: float, B: float, c: float = 2, alpha: float = 0.0) -> float:
    gather = (n - 1) * (alpha + P * c / (n * B))
    low, high = 0.0, 1.0
    while 2 * P * high / F < gather:
        high *= 2
    while high - low > 1e-12 * high:
        middle = (low + high) / 2
        low, high = (middle, high) if 2 * P * middle / F < gather else (low, middle)
    return high


def natural(formula: Callable, written_with_math: Callable) -> dict[str, Callable]:
    """The five ways of writing a right answer: formula(num, *args) computes with num(x) for each number x."""
    return {"as solved": lambda *a: formula(lambda x: x, *a),
            "Fraction": lambda *a: formula(Fraction, *a),
            "validated": lambda *a: (checked(*a), formula(lambda x: x, *a))[1],
            "NumPy scalars": lambda *a: formula(lambda x: np.float64(x) if isinstance(x, float) else np.int64(x), *a),
            "math": written_with_math}


# name: (the test's cases, the right answers, the walk, a search over a closed form or None)
EXERCISES: dict[str, tuple] = {
    "1.8 minimum_traffic": ([("all_gather", 10**6 + i, 4) for i in range(700)], natural(traffic, traffic_math),
                            traffic_walk, None),
    "1.9 minimum_messages": ([("all_gather", 10**6 + i) for i in range(700)], natural(messages, messages_math),
                             messages_walk, None),
    "2.4 crossover_size": ([(1000 + i, 1e-6, 1e-9) for i in range(700)], natural(crossover, crossover_math), None,
                           crossover_bisection),
    "3.0 rounding_constant": ([([10**6] * 10 + [i], 7) for i in range(700)], natural(rounding, rounding_math),
                              rounding_walk, None),
    "4.1 best_bucket_count": ([(1e12 + i, 1.0, 1.0, 1e12) for i in range(700)], natural(bucket, bucket_math),
                              bucket_scan, bucket_ternary),
    "7.1 memory_per_rank": ([(6400 + i, 64, 1) for i in range(700)], natural(zero, zero_math), zero_tally, None),
    "8.1 peak_bytes": ([(10**9 + i, 8, 1000, 1, "backward") for i in range(700)], natural(peak, peak_math), peak_walk,
                       None),
    "8.2 step_traffic": ([([1000 + i], 10**6) for i in range(700)], natural(traffic_step, traffic_step_math),
                         traffic_step_walk, None),
    "8.3 prefetch_batch": ([(10**6 + i, 10**5, 4e14, 5e10, 2, 2**-16) for i in range(700)], natural(batch, batch_math),
                           batch_walk, batch_bisection),
}


def spin() -> None:  # a busy core
    while True:
        pass


def main(runs: int) -> None:
    for cases, right, walk, search in EXERCISES.values():  # the ways agree before any is timed
        for args in cases[:3]:
            answers = [np.ravel(f(*args))[-1] for f in (*right.values(), *(g for g in (walk, search) if g))]
            assert all(math.isclose(a, answers[0], rel_tol=1e-9) for a in answers), answers  # T(K*) for 4.1
    busy = [multiprocessing.get_context("fork").Process(target=spin, daemon=True) for _ in range(2)]
    for process in busy:
        process.start()
    try:
        print(f"SEARCH = {SEARCH}; {runs} runs each, two spinning processes beside")
        for name, (cases, right, walk, search) in EXERCISES.items():
            ways = dict(right) | ({"a walk (refused)": walk} if walk else {}) | (
                {"a search over a closed form (not timed out)": search} if search else {})
            for way, fn in ways.items():
                ratios = [slowdown(fn, exact_operations, cases) for _ in range(runs)]
                passed = sum(r < SEARCH for r in ratios)
                print(f"{name:22} {way:44} min {min(ratios):9.1f}  median {statistics.median(ratios):9.1f}  "
                      f"max {max(ratios):9.1f}  passed {passed}/{runs}", flush=True)
    finally:
        for process in busy:
            process.kill()
            process.join()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20)
