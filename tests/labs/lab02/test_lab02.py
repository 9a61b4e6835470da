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


def pipelined_ring(grouped_at_two: bool) -> Callable[[torch.Tensor, int], None]:
    """Exercise 2.6's solution as graded (its setup cell first), or the same ring without its N = 2 branch, whose
    sends and receives with the one neighbour are then posted apart."""
    by_id = cells(json.loads(solution_notebook(ASSIGNMENT).read_text()))
    exercise = source(by_id["pipelined_ring_all_reduce"])
    if not grouped_at_two:
        branch = "    if world == 2:\n"
        assert exercise.count(branch) == 1
        exercise = exercise.replace(branch, "    if False:  # the grouped exchange, taken out\n")
    namespace = {"__name__": "lab02_pipelined_ring"}
    for code in (source(by_id["setup"]), exercise):
        exec(compile(code, ASSIGNMENT, "exec"), namespace)  # noqa: S102 (the course's own cells)
    return namespace["pipelined_ring_all_reduce"]


def _sums_on_two_ranks(grouped_at_two: bool) -> bool:
    tensor = torch.arange(37, dtype=torch.float64) * (dist.get_rank() + 1)
    pipelined_ring(grouped_at_two)(tensor, 24)  # 3 elements a segment: 7 segments per chunk
    return torch.equal(tensor, torch.arange(37, dtype=torch.float64) * 3)


def test_the_pipelined_ring_on_two_ranks_runs_under_nccl_rules_only_grouped() -> None:
    assert launch(_sums_on_two_ranks, 2, True, timeout=30, emulate="nccl") == [True, True]
    assert launch(_sums_on_two_ranks, 2, False, timeout=30) == [True, True]  # right on plain Gloo
    with pytest.raises(RankFailedError, match="NCCL would hang here: ranks 0 and 1 wait for each other"):
        launch(_sums_on_two_ranks, 2, False, timeout=30, emulate="nccl")


def _posted_before_the_first_wait() -> int:
    tensor = torch.arange(37, dtype=torch.float64)
    with Ledger() as ledger:
        pipelined_ring(grouped_at_two=True)(tensor, 24)  # 7 segments per chunk
    return ledger.waits[0][0]  # how many messages were posted when the rank first waited


def test_the_pipelined_ring_on_two_ranks_keeps_two_reduce_scatter_groups_ahead() -> None:
    """At N = 2 two groups are posted ahead, one per receive buffer: 7 segments, yet 2 sends and 2 receives before the
    first wait (a ring that waits for each group before posting the next has posted 2 messages; one that posts every
    reduce-scatter group at once, into a buffer as large as a chunk, 14)."""
    assert launch(_posted_before_the_first_wait, 2, timeout=30) == [4, 4]
