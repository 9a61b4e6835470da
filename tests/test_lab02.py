"""Lab 02: exercise 2.4's test cell, run here on its own (no grading run, a second or so): it passes the solution,
and it refuses both ways of finding the crossover numerically, each with the words that say why.

The corpus (tests/corpus/lab02.py) grades one of them, a bisection on formulas written out by hand; the other, a
bisection that calls the notebook's own ring_time and tree_time, shares the same test cell, so one submission cannot
show both: it is checked here.
"""

from __future__ import annotations

import json
import math
import numbers
import time

import numpy as np
import pytest

from autograder.cells import source
from tests.corpus.common import SOLUTION, cells, solution_notebook
from tests.corpus.lab02 import BISECTION
from utils.checks import raises_value_error

ASSIGNMENT = "02_ring_allreduce"
CALLS_THE_FORMULAS = BISECTION.replace(
    "if 2 * L * (alpha + beta * middle) < 2 * (N - 1) * (alpha + beta * middle / N):  # tree_time < ring_time",
    "if tree_time(middle, N, alpha, beta) < ring_time(middle, N, alpha, beta):")


def run_crossover_test(body: str | None) -> None:
    """Run test_crossover_size, hidden tests included, on the solution's crossover_size, or on one whose solution
    region is `body`."""
    by_id = cells(json.loads(solution_notebook(ASSIGNMENT).read_text()))
    exercise = source(by_id["crossover_size"])
    if body is not None:
        m = SOLUTION.search(exercise)
        exercise = exercise[: m.start()] + "".join(m["indent"] + line for line in body.splitlines(keepends=True))
    namespace = {"math": math, "numbers": numbers, "time": time, "np": np, "raises_value_error": raises_value_error}
    for code in (source(by_id["cost_model"]), exercise, source(by_id["test_crossover_size"])):
        exec(compile(code, ASSIGNMENT, "exec"), namespace)  # noqa: S102 (the course's own cells)


def test_the_solution_passes() -> None:
    run_crossover_test(None)


def test_a_bisection_on_the_notebooks_formulas_is_refused() -> None:
    assert CALLS_THE_FORMULAS != BISECTION
    with pytest.raises(RuntimeError, match="crossover_size called ring_time or tree_time"):
        run_crossover_test(CALLS_THE_FORMULAS)


def test_a_bisection_on_hand_written_formulas_is_refused() -> None:
    with pytest.raises(AssertionError, match=r"times as long as one evaluation of the two cost formulas"):
        run_crossover_test(BISECTION)
