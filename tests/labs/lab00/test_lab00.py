"""Lab 00: what its solution shows when run (read from the session's grading run), and what its corpus proves.

The structure checks and the grading of every lab are in tests/test_structure.py and tests/test_grading.py.
"""

from __future__ import annotations

import ast
import re
import sqlite3
from collections.abc import Callable

import numpy as np
import pytest

from tests.common import HIDDEN, GradingRun, autograded, graded_cells, notebook, source
from tests.corpus.common import solution_notebook

ASSIGNMENT = "00_ranks_and_alpha_beta"
NUMBER = r"(-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)"  # a minus sign too: a negative fit must fail below, not vanish


def outputs(grading: GradingRun, cell_id: str) -> str:
    """The printed text of one cell of the autograded solution."""
    [nb] = autograded(grading, ASSIGNMENT, "solution")
    [cell] = [c for c in nb["cells"] if c.get("id") == cell_id]
    return "".join("".join(o.get("text", "")) for o in cell.get("outputs", []) if o["output_type"] == "stream")


def test_every_test_cell_has_hidden_tests() -> None:
    """Lab 00's visible tests are examples; each exercise is graded on more cases than the student sees."""
    cells = graded_cells(notebook(solution_notebook(ASSIGNMENT)))
    assert cells and all(HIDDEN.search(source(c)) for c in cells.values()), sorted(cells)


def test_deadlock_demo_names_where_each_rank_was_blocked(grading: GradingRun) -> None:
    report = outputs(grading, "deadlock-demo")
    for rank in (0, 1):
        assert f"rank {rank}: blocked in torch.distributed.send" in report, report


def test_experiment_measures_a_positive_alpha_and_bandwidth(grading: GradingRun) -> None:
    measured = outputs(grading, "experiment")
    alpha_us = re.search(rf"alpha\s+=\s+{NUMBER} us", measured)
    bandwidth = re.search(rf"1/beta\s+=\s+{NUMBER} GB/s", measured)
    assert alpha_us and bandwidth, f"the experiment no longer prints alpha and 1/beta:\n{measured}"
    assert float(alpha_us[1]) > 0 and float(bandwidth[1]) > 0, measured


def test_a_replaced_helper_fools_neither_nbgrader_nor_the_grader(grading: GradingRun) -> None:
    """patched_helper: its torch.equal says yes to everything. The kernel's recorder sees torch's function replaced
    at test_ring_shift's marker (nbgrader's own score is 0: before issue 43 it was full), and the grader withholds
    the cell as well (a manual score of 0), so the submission ends with the points of a wrong ring_shift."""
    query = ("SELECT g.auto_score, g.manual_score FROM grade g JOIN submitted_notebook sn ON g.notebook_id = sn.id "
             "JOIN submitted_assignment sa ON sn.assignment_id = sa.id JOIN base_cell bc ON g.cell_id = bc.id "
             "WHERE sa.student_id = 'patched_helper' AND bc.name = 'test_ring_shift'")
    with sqlite3.connect(grading.out / "gradebook.db") as con:
        [(auto, manual)] = con.execute(query).fetchall()
    assert (auto, manual) == (0.0, 0.0)
    assert "test_ring_shift did not run to its end as written" in "\n".join(
        grading.results[(ASSIGNMENT, "patched_helper")].flagged)


def _solution_cells() -> dict[str, str]:
    """id -> source of every cell of the solution notebook."""
    return {c["id"]: source(c) for c in notebook(solution_notebook(ASSIGNMENT))["cells"]}


# Fastest one-way times (s) of the FAST sweep's 8 sizes, 8 B .. 16 MB. BUSY's scatter at the small sizes turns
# exercise 0.2's reweighting against the data: pass 1 fits alpha = 0.12 ms through the fastest small messages, so
# pass 2 weighs the 16 MB point some 800 times less than those and comes out with beta < 0. QUIET resolves.
BUSY = [601e-6, 143e-6, 3374e-6, 254e-6, 724e-6, 109e-6, 631e-6, 5549e-6]
QUIET = [59e-6, 62e-6, 58e-6, 59e-6, 78e-6, 158e-6, 568e-6, 5525e-6]


def test_the_experiment_measures_again_until_a_busy_machines_times_resolve(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The experiment cell, its ranks replaced by BUSY sweeps four times and then QUIET: it pools the repeats and
    measures again until the fit resolves, printing each attempt (three attempts, as it once stopped at, fail)."""
    sweeps = [BUSY] * 4 + [QUIET]

    def launch(fn: Callable, world: int, sizes: list[int], repeats: int, timeout: float) -> list:
        assert (fn.__name__, world, len(sizes)) == ("sweep", 2, len(QUIET))
        return [([sweeps.pop(0)] * repeats, "cpu"), None]

    monkeypatch.setenv("COURSE_FAST", "1")
    cells, namespace = _solution_cells(), {}
    for cell_id in ("setup", "model-check", "fit_alpha_beta"):
        exec(cells[cell_id], namespace)
    namespace["launch"] = launch
    exec(cells["experiment"], namespace)
    printed = capsys.readouterr().out
    assert not sweeps and printed.count("; measuring again") == 4, printed
    assert "the fit gave alpha = 946 us and beta = -8.89e-11 s/B" in printed, printed
    assert np.allclose(namespace["times"], np.minimum(BUSY, QUIET)) and namespace["alpha"] > 0 and namespace["beta"] > 0


def test_ping_pong_synchronises_the_device_before_reading_the_clock() -> None:
    """On a GPU, send and recv only queue the transfers: the reference waits for the device before both readings."""
    cell = graded_cells(notebook(solution_notebook(ASSIGNMENT)), "solution")["ping_pong"]
    [fn] = [n for n in ast.parse(source(cell)).body if isinstance(n, ast.FunctionDef)]
    readings = [i for i, stmt in enumerate(fn.body) if "time.perf_counter()" in ast.unparse(stmt)
                and not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant))]  # not the docstring
    assert len(readings) == 2, [ast.unparse(fn.body[i]) for i in readings]
    for i in readings:
        before = ast.unparse(fn.body[i - 1])
        assert before == "synchronize(device)", f"no synchronize(device) before: {ast.unparse(fn.body[i])}"


def test_the_gloo_demos_stay_on_the_cpu_and_the_notebook_says_what_nccl_does() -> None:
    """The blocking-send and deadlock demos show Gloo's rendezvous on every machine; the text covers NCCL."""
    cells = _solution_cells()
    for demo in ("blocking-demo", "deadlock-demo"):
        assert 'device="cpu"' in cells[demo], f"{demo}: its tensor must stay on the CPU (Gloo) on a GPU box too"
    nccl = cells["deadlock-after-md"]
    for words in ("returns at once on the host", "synchronisation", "NCCL_DEBUG=INFO", "NCCL_ALGO"):
        assert words in nccl, f"deadlock-after-md no longer says {words!r}"
