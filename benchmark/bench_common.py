"""What both sections of `make bench` share: the order of an interleaved repetition, paired ratios, the CSV files."""

from __future__ import annotations

import csv
import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path


def rotation(names: Sequence[str], repetition: int) -> list[str]:
    """`names` starting one further at each repetition, so that none always runs right after the same one.

    >>> rotation(["a", "b", "c"], 4)
    ['b', 'c', 'a']
    """
    k = repetition % len(names)
    return [*names[k:], *names[:k]]


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
