"""utils.testdata, memory, checks and timing: exact test data, byte counts, the value-error check, the time budget of
a derivation, repetition counts, the log-space fit and measuring again until a fit resolves.

Pure Python, no processes: well under a second. The timing helpers run in every lab 02 grading.
"""

from __future__ import annotations

import functools
import itertools
import signal
import time
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from utils import timing
from utils.checks import raises_value_error, slowdown
from utils.memory import chunk_bytes, nbytes
from utils.testdata import DTYPES, sample
from utils.timing import fit_alpha_beta_log, iters_for, until_resolved


@pytest.mark.parametrize("dtype", DTYPES)
def test_sums_of_eight_samples_are_exact_in_any_order(dtype: torch.dtype) -> None:
    tensors = [sample((50,), dtype, seed=s, device="cpu") for s in range(8)]
    sums = {tuple(sum(order[1:], order[0]).tolist()) for order in itertools.islice(itertools.permutations(tensors), 50)}
    assert len(sums) == 1
    assert torch.equal(sample((3,), dtype, seed=1, device="cpu"), sample((3,), dtype, seed=1, device="cpu"))
    with pytest.raises(ValueError):
        sample((3,), torch.float16, seed=0, device="cpu")


def test_sizes_and_repetitions() -> None:
    assert nbytes(torch.zeros(5, dtype=torch.float64)) == 40
    assert chunk_bytes(10, 4, 4) == [12, 12, 8, 8] and sum(chunk_bytes(7, 3, 8)) == 56
    assert [iters_for(n, 2**24, 5, 100) for n in (8, 2**20, 2**24, 2**30)] == [100, 16, 5, 5]


def test_raises_value_error_names_what_happened() -> None:
    def fails(kind: type[Exception]) -> None:
        raise kind("boom")

    assert raises_value_error(fails, ValueError) == "ValueError"
    assert raises_value_error(fails, KeyError) == "KeyError: 'boom'"
    assert raises_value_error(len, [1]) == "no error"


def test_slowdown_tells_a_closed_form_from_a_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    """A closed form comes out near its reference, a loop over what it counts far above any budget, cached or not and
    even once a submission has stopped time.perf_counter; a call that takes seconds is timed twice only (the runs of
    a slow walk would otherwise take minutes)."""
    def closed(n: int) -> int:
        return n * (n - 1)

    def walked(n: int) -> int:
        return sum(n - 1 for _ in range(n))

    def lookup(n: int) -> int:
        return {"n": n}["n"] * n

    cases = [(10_000 + i,) for i in range(700)]
    assert slowdown(closed, lookup, cases) < 10 < 300 < slowdown(walked, lookup, cases)
    assert slowdown(functools.cache(walked), lookup, cases) > 300  # every case is new: the cache never answers
    monkeypatch.setattr(time, "perf_counter", lambda: 0.0)  # what a submission could do before the tests run
    assert slowdown(walked, lookup, cases) > 300
    monkeypatch.undo()
    start = time.perf_counter()
    assert slowdown(time.sleep, lookup, [(0.05,), (0.051,)]) > 1000
    assert time.perf_counter() - start < 1  # two calls of 0.05 s, not 7 rounds
    assert closed(10_000) == walked(10_000)


def test_slowdown_stops_a_walk_that_would_take_minutes() -> None:
    """A call that uses more CPU time than 1000 references (at least 0.05 s) is stopped, even inside a submission's
    `except Exception`, and counts as at least 1000 times the reference; the timer is off afterwards."""
    def spins(n: int) -> int:
        try:
            while True:
                n += 1
        except Exception:  # noqa: BLE001 (what a submission may write around its loop)
            return n

    start = time.perf_counter()
    assert slowdown(spins, abs, [(i,) for i in range(700)]) >= 1000
    assert time.perf_counter() - start < 5
    assert signal.getitimer(signal.ITIMER_VIRTUAL) == (0.0, 0.0)
    assert signal.getsignal(signal.SIGVTALRM) == signal.SIG_DFL


def test_log_fit_recovers_exact_lines_and_is_unbiased_under_lognormal_noise() -> None:
    n = 2.0 ** np.arange(3, 25)
    assert np.allclose(fit_alpha_beta_log(n, 50e-6 + n / 2e9), (50e-6, 1 / 2e9), rtol=1e-9, atol=0)
    rng = np.random.default_rng(0)
    fits = np.array([fit_alpha_beta_log(n, (50e-6 + n / 2e9) * rng.lognormal(0, 0.3, n.size)) for _ in range(200)])
    bias = np.median(fits, axis=0) * (1 / 50e-6, 2e9) - 1  # the log fit estimates the median time
    assert np.all(np.abs(bias) < 0.03), bias
    for sizes, times in [([1, 2], [1.0]), ([4, 4], [1.0, 2.0]), ([1, 2], [1.0, 0.0])]:
        with pytest.raises(ValueError):
            fit_alpha_beta_log(sizes, times)


def test_until_resolved_measures_again_until_a_result_and_then_says_what_is_unresolved(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Unresolved attempts (a str) print a line each and are tried again; a result ends it; no attempt starts after
    the time limit, and the last str ends the error; an exception of an attempt is not retried."""
    now = [0.0]  # a clock that each attempt moves 10 s on
    monkeypatch.setattr(timing, "time", SimpleNamespace(perf_counter=lambda: now[0]))

    def attempt(outcomes: list) -> object:
        now[0] += 10
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    assert until_resolved(functools.partial(attempt, ["beta = -1e-10", "beta = 0", (5e-5, 5e-10)]), 60) == (5e-5, 5e-10)
    assert capsys.readouterr().out.splitlines() == ["attempt 1 (10 s): beta = -1e-10; measuring again",
                                                    "attempt 2 (20 s): beta = 0; measuring again"]
    now[0] = 0.0
    with pytest.raises(RuntimeError, match=r"^after 2 attempts in 20 s .* too busy.* The last attempt: beta = 0$"):
        until_resolved(functools.partial(attempt, ["beta = -1", "beta = 0", (1.0, 1.0)]), 15)
    outcomes = [ZeroDivisionError("a wrong fit"), (1.0, 1.0)]
    with pytest.raises(ZeroDivisionError):
        until_resolved(functools.partial(attempt, outcomes), 60)
    assert outcomes == [(1.0, 1.0)]
