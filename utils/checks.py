"""Argument checks, as a test states them: did the call raise the ValueError its contract promises?

    from utils.checks import raises_value_error

    assert raises_value_error(fit, [], []) == "ValueError"   # else the message says what happened instead
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["raises_value_error"]


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
