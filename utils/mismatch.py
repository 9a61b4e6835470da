"""What a failing test tells a student: what was expected, what came instead, where, and the likely mistake.

    from utils.mismatch import Problems, assert_no_problems

    def cases() -> list[str]:                      # on every rank, e.g. through utils.launch.launch
        problems = Problems()
        got = my_all_reduce(x.clone())
        problems.compare(got, expected, f"N={world} rank {rank}", world=world, original=x)
        problems.require(ledger.totals() == want, f"N={world} rank {rank}", f"traffic {ledger.totals()}")
        return problems.lines                      # plain strings: they come back from a rank by value

    assert_no_problems(launch(cases, 3, timeout=20))  # every rank's lines, one message

A difference is described at its first differing element, with both values, how many elements differ and by
how much at most; a wrong shape, dtype or length is named as such before any value is compared. Where the got
value matches a known mistake (N times the expected: summed, not averaged; the input left as it was; zeros),
the sentence says so, and a test may add the mistakes it knows about its own exercise as `hints`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

# A known mistake: a test of (got, expected) and the words that name it.
Hint = tuple[Callable[[torch.Tensor, torch.Tensor], bool], str]


def _as_tensor(value: Any) -> torch.Tensor:
    """A tensor on the CPU (numbers, NumPy arrays and nested lists of numbers too)."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    return torch.as_tensor(value)


def _fmt(value: float | int | bool) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _index(flat: int, shape: tuple[int, ...]) -> str:
    """The multi-index of a flat position: [2, 1] in a (3, 2) tensor for position 5."""
    parts = []
    for size in reversed(shape):
        parts.append(flat % size)
        flat //= size
    return "[" + ", ".join(map(str, reversed(parts))) + "]"


def _differing(got: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float) -> torch.Tensor:
    """A boolean mask of the elements that differ beyond atol + rtol * |expected| (exactly, for integers)."""
    if not (got.is_floating_point() or got.is_complex()) and atol == rtol == 0:
        return got != expected
    g, e = got.to(torch.float64), expected.to(torch.float64)
    same_nan = torch.isnan(g) & torch.isnan(e)
    return ~same_nan & ~((g - e).abs() <= atol + rtol * e.abs())


def first_difference(got: Any, expected: Any, *, atol: float = 0.0, rtol: float = 0.0) -> str | None:
    """None if `got` equals `expected` (within atol + rtol * |expected|), else where and how they first differ.

    Tensors, numbers and NumPy arrays are compared elementwise (shape and dtype first); lists and tuples item
    by item, naming the first differing item.

    >>> first_difference(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, 2.0, 3.0])) is None
    True
    >>> print(first_difference(torch.tensor([[1, 2], [3, 5]]), torch.tensor([[1, 2], [3, 4]])))
    element [1, 1]: expected 4, got 5 (1 of 4 elements differ)
    >>> print(first_difference([torch.zeros(2), torch.ones(2)], [torch.zeros(2), torch.zeros(2)]))
    item 1: element [0]: expected 0, got 1 (2 of 2 elements differ, by up to 1)
    >>> print(first_difference(torch.zeros(3), torch.zeros(4)))
    shape (3,), expected (4,)
    """
    if isinstance(expected, (list, tuple)):
        if not isinstance(got, (list, tuple)) or len(got) != len(expected):
            length = len(got) if isinstance(got, (list, tuple)) else type(got).__name__
            return f"{length} items, expected {len(expected)}"
        for i, (g, e) in enumerate(zip(got, expected, strict=True)):
            if (found := first_difference(g, e, atol=atol, rtol=rtol)) is not None:
                return f"item {i}: {found}"
        return None
    g, e = _as_tensor(got), _as_tensor(expected)
    if g.shape != e.shape:
        return f"shape {tuple(g.shape)}, expected {tuple(e.shape)}"
    if isinstance(got, torch.Tensor) and isinstance(expected, torch.Tensor) and g.dtype != e.dtype:
        return f"dtype {g.dtype}, expected {e.dtype}"
    mask = _differing(g, e, atol, rtol).reshape(-1)
    count = int(mask.sum())
    if count == 0:
        return None
    at = int(mask.nonzero()[0])
    gv, ev = g.reshape(-1)[at].item(), e.reshape(-1)[at].item()
    where = f"element {_index(at, tuple(g.shape))}: " if g.dim() else ""
    spread = ""
    if count > 1 and (g.is_floating_point() or e.is_floating_point()):
        largest = (g.to(torch.float64) - e.to(torch.float64)).abs().reshape(-1)[mask].nan_to_num(math.inf).max()
        spread = f", by up to {_fmt(float(largest))}"
    total = f" ({count} of {g.numel()} elements differ{spread})" if g.dim() else ""
    return f"{where}expected {_fmt(ev)}, got {_fmt(gv)}{total}"


def scale_of(got: Any, expected: Any) -> float | None:
    """The factor c with got == c * expected (to float32 rounding), or None if there is none.

    >>> scale_of(torch.tensor([2.0, 4.0]), torch.tensor([1.0, 2.0]))
    2.0
    >>> scale_of(torch.tensor([2.0, 5.0]), torch.tensor([1.0, 2.0])) is None
    True
    """
    g, e = _as_tensor(got).to(torch.float64).reshape(-1), _as_tensor(expected).to(torch.float64).reshape(-1)
    if g.shape != e.shape or not bool(e.abs().sum() > 0):
        return None
    c = float(g @ e / (e @ e))
    if not math.isfinite(c) or not torch.allclose(g, c * e, rtol=1e-5, atol=1e-6 * float(e.abs().max())):
        return None
    return round(c, 6)


def likely_mistake(got: Any, expected: Any, *, world: int | None = None, original: Any = None,
                   hints: Sequence[Hint] = ()) -> str | None:
    """The mistake that turns `expected` into `got`, among the ones a test knows, or None.

    `hints` are the exercise's own (checked first); then: the input left as it was (`original`), all zeros,
    N times or 1/N times the expected (`world` = N), the negated result.

    >>> likely_mistake(torch.tensor([6.0, 9.0]), torch.tensor([2.0, 3.0]), world=3)
    'got is 3 (= N) times the expected: summed, not averaged?'
    >>> likely_mistake(torch.zeros(2), torch.ones(2))
    'got is all zeros: the result was never written into the tensor (written into a copy?)'
    """
    g, e = _as_tensor(got), _as_tensor(expected)
    if g.shape != e.shape:
        return None
    for test, words in hints:
        if test(g, e):
            return words
    if original is not None and first_difference(g, _as_tensor(original)) is None:
        return "got is the input as it was: nothing was written into the tensor in place?"
    if not bool(g.any()) and bool(e.any()):
        return "got is all zeros: the result was never written into the tensor (written into a copy?)"
    c = scale_of(g, e)
    if c is None or world is None or world < 2:
        return "got is the negated expected value: a sign error?" if c == -1 else None
    if math.isclose(c, world, rel_tol=1e-4):
        return f"got is {world} (= N) times the expected: summed, not averaged?"
    if math.isclose(c, 1 / world, rel_tol=1e-4):
        return f"got is 1/{world} (= 1/N) of the expected: divided by N once too often?"
    return None


def describe(got: Any, expected: Any, where: str, *, atol: float = 0.0, rtol: float = 0.0, world: int | None = None,
             original: Any = None, hints: Sequence[Hint] = ()) -> str | None:
    """None if `got` equals `expected`, else the sentence "<where>: <first difference>[; <likely mistake>]".

    For a test that collects its problems in a plain list:

        sentence = describe(tensor, expected, f"N={world} rank {rank}", world=world)
        found += [] if sentence is None else [sentence]

    >>> describe(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0]), "rank 0") is None
    True
    >>> print(describe(torch.tensor([0, 5]), torch.tensor([0, 4]), "rank 1"))
    rank 1: element [1]: expected 4, got 5 (1 of 2 elements differ)
    """
    found = first_difference(got, expected, atol=atol, rtol=rtol)
    if found is None:
        return None
    mistake = None
    if not isinstance(expected, (list, tuple)):
        mistake = likely_mistake(got, expected, world=world, original=original, hints=hints)
    return f"{where}: {found}" + (f"; {mistake}" if mistake else "")


@dataclass
class Problems:
    """The problems one test found, as sentences "<where>: <what>", in the order found.

    `lines` is a plain list of strings, so a rank can return it through `launch`.
    """

    lines: list[str] = field(default_factory=list)

    def compare(self, got: Any, expected: Any, where: str, *, atol: float = 0.0, rtol: float = 0.0,
                world: int | None = None, original: Any = None, hints: Sequence[Hint] = ()) -> bool:
        """Record a problem if `got` differs from `expected`; return whether they agreed.

        >>> p = Problems()
        >>> p.compare(torch.tensor([2.0, 4.0]), torch.tensor([1.0, 2.0]), "N=2 rank 0", world=2)
        False
        >>> for part in p.lines[0].split("; "): print(part)
        N=2 rank 0: element [0]: expected 1, got 2 (2 of 2 elements differ, by up to 2)
        got is 2 (= N) times the expected: summed, not averaged?
        """
        sentence = describe(got, expected, where, atol=atol, rtol=rtol, world=world, original=original, hints=hints)
        if sentence is not None:
            self.lines.append(sentence)
        return sentence is None

    def require(self, ok: bool, where: str, what: str) -> bool:
        """Record "<where>: <what>" unless `ok`; return `ok`."""
        if not ok:
            self.lines.append(f"{where}: {what}")
        return ok

    def __bool__(self) -> bool:
        return bool(self.lines)


def summary(lines: Sequence[str], limit: int = 8) -> str:
    """The message of a failing test: how many problems, then the first `limit` of them, one per line.

    >>> print(summary(["N=2 rank 0: expected 1, got 2", "N=2 rank 1: expected 1, got 2", "N=3 rank 0: ..."], 2))
    3 problems; the first 2:
      N=2 rank 0: expected 1, got 2
      N=2 rank 1: expected 1, got 2
    """
    lines = list(lines)
    if len(lines) == 1:
        return lines[0]
    head = f"{len(lines)} problems" + (f"; the first {limit}:" if len(lines) > limit else ":")
    return "\n  ".join([head, *lines[:limit]])


def assert_no_problems(per_rank: Sequence[Sequence[str]]) -> None:
    """Pass when no rank found a problem; else fail with summary() of all of them, rank 0's first.

    `per_rank` is what utils.launch.launch returns for a function that returns its Problems' lines on every rank.

    >>> assert_no_problems([[], []])
    >>> assert_no_problems([["N=2 rank 0: expected 1, got 2"], ["N=2 rank 1: expected 1, got 2"]])
    Traceback (most recent call last):
        ...
    AssertionError: 2 problems:
      N=2 rank 0: expected 1, got 2
      N=2 rank 1: expected 1, got 2
    """
    found = [line for lines in per_rank for line in lines]
    if found:
        raise AssertionError(summary(found))
