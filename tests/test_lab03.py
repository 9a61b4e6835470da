"""Lab 03 (data-parallel math): the notebook's grading structure, and that wrong weights cost exactly their points.

The mutation test grades three copies of the solution notebook with the course's nbgrader pipeline, in one
autograde run in a temporary course root (COURSE_FAST=1): the solution itself, one whose average_gradients
sums the rank gradients instead of averaging them, and one that weights uneven shards equally. Each mutant
must lose exactly the points of the test cells that cover what it broke, and no other. It takes 1.5 to 3
minutes on a 2-core machine, depending on what else runs there. tests/test_pipeline.py checks the solution
and the untouched release of every lab.
"""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

import nbformat
import pytest

from autograder import pipeline

ROOT = Path(__file__).resolve().parents[1]

LAB = "03_data_parallel_math"
NOTEBOOK = ROOT / "solutions" / LAB / "data_parallel_math.ipynb"
EXERCISES = {"shard": "3.1", "average_gradients": "3.2", "train_data_parallel": "3.3"}
POINTS = {"test_shard": 2, "test_average_gradients": 3, "test_average_gradients_uneven": 2,
          "test_train_data_parallel": 3}
LAUNCH_TIMEOUT_LIMIT_S = 30  # per launch in a test cell: several fit well inside nbgrader's per-cell limit

# The one line of the solution of exercise 3.2 that sets the weight, and the two ways to get it wrong.
WEIGHT_LINE = "    weight = local_batch_size / total  # b_r / B: this rank's share of the global batch\n"
MUTANTS = {
    "sums": "    weight = 1.0  # MUTANT: sums the rank gradients instead of averaging them\n",
    "equal_weights": "    weight = 1.0 / dist.get_world_size()  # MUTANT: 1/N whatever the shard sizes\n",
}
# The graded cells that check each behaviour: each submission must lose exactly these.
LOSES = {
    "solution": set(),
    "sums": {"test_average_gradients", "test_average_gradients_uneven"},
    "equal_weights": {"test_average_gradients_uneven"},
}


def _notebook() -> nbformat.NotebookNode:
    return nbformat.read(NOTEBOOK, as_version=4)


def _cells(kind: str) -> dict[str, str]:
    """grade_id -> source of the solution cells ("solution") or graded test cells ("grade")."""
    return {c.metadata["nbgrader"]["grade_id"]: c.source for c in _notebook().cells
            if c.metadata.get("nbgrader", {}).get(kind)}


# ---- the notebook's structure (fast) -----------------------------------------------------------------------


def test_the_assignment_folder_holds_only_the_notebook() -> None:
    """nbgrader copies every file of solutions/<lab>/ to the students."""
    assert sorted(p.name for p in NOTEBOOK.parent.iterdir()) == [NOTEBOOK.name]


def test_notebook_is_committed_clean() -> None:
    nb = _notebook()
    nbformat.validate(nb)
    assert nb.metadata.kernelspec.name == "python3"
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, "commit the notebook without outputs"


def test_exercises_and_points() -> None:
    assert set(_cells("solution")) == set(EXERCISES)
    graded = {c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"]["points"] for c in _notebook().cells
              if c.metadata.get("nbgrader", {}).get("grade")}
    assert graded == POINTS


@pytest.mark.parametrize("name", EXERCISES)
def test_stub_names_its_exercise_and_keeps_its_contract_outside_the_solution(name: str) -> None:
    source = _cells("solution")[name]
    before, solution = source.split("### BEGIN SOLUTION")
    solution, after = solution.split("### END SOLUTION")
    assert before.lstrip().startswith(f"def {name}(") and '"""' in before, "def and docstring stay in the release"
    assert after.strip() == f'raise NotImplementedError("Exercise {EXERCISES[name]}: {name}")'


@pytest.mark.parametrize("grade_id", POINTS)
def test_test_cells_end_with_an_assertion_and_bound_every_launch(grade_id: str) -> None:
    """Released (hidden tests removed) and as graded, the last statement is an assert; every launch has a timeout."""
    source = _cells("grade")[grade_id]
    released = re.sub(r"### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS\n?", "", source, flags=re.DOTALL)
    for text in (source, released):
        assert isinstance(ast.parse(text).body[-1], ast.Assert)
    for call in ast.walk(ast.parse(source)):
        if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "launch":
            timeouts = [k.value for k in call.keywords if k.arg == "timeout"]
            assert timeouts and isinstance(timeouts[0], ast.Constant), f"{grade_id}: a launch without a timeout"
            assert timeouts[0].value <= LAUNCH_TIMEOUT_LIMIT_S


def test_the_weight_line_the_mutants_replace_is_there_once() -> None:
    assert _cells("solution")["average_gradients"].count(WEIGHT_LINE.strip("\n")) == 1


# ---- wrong weights cost exactly their points (one autograde of three notebooks) ------------------------------


def _mutated(line: str) -> nbformat.NotebookNode:
    nb = _notebook()
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "average_gradients":
            assert cell.source.count(WEIGHT_LINE) == 1
            cell.source = cell.source.replace(WEIGHT_LINE, line)
    return nb


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, pipeline.Score]]:
    """Autograde the solution and both mutants in a temporary course root; return it and the scores."""
    root = tmp_path_factory.mktemp("lab03-mutants")
    shutil.copytree(NOTEBOOK.parent, pipeline.course_dir(root, "source") / LAB)
    submissions = {"solution": _notebook(), **{name: _mutated(line) for name, line in MUTANTS.items()}}
    for student, nb in submissions.items():
        dest = pipeline.course_dir(root, "submitted") / student / LAB
        dest.mkdir(parents=True)
        nbformat.write(nb, dest / NOTEBOOK.name)
    scores = pipeline.autograde(root, env={"COURSE_FAST": "1"})
    return root, {s.student: s for s in scores}


def _cells_losing_points(root: Path, student: str) -> set[str]:
    """The graded cells of a submission that scored below their points, from the gradebook."""
    from nbgrader.api import Gradebook

    course_id = pipeline.nbgrader_config().CourseDirectory.course_id
    with Gradebook(pipeline.gradebook_url(root), course_id) as gb:
        notebook = gb.find_submission_notebook(NOTEBOOK.stem, LAB, student)
        return {grade.name for grade in notebook.grades if grade.score < grade.max_score}


@pytest.mark.parametrize("student", LOSES)
def test_a_submission_loses_exactly_the_points_of_what_it_broke(
    graded: tuple[Path, dict[str, pipeline.Score]], student: str
) -> None:
    root, scores = graded
    score = scores[student]
    assert score.max_score == sum(POINTS.values())
    assert _cells_losing_points(root, student) == LOSES[student]
    assert score.score == score.max_score - sum(POINTS[cell] for cell in LOSES[student])
