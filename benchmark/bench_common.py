"""What both sections of `make bench` share: the order of an interleaved repetition, paired ratios, the CSV files."""

from __future__ import annotations

import csv
import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path


def interleaving(names: Sequence[str], repetition: int) -> list[str]:
    """The order in which `names` run in repetition `repetition`: a balanced Latin square (Williams' design).

    Every name runs right after every other one equally often: once in every n repetitions for an even number n of
    names, twice in every 2n for an odd n. A call can be slowed or sped up by the one right before it (the state it
    leaves in the sockets and the caches): measured on 2 cores with two copies of one ring, the copy that always ran
    right after the built-in lost 3-8 % against the other. A plain rotation (each repetition starting one further)
    keeps that neighbour: b runs right after a in every repetition but the one that starts with b.

    >>> [interleaving(["a", "b", "c"], r) for r in range(3)]  # then the same three rows reversed
    [['a', 'b', 'c'], ['b', 'c', 'a'], ['c', 'a', 'b']]
    >>> [interleaving(["a", "b", "c", "d"], r) for r in range(4)]
    [['a', 'b', 'd', 'c'], ['b', 'c', 'a', 'd'], ['c', 'd', 'b', 'a'], ['d', 'a', 'c', 'b']]
    """
    n = len(names)
    first = [0]  # Williams' first row: 0, 1, n-1, 2, n-2, ...
    for j in range(1, n):
        first.append((j + 1) // 2 if j % 2 else n - j // 2)
    row = repetition % (2 * n if n % 2 else n)
    order = [names[(i + row) % n] for i in first]
    return order[::-1] if row >= n else order


def paired_ratio(numerators: Sequence[float], denominators: Sequence[float]) -> float:
    """The median over repetitions of numerator / denominator within each repetition.

    The two calls of a pair ran moments apart: load that drifts over seconds cancels in each pair instead of
    widening both medians. Example: [1, 2, 3] over [2, 2, 2] gives median(0.5, 1, 1.5) = 1.
    """
    return statistics.median(n / d for n, d in zip(numerators, denominators, strict=True))


def write_csv(rows: Iterable[dict], columns: Sequence[str], path: Path) -> None:
    """`rows` under the header `columns` (other keys left out), floats with 6 significant digits."""
    with open(path, "w", newline="") as f:
        table = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        table.writeheader()
        for r in rows:
            table.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
