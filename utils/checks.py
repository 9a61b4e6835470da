"""Checks, as a test states them: did the call raise the ValueError its contract promises? Is it a closed form?

    from utils.checks import raises_value_error

    assert raises_value_error(fit, [], []) == "ValueError"   # else the message says what happened instead

    problems = refusals(broadcast, {"src=-1": {"tensor": t, "src": -1}}, f"rank {rank}")  # [] if it raised

    assert slowdown(floor, lookup, [(10_000 + i,) for i in range(700)]) < 30  # a derived count, not a simulation
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from time import perf_counter  # bound now: a submission that patches time.perf_counter later cannot stop the clock
from typing import Any

__all__ = ["raises_value_error", "refusals", "slowdown"]


def raises_value_error(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> str:
    """"ValueError" if fn(*args, **kwargs) raises one; otherwise "no error" or the exception it raised, named.

    >>> raises_value_error(int, "seven")
    'ValueError'
    >>> raises_value_error(int, "7")
    'no error'
    >>> raises_value_error(int, None)
    "TypeError: int() argument must be a string, a bytes-like object or a real number, not 'NoneType'"
    """
    try:
        fn(*args, **kwargs)
    except ValueError:
        return "ValueError"
    except Exception as error:  # noqa: BLE001 (any other outcome is reported, for the assertion's message)
        return f"{type(error).__name__}: {error}"
    return "no error"


def refusals(fn: Callable[..., Any], calls: Mapping[str, Mapping[str, Any]], where: str) -> list[str]:
    """The calls fn(**kwargs) that did not raise the ValueError they owe, one sentence each; [] if all of them did.

    `calls` names each call's bad input ("src=-1") and gives its keyword arguments: the tests state their own.

    >>> from statistics import mean  # mean([]) raises a ValueError
    >>> refusals(mean, {"data=[]": {"data": []}, "data=[1]": {"data": [1]}}, "rank 0")
    ['rank 0: mean(data=[1]): expected ValueError, got no error']
    """
    outcomes = {what: raises_value_error(fn, **kwargs) for what, kwargs in calls.items()}
    name = getattr(fn, "__name__", repr(fn))
    return [f"{where}: {name}({what}): expected ValueError, got {got}" for what, got in outcomes.items()
            if got != "ValueError"]


def slowdown(fn: Callable[..., Any], reference: Callable[..., Any], cases: Sequence[Sequence[Any]], *,
             runs: int = 7) -> float:
    """How many times as long a call of fn takes as a call of reference, on the same arguments.

    `cases` are argument tuples, all different, so that a cache of earlier results cannot make a slow function look
    fast. They are dealt into `runs` rounds; each round times fn on its cases, then reference on the same ones, so that
    a busy moment slows both, and the fastest round of each is compared. A derivation exercise's time budget: the
    reference costs what a closed form of the same size costs (a table lookup, one pass over the arguments), so a
    closed form comes out at a few, and a simulation or a search of what the formula counts at hundreds or more. A
    call that takes more than 1000 times the reference, twice, is timed no further (a simulation may take seconds),
    and that ratio is returned.

    >>> slowdown(sum, len, [(range(100_000 + i),) for i in range(70)]) > 30  # a pass over the range, against none
    True
    """
    def per_call(f: Callable[..., Any], some: Sequence[Sequence[Any]]) -> float:
        start = perf_counter()
        for args in some:
            f(*args)
        return (perf_counter() - start) / len(some)

    rounds = [cases[i::runs] for i in range(min(runs, len(cases)))]
    unit = min(per_call(reference, some) for some in rounds)
    alone = min(per_call(fn, [args]) for args in cases[:2])
    if alone > 1000 * unit:
        return alone / max(unit, 1e-9)
    timed = [(per_call(fn, some), per_call(reference, some)) for some in rounds]
    return min(t for t, _ in timed) / max(min(r for _, r in timed), 1e-9)
