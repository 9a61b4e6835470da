"""Argument checks, as a test states them: did the call raise the ValueError its contract promises?

    from utils.checks import raises_value_error

    assert raises_value_error(fit, [], []) == "ValueError"   # else the message says what happened instead

    problems = refusals(broadcast, {"src=-1": {"tensor": t, "src": -1}}, f"rank {rank}")  # [] if it raised
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["raises_value_error", "refusals"]


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
