"""Lab 00's instructor notebook: its nbgrader structure, and a run from top to bottom (COURSE_FAST=1).

The nbgrader pipeline itself (release, autograde to full marks and to zero) is tested elsewhere. This file
catches what that pipeline would only show as a wrong score: a solution region that would swallow the
contract, a test cell that ends in a value or prints, anything a run writes to stderr, a report that does
not say where the deadlocked ranks were blocked.
"""

import ast
import os
import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

LAB = Path(__file__).resolve().parents[1] / "solutions" / "00_ranks_and_alpha_beta"
NOTEBOOK = LAB / "ranks_and_alpha_beta.ipynb"
EXERCISES = {"ping_pong": "0.1", "fit_alpha_beta": "0.2", "ring_shift": "0.3"}
POINTS = {"test_ping_pong": 3, "test_fit_alpha_beta": 3, "test_ring_shift": 4}


def _nbgrader(cell) -> dict:
    return cell.metadata.get("nbgrader", {})


def _cells(nb, key: str) -> dict:
    """The cells whose nbgrader metadata has `key` set, by grade_id."""
    return {_nbgrader(c)["grade_id"]: c for c in nb.cells if _nbgrader(c).get(key)}


def _without_hidden_tests(source: str) -> str:
    """What the student release keeps of a test cell (nbgrader's ClearHiddenTests drops the region)."""
    return re.sub(r"^### BEGIN HIDDEN TESTS$.*?^### END HIDDEN TESTS$\n?", "", source, flags=re.S | re.M)


@pytest.fixture(scope="module")
def notebook():
    return nbformat.read(NOTEBOOK, as_version=4)


def test_the_folder_holds_only_the_notebook():
    # nbgrader copies every file of a source assignment into the student release.
    assert sorted(p.name for p in LAB.iterdir() if not p.name.startswith(".")) == [NOTEBOOK.name]


def test_committed_without_outputs_for_the_python3_kernel(notebook):
    nbformat.validate(notebook)
    assert notebook.metadata.kernelspec.name == "python3"
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, cell.id


def test_nbgrader_metadata(notebook):
    marked = [_nbgrader(c) for c in notebook.cells if _nbgrader(c)]
    assert all(m["schema_version"] == 3 for m in marked)
    grade_ids = [m["grade_id"] for m in marked]
    assert len(grade_ids) == len(set(grade_ids)), "grade_ids must be unique"
    solutions, tests = _cells(notebook, "solution"), _cells(notebook, "grade")
    assert sorted(solutions) == sorted(EXERCISES)
    assert {gid: _nbgrader(c)["points"] for gid, c in tests.items()} == POINTS
    assert all(_nbgrader(c)["locked"] and not _nbgrader(c)["solution"] for c in tests.values())
    assert not any(_nbgrader(c)["grade"] or _nbgrader(c)["locked"] for c in solutions.values())


def test_solution_cells_keep_the_contract_and_end_in_the_stub(notebook):
    # The release replaces the region by the configured code stub: the def line and the docstring stay
    # outside it, and the line after it is what an unsolved exercise raises.
    for name, cell in _cells(notebook, "solution").items():
        before, rest = cell.source.split("    ### BEGIN SOLUTION\n")
        _, after = rest.split("    ### END SOLUTION\n")
        assert ast.get_docstring(ast.parse(before + "    pass\n").body[0]), f"{name}: docstring outside the region"
        assert after == f'    raise NotImplementedError("Exercise {EXERCISES[name]}: {name}")'


@pytest.mark.parametrize("release", [False, True], ids=["source", "release"])
def test_test_cells_end_in_an_assertion_and_print_nothing(notebook, release):
    for grade_id, cell in _cells(notebook, "grade").items():
        source = _without_hidden_tests(cell.source) if release else cell.source
        assert "### BEGIN HIDDEN TESTS" in cell.source and "HIDDEN" not in _without_hidden_tests(cell.source)
        tree = ast.parse(source)
        assert isinstance(tree.body[-1], ast.Assert), f"{grade_id} must end with an assert"
        calls = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
        assert "print" not in calls, grade_id


def _text(cell) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


def test_runs_top_to_bottom(notebook):
    nb = nbformat.from_dict(notebook)  # a copy: the fixture stays the committed notebook
    client = NotebookClient(nb, timeout=150, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(LAB)}})
    client.execute(env={**os.environ, "COURSE_FAST": "1"})

    errors = [(c.id, o.ename, o.evalue) for c in nb.cells if c.cell_type == "code"
              for o in c.outputs if o.output_type == "error"]
    assert errors == []
    stderr = [(c.id, o.text) for c in nb.cells if c.cell_type == "code"
              for o in c.outputs if o.output_type == "stream" and o.name == "stderr"]
    assert stderr == [], "nbgrader scores a test cell that writes to stderr as zero"
    for grade_id, cell in _cells(nb, "grade").items():
        assert cell.outputs == [], f"{grade_id} must be silent"

    cells = {c.id: c for c in nb.cells}
    report = _text(cells["deadlock-demo"])
    for rank in (0, 1):
        assert f"rank {rank}: blocked in torch.distributed.send" in report, report
    measured = _text(cells["experiment"])
    alpha_us = float(re.search(r"alpha\s+=\s+([\d.]+) us", measured)[1])
    bandwidth = float(re.search(r"1/beta\s+=\s+([\d.]+) GB/s", measured)[1])
    assert alpha_us > 0 and bandwidth > 0, measured
