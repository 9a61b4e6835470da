"""Lab 02 (ring all-reduce): the notebook's grading structure, and a broken ring costs exactly its points.

- Structure (fast): the assignment folder holds only the notebook; every exercise has its stub, its points and
  its test cells; every launch in a graded cell has an explicit timeout well below nbgrader's cell limit; the
  graded cells print nothing; the notebook is committed without outputs.
- Mutation (one autograde of one notebook in a temporary course root, COURSE_FAST=1, about 1.5 minutes on a
  2-core machine): the solution with a `ring_all_reduce` that returns at once (wrong result, and impossibly fast)
  loses exactly the 6 points of exercise 2.1 (test_ring_all_reduce and test_ring_time) and nothing else. A
  ring that is wrong but takes realistic time would lose only test_ring_all_reduce's 4.
- tests/test_pipeline.py autogrades the solution, which runs it top to bottom, and checks no cell raised.

tests/test_pipeline.py grades the solution (full marks) and the untouched release (zero) of every lab.
Run just these with `python -m pytest tests/test_lab02.py`.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
from pathlib import Path

from autograder import pipeline

ROOT = Path(__file__).resolve().parents[1]

ASSIGNMENT = "02_ring_allreduce"
NOTEBOOK = pipeline.course_dir(ROOT, "source") / ASSIGNMENT / "ring_allreduce.ipynb"
SOLUTION = re.compile(r"(?P<indent>[ \t]*)### BEGIN SOLUTION\n.*?### END SOLUTION\n", re.DOTALL)
# solution cell -> (exercise number, the functions it defines, its test cells and their points)
EXERCISES = {
    "ring_all_reduce": ("2.1", ["ring_all_reduce"], {"test_ring_all_reduce": 4, "test_ring_time": 2}),
    "tree_all_reduce": ("2.2", ["tree_all_reduce"], {"test_tree_all_reduce": 4}),
    "cost_model": ("2.3", ["ring_time", "tree_time"], {"test_cost_model": 2}),
    "crossover_size": ("2.4", ["crossover_size"], {"test_crossover_size": 2}),
    "bus_bandwidth": ("2.5", ["bus_bandwidth"], {"test_bus_bandwidth": 2}),
}
LAUNCH_TIMEOUT_LIMIT_S = 60  # per launch in a graded cell: half of nbgrader's per-cell limit
BROKEN_RING = "return\n"  # does nothing: the other ranks' data never arrives


def cells_by_id(notebook: dict) -> dict[str, dict]:
    return {cell["metadata"]["nbgrader"]["grade_id"]: cell for cell in notebook["cells"]
            if "nbgrader" in cell.get("metadata", {})}


def source(cell: dict) -> str:
    return "".join(cell["source"])


# ---- structure (fast) -------------------------------------------------------------------------------------


def test_the_assignment_folder_holds_only_the_notebook() -> None:
    """nbgrader copies every file of solutions/<lab>/ to the students."""
    files = sorted(p.name for p in NOTEBOOK.parent.iterdir() if p.name not in (".ipynb_checkpoints", "__pycache__"))
    assert files == [NOTEBOOK.name], files


def test_committed_without_outputs() -> None:
    for cell in json.loads(NOTEBOOK.read_text())["cells"]:
        assert not cell.get("outputs") and cell.get("execution_count") is None, cell.get("id")


def test_every_exercise_has_its_stub_points_and_tests() -> None:
    cells = cells_by_id(json.loads(NOTEBOOK.read_text()))
    graded = {gid: c["metadata"]["nbgrader"]["points"] for gid, c in cells.items()
              if c["metadata"]["nbgrader"]["grade"]}
    expected = {test: pts for _, _, tests in EXERCISES.values() for test, pts in tests.items()}
    assert graded == expected, f"graded cells and points {graded}, expected {expected}"
    solutions = {gid for gid, c in cells.items() if c["metadata"]["nbgrader"]["solution"]}
    assert solutions == set(EXERCISES), solutions
    for gid, (number, functions, _) in EXERCISES.items():
        text = source(cells[gid])
        defined = [node.name for node in ast.parse(text).body if isinstance(node, ast.FunctionDef)]
        assert defined == functions, f"{gid} defines {defined}"
        for name in functions:
            assert f'raise NotImplementedError("Exercise {number}: {name}")' in text, f"{name}: stub missing"
        assert text.count("### BEGIN SOLUTION") == len(functions) == text.count("### END SOLUTION"), gid


def test_graded_cells_bound_every_launch_and_print_nothing() -> None:
    cells = cells_by_id(json.loads(NOTEBOOK.read_text()))
    for gid, cell in cells.items():
        if not cell["metadata"]["nbgrader"]["grade"]:
            continue
        tree = ast.parse(source(cell))
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
        assert not [c for c in calls if c.func.id == "print"], f"{gid} prints"
        for call in (c for c in calls if c.func.id == "launch"):
            timeout = {k.arg: k.value for k in call.keywords}.get("timeout")
            assert isinstance(timeout, ast.Constant) and timeout.value <= LAUNCH_TIMEOUT_LIMIT_S, (
                f"{gid}: a launch without a timeout of at most {LAUNCH_TIMEOUT_LIMIT_S} s")
        last = tree.body[-1]
        assert isinstance(last, ast.Assert | ast.Try | ast.Expr) and not (
            isinstance(last, ast.Expr) and isinstance(last.value, ast.Constant)), f"{gid} must end with a check"


# ---- one broken exercise costs exactly its points (one autograde) ------------------------------------------


def break_exercise(notebook: dict, grade_id: str, body: str) -> dict:
    """A copy of `notebook` in which the first solution region of cell `grade_id` holds `body` instead."""
    broken = json.loads(json.dumps(notebook))
    cell = cells_by_id(broken)[grade_id]
    text = source(cell)
    match = SOLUTION.search(text)
    assert match, f"no solution region in cell {grade_id}"
    indented = "".join(match["indent"] + line for line in body.splitlines(keepends=True))
    cell["source"] = text[: match.start()] + indented + text[match.end():]
    return broken


def test_a_broken_ring_costs_exactly_its_points(tmp_path: Path) -> None:
    solution = json.loads(NOTEBOOK.read_text())
    cells = cells_by_id(solution)
    points = {gid: c["metadata"]["nbgrader"].get("points", 0) for gid, c in cells.items()
              if c["metadata"]["nbgrader"]["grade"]}
    full = sum(points.values())
    shutil.copytree(NOTEBOOK.parent, pipeline.course_dir(tmp_path, "source") / ASSIGNMENT)
    folder = pipeline.course_dir(tmp_path, "submitted") / "broken_ring" / ASSIGNMENT
    folder.mkdir(parents=True)
    (folder / NOTEBOOK.name).write_text(json.dumps(break_exercise(solution, "ring_all_reduce", BROKEN_RING)))

    [score] = pipeline.autograde(tmp_path, env={"COURSE_FAST": "1"})

    lost = sum(EXERCISES["ring_all_reduce"][2].values())
    assert score.max_score == full, f"max score {score.max_score:g}, the notebook's test cells give {full}"
    assert score.score == full - lost, (
        f"with ring_all_reduce broken the submission scores {score.score:g}/{full}, expected {full - lost}")
