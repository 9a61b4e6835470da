"""Checks, as a test states them: did the call raise the ValueError its contract promises? Is it a closed form?

    from utils.checks import raises_value_error

    assert raises_value_error(fit, [], []) == "ValueError"   # else the message says what happened instead

    problems = refusals(broadcast, {"src=-1": {"tensor": t, "src": -1}}, f"rank {rank}")  # [] if it raised

    assert slowdown(floor, lookup, [(10_000 + i,) for i in range(700)]) < SEARCH  # a derived count, not a simulation

    with oracles_refused(globals(), ["simulated_bytes"], "Exercise 10.1"):  # the oracle raises while the answer runs
        answers = [formula(*case) for case in CASES]

    with calls_refused(hooks_folder, "Exercise 10.8 (powersgd_hook)", owner="torch's "):  # fails if torch's hook ran
        future = powersgd_hook(state, bucket)
"""

from __future__ import annotations

import numbers
import os
import signal
import sys
import threading
from collections.abc import Callable, Collection, Iterator, Mapping, MutableMapping, Sequence
from contextlib import contextmanager
from fractions import Fraction
from time import perf_counter  # bound now: a submission that patches time.perf_counter later cannot stop the clock
from typing import Any

__all__ = ["SEARCH", "calls_refused", "exact_operations", "oracles_refused", "raises_value_error", "refusals",
           "slowdown"]

# The one rule of the derivation exercises' time budgets: slowdown(fn, exact_operations, cases) < SEARCH. The
# reference, exact_operations, costs what a closed form of the same arguments costs written in exact fractions (the
# most expensive natural way), and the test's cases are sized so that a simulation or a walk of what the formula
# counts costs at least 1000 times as much. A right answer written any natural way (fractions.Fraction throughout, a
# validation loop with isinstance over the inputs, NumPy scalars, math's functions) measured at most 26 times the
# reference with both cores busy, every walk at least 1000 times (tests/measure_speed_checks.py, 20 runs each;
# docs/derivations.md has the numbers): 100 sits between the two, 4 times above the one and 10 times below the other.
SEARCH = 100


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


def exact_operations(*args: Any) -> Fraction:
    """What a closed form of these arguments costs at most, written in exact arithmetic: the time budgets' reference.

    Each number of the arguments (each element of a list or a tuple too; strings and bools are skipped) becomes a
    fractions.Fraction and goes through four operations. A closed form written with Fractions throughout costs about
    as much; one written with floats, ints, NumPy scalars or `math`, a validation loop included, less.

    >>> exact_operations("all_gather", 3, [1, 2])
    Fraction(-23, 12)
    """
    total = Fraction(0)
    for value in args:
        for x in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(x, numbers.Real) and not isinstance(x, bool):
                f = Fraction(x)
                total += f * f / (f + 1) - f
    return total


class _Stopped(BaseException):  # not an Exception: a submission's `except Exception` does not swallow it
    """The CPU budget of one call ran out."""


def _cpu_bounded(fn: Callable[..., Any], args: Sequence[Any], seconds: float) -> float | None:
    """The wall time of fn(*args), or None if it used more than `seconds` of CPU time and was stopped there.

    The budget counts CPU time (setitimer's ITIMER_VIRTUAL), not wall time, so that a process waiting for a busy core
    is never stopped for it; outside the main thread, where no signal handler can be set, the call runs to its end.
    """
    def stop(signum: int, frame: Any) -> None:
        raise _Stopped

    try:
        previous = signal.signal(signal.SIGVTALRM, stop)
    except ValueError:  # not the main thread
        previous = None
    start = perf_counter()
    try:
        if previous is not None:
            signal.setitimer(signal.ITIMER_VIRTUAL, seconds)
        fn(*args)
    except _Stopped:
        return None
    finally:
        if previous is not None:
            signal.setitimer(signal.ITIMER_VIRTUAL, 0)
            signal.signal(signal.SIGVTALRM, previous)
    return perf_counter() - start


@contextmanager
def oracles_refused(namespace: MutableMapping[str, Any], names: Sequence[str], exercise: str) -> Iterator[None]:
    """Within the block, each of `names` in `namespace` (a notebook's globals) raises RuntimeError if called; after it,
    each is restored, whatever the block raised. A derivation's test runs the student's answer so: an answer that
    calls the oracle it is checked against fails, with a message that names the exercise.

    >>> space = {"oracle": abs}
    >>> with oracles_refused(space, ["oracle"], "Exercise 0.0"):
    ...     raises_value_error(space["oracle"], -1)
    'RuntimeError: Exercise 0.0 called oracle: the exercise asks for it written as a formula'
    >>> space["oracle"](-1)
    1
    """
    kept = {name: namespace[name] for name in names}

    def refused(name: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError(f"{exercise} called {name}: the exercise asks for it written as a formula")
        return call

    namespace.update({name: refused(name) for name in names})
    try:
        yield
    finally:
        namespace.update(kept)


@contextmanager
def calls_refused(folder: str, exercise: str, *, owner: str = "",
                  allowed: Collection[Callable[..., Any]] = ()) -> Iterator[None]:
    """Within the block, in this thread and in the threads started meanwhile (threading), every call of a Python
    function defined under `folder` is recorded, whatever name it was reached by (an alias, a reference captured
    earlier), except from within an `allowed` function; at the end of the block, RuntimeError names the exercise
    and the first such call (and so does a call of sys.setprofile, which would stop the recording). An exercise's test
    runs the student's code so: code that calls the library it is checked against fails, with a message that names
    the exercise. The profiler runs only within the block (it slows the calls there); callbacks that the block leaves
    to threads it did not start (a C++ thread completing a torch future) run unrecorded. Use it in a rank (through
    utils.launch), not in the notebook's kernel: the grading kernel takes any profiler armed in a test cell for
    tampering (autograder/execution.py), so there the test would not count.

    >>> import json, os
    >>> with calls_refused(os.path.dirname(json.__file__), "Exercise 0.0", owner="the library's "):
    ...     mine = json.dumps
    ...     mine([1])
    Traceback (most recent call last):
    RuntimeError: Exercise 0.0 called the library's dumps: the exercise asks for it written by you
    >>> with calls_refused(os.path.dirname(json.__file__), "Exercise 0.0"):  # in a thread started within the block
    ...     thread = threading.Thread(target=json.loads, args=["[1]"])
    ...     thread.start(); thread.join()
    Traceback (most recent call last):
    RuntimeError: Exercise 0.0 called loads: the exercise asks for it written by you
    >>> with calls_refused(os.path.dirname(json.__file__), "Exercise 0.0", allowed=[json.dumps]):
    ...     json.dumps([1])
    '[1]'
    """
    root = os.path.join(os.path.abspath(folder), "")
    exempt = {fn.__code__ for fn in allowed}
    found: list[str] = []

    def record(frame: Any, event: str, arg: Any) -> None:
        if event == "c_call" and arg is sys.setprofile and frame.f_code is not here:
            found.append("sys.setprofile: the test records what the exercise calls; leave the profiler alone")
        elif event == "call" and frame.f_code.co_filename.startswith(root) and not found:
            caller = frame
            while caller is not None and caller.f_code not in exempt:
                caller = caller.f_back
            if caller is None:  # neither this function nor one on the way to it is allowed
                found.append(f"{owner}{frame.f_code.co_qualname}: the exercise asks for it written by you")

    here = sys._getframe().f_code  # this generator's own calls of sys.setprofile, which end the recording
    previous, previous_threads = sys.getprofile(), threading.getprofile()
    sys.setprofile(record)
    threading.setprofile(record)
    try:
        yield
    finally:
        sys.setprofile(previous)
        threading.setprofile(previous_threads)
    if found:
        raise RuntimeError(f"{exercise} called {found[0]}")


def slowdown(fn: Callable[..., Any], reference: Callable[..., Any], cases: Sequence[Sequence[Any]], *,
             runs: int = 7) -> float:
    """How many times as long a call of fn takes as a call of reference, on the same arguments.

    `cases` are argument tuples, all different, so that a cache of earlier results cannot make a slow function look
    fast. They are dealt into `runs` rounds; each round times fn on its cases, then reference on the same ones, so that
    a busy moment slows both, and the fastest round of each is compared. A derivation exercise's time budget compares
    the result with SEARCH (above): a closed form comes out at a few, a simulation or a walk of what the formula
    counts at 1000 or more. The first two cases are called alone first: a call that takes more than 1000 times the
    reference is timed no further, and one that uses more CPU time than that (at least 0.05 s) is stopped there, so
    that a simulation costs the test a fraction of a second, not minutes; the ratio reached is returned.

    >>> slowdown(sum, len, [(range(100_000 + i),) for i in range(70)]) > SEARCH  # a pass over the range, against none
    True
    """
    def per_call(f: Callable[..., Any], some: Sequence[Sequence[Any]]) -> float:
        start = perf_counter()
        for args in some:
            f(*args)
        return (perf_counter() - start) / len(some)

    rounds = [cases[i::runs] for i in range(min(runs, len(cases)))]
    unit = max(min(per_call(reference, some) for some in rounds), 1e-9)
    budget = max(1000 * unit, 0.05)
    alone = [_cpu_bounded(fn, args, budget) for args in cases[:2]]
    if None in alone:
        return budget / unit
    if min(alone) > 1000 * unit:
        return min(alone) / unit
    timed = [(per_call(fn, some), per_call(reference, some)) for some in rounds]
    return min(t for t, _ in timed) / max(min(r for _, r in timed), 1e-9)
