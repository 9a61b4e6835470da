"""Lab 02: exercise 2.4's test cell, run here on its own (no grading run, a second or so): it passes the solution,
and it refuses both ways of finding the crossover numerically, each with the words that say why. And exercise 2.6
on 2 ranks under NCCL's rules: the solution's grouped exchange with its one neighbour passes, the same ring with
that exchange ungrouped is refused (a few seconds), and it posts every reduce-scatter group before it waits for the
first, so that adding one segment overlaps the transfers of the next ones.

The corpus (tests/labs/lab02/corpus.py) grades one of them, a bisection on formulas written out by hand; the other, a
bisection that calls the notebook's own ring_time and tree_time, shares the same test cell, so one submission cannot
show both: it is checked here.
"""

from __future__ import annotations

import json
import math
import numbers
import time
from collections.abc import Callable

import numpy as np
import pytest
import torch
import torch.distributed as dist

from nbplumbing.cells import source
from tests.corpus.common import SOLUTION, cells, solution_notebook
from tests.labs.lab02.corpus import BISECTION
from utils.checks import raises_value_error
from utils.launch import RankFailedError, launch
from utils.p2p_ledger import Ledger

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
    with pytest.raises(AssertionError, match=r"a search over a fixed range of sizes misses M\*"):
        run_crossover_test(BISECTION)


# Exercise 2.6's solution changed at N = 2: its branch taken out (the sends and receives with the one neighbour then
# go apart on one group), or each rank posting its send first on the two one-way groups (rank 0's first operation is
# then on the 0 -> 1 group, rank 1's on the 1 -> 0 group).
MUTANTS = {"one queue": ("    if world == 2:\n", "    if False:  # the N = 2 branch, taken out\n"),
           "own order": ("for g in sorted(calls)]", "for g in calls]")}


def pipelined_ring(mutant: str | None = None) -> Callable[[torch.Tensor, int], None]:
    """Exercise 2.6's solution as graded (its setup cell first), or one of MUTANTS."""
    by_id = cells(json.loads(solution_notebook(ASSIGNMENT).read_text()))
    exercise = source(by_id["pipelined_ring_all_reduce"])
    if mutant is not None:
        original, changed = MUTANTS[mutant]
        assert exercise.count(original) == 1, mutant
        exercise = exercise.replace(original, changed)
    namespace = {"__name__": "lab02_pipelined_ring"}
    for code in (source(by_id["setup"]), exercise):
        exec(compile(code, ASSIGNMENT, "exec"), namespace)  # noqa: S102 (the course's own cells)
    return namespace["pipelined_ring_all_reduce"]


def _sums_on_two_ranks(mutant: str | None) -> bool:
    tensor = torch.arange(37, dtype=torch.float64) * (dist.get_rank() + 1)
    pipelined_ring(mutant)(tensor, 24)  # 3 elements a segment: 7 segments per chunk
    return torch.equal(tensor, torch.arange(37, dtype=torch.float64) * 3)


@pytest.mark.parametrize(("mutant", "refused"), [
    ("one queue", "NCCL would hang here: ranks 0 and 1 wait for each other"),
    ("own order", "ranks [01] and [01] post on two groups in different orders: entry 0 between them is on group")])
def test_the_pipelined_ring_on_two_ranks_runs_under_nccl_rules_only_one_way_in_one_order(mutant: str,
                                                                                       refused: str) -> None:
    """The solution runs under NCCL's rules at N = 2; each mutant is right on plain Gloo and refused under them."""
    assert launch(_sums_on_two_ranks, 2, None, timeout=30, emulate="nccl") == [True, True]
    assert launch(_sums_on_two_ranks, 2, mutant, timeout=30) == [True, True]
    with pytest.raises(RankFailedError, match=refused):
        launch(_sums_on_two_ranks, 2, mutant, timeout=30, emulate="nccl")


def _posted_before_the_first_wait() -> int:
    tensor = torch.arange(37, dtype=torch.float64)
    with Ledger() as ledger:
        pipelined_ring()(tensor, 24)  # 7 segments per chunk
    return ledger.waits[0][0]  # how many messages were posted when the rank first waited


def test_the_pipelined_ring_on_two_ranks_keeps_two_reduce_scatter_segments_ahead() -> None:
    """At N = 2 two reduce-scatter segments are posted ahead, one per receive buffer: 7 segments, yet 2 sends and 2
    receives before the first wait (a ring that waits for each segment before posting the next has posted 2
    messages; one that posts every reduce-scatter segment at once, into a buffer as large as a chunk, 14)."""
    assert launch(_posted_before_the_first_wait, 2, timeout=30) == [4, 4]
