"""Every lab's notebook has the structure nbgrader and the students rely on (fast: nothing is executed).

One parametrized check per rule, over every assignment of solutions/ (a new lab needs no code here):
- the assignment folder is named NN_topic and holds only its notebook, committed without outputs;
- the first code cell is the locked setup cell (grade_id `setup`), which sets FAST from COURSE_FAST for the
  experiments to shrink by;
- the notebook and its release ask for the course kernel, the one the Makefile installs;
- nbgrader's metadata is consistent: unique grade_ids, locked test cells, unlocked solution cells;
- every stub names its exercise and raises NotImplementedError, and every contract docstring stays in the
  release (outside the solution region);
- every test cell ends in an assertion (with and without its hidden tests) and prints nothing, and every
  `launch` in it has a literal timeout of at most half of nbgrader's cell timeout;
- the points table in the introduction equals the nbgrader points, exercise by exercise;
- no hidden test reaches course/;
- every case of the lab's corpus of broken submissions can still be built, and names real test cells.
"""

from __future__ import annotations

import ast
import re
import warnings
from collections import defaultdict

import nbformat
import pytest

from benchmark.reference import SETUP_CELL
from nbplumbing.adapter import COURSE_KERNELSPEC
from tests import corpus
from tests.common import (
    ASSIGNMENTS,
    CELL_TIMEOUT,
    COURSE,
    HIDDEN,
    ROOT,
    SOLUTIONS,
    graded_cells,
    lab_params,
    meta,
    notebook,
    source,
    without_hidden_tests,
)
from tests.corpus.common import SOLUTION, build_case, solution_notebook

LABS = lab_params(ASSIGNMENTS)
STUB = re.compile(r'raise NotImplementedError\("Exercise (?P<number>\d+\.\d+): (?P<name>\w+)"\)')
EXERCISE = re.compile(r"#\s*Exercise (\d+\.\d+)\b")  # the first line of a test cell names its exercise
TABLE_ROW = re.compile(r"^\|\s*(\d+\.\d+)\s*\|.*\|\s*([\d\s+]+?)\s*\|\s*$", re.MULTILINE)
IGNORED = {".ipynb_checkpoints", "__pycache__"}
FOLDER = re.compile(r"\d\d_[a-z0-9]+(?:_[a-z0-9]+)*")  # NN_topic: NN the lab's number, its marker labNN
FAST = 'FAST = os.environ.get("COURSE_FAST") == "1"'  # the setup cell's switch; CI's grading runs set COURSE_FAST=1


def released(assignment: str) -> dict:
    return notebook(COURSE / assignment / solution_notebook(assignment).name)


def lab_number(assignment: str) -> int:
    return int(assignment.split("_")[0])


def test_every_lab_is_tested() -> None:
    assert ASSIGNMENTS, "solutions/ holds no assignment: nothing would be graded"


@pytest.mark.parametrize("assignment", LABS)
def test_the_folder_is_named_with_the_labs_number(assignment: str) -> None:
    """NN_topic: the number orders the labs, names the exercises (N.k) and gives the marker labNN."""
    assert FOLDER.fullmatch(assignment), f"solutions/{assignment}/ is not named NN_topic (two digits, lower case)"


def setup_problems(nb: dict) -> list[str]:
    """What keeps the notebook's first code cell from being its locked setup cell that sets FAST, and FAST from
    being used by a later cell."""
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    if not code or meta(code[0]).get("grade_id") != SETUP_CELL or not meta(code[0]).get("locked"):
        return [f"the first code cell is not the locked cell with grade_id {SETUP_CELL!r}"]
    if FAST not in source(code[0]):
        return [f"the setup cell does not set `{FAST}`"]
    if not any(re.search(r"\bFAST\b", source(c)) for c in code[1:]):
        return ["no cell after the setup cell shrinks its experiment with FAST"]
    return []


@pytest.mark.parametrize("assignment", LABS)
def test_the_setup_cell_comes_first_and_sets_fast(assignment: str) -> None:
    """The imports every later cell relies on (benchmark/reference.py runs solutions in its namespace), and the
    switch that shrinks the experiments in CI's grading runs, whose cell limit (tests/grading_run.py) they must
    meet."""
    assert not (found := setup_problems(notebook(solution_notebook(assignment)))), f"{assignment}: {found}"


def test_a_misnamed_folder_and_a_notebook_without_its_setup_cell_are_refused() -> None:
    assert [name for name in ("00_ranks", "ring_allreduce", "2_ring", "02_Ring", "02-ring") if FOLDER.fullmatch(name)] \
        == ["00_ranks"]
    nb = notebook(solution_notebook(ASSIGNMENTS[0]))
    setup, *_ = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert setup_problems(nb) == []
    assert setup_problems({"cells": [setup]}) == ["no cell after the setup cell shrinks its experiment with FAST"]
    setup["source"] = source(setup).replace(FAST, "FAST = False")
    assert setup_problems(nb) == [f"the setup cell does not set `{FAST}`"]
    setup["metadata"]["nbgrader"]["grade_id"] = "imports"
    assert setup_problems(nb) == ["the first code cell is not the locked cell with grade_id 'setup'"]


@pytest.mark.parametrize("assignment", LABS)
def test_the_folder_holds_only_the_notebook_without_outputs(assignment: str) -> None:
    """nbgrader copies every file of solutions/<lab>/ to the students; notebooks are committed clean."""
    files = sorted(p.name for p in (SOLUTIONS / assignment).iterdir() if p.name not in IGNORED)
    assert len(files) == 1 and files[0].endswith(".ipynb"), f"solutions/{assignment}/ holds {files}, not one notebook"
    nb = nbformat.read(SOLUTIONS / assignment / files[0], as_version=4)
    nbformat.validate(nb)
    dirty = [c.id for c in nb.cells if c.cell_type == "code" and (c.outputs or c.execution_count is not None)]
    assert not dirty, f"cells {dirty} have outputs or execution counts: commit the notebook without them"


@pytest.mark.parametrize("assignment", LABS)
def test_the_notebook_and_its_release_ask_for_the_course_kernel(assignment: str) -> None:
    """JupyterLab opens a lab on the kernel its notebook names; the Makefile's venv offers only the course's."""
    for nb in (notebook(solution_notebook(assignment)), released(assignment)):
        kernelspec = nb["metadata"].get("kernelspec")
        assert kernelspec == COURSE_KERNELSPEC, (
            f"{assignment} asks for the kernel {kernelspec}, not {COURSE_KERNELSPEC}: set it in solutions/ "
            "(`make release` says how) and run `make release`")


def test_the_makefile_installs_the_course_kernel() -> None:
    makefile = (ROOT / "Makefile").read_text()
    install = (f'ipykernel install --sys-prefix --name {COURSE_KERNELSPEC["name"]} '
               f'--display-name "{COURSE_KERNELSPEC["display_name"]}"')
    assert install in makefile, f"the Makefile must install the notebooks' kernel: `{install}`"


@pytest.mark.parametrize("assignment", LABS)
def test_nbgrader_metadata_is_consistent(assignment: str) -> None:
    nb = notebook(solution_notebook(assignment))
    marked = [meta(c) for c in nb["cells"] if meta(c)]
    assert all(m.get("schema_version") == 3 for m in marked), "nbgrader metadata of schema 3 on every cell"
    ids = [m["grade_id"] for m in marked]
    assert len(ids) == len(set(ids)), f"grade_ids used twice: {sorted({i for i in ids if ids.count(i) > 1})}"
    for gid, cell in graded_cells(nb).items():
        info = meta(cell)
        assert info["locked"] and not info["solution"] and info.get("points", 0) > 0, f"{gid}: a locked test cell"
    for gid, cell in graded_cells(nb, "solution").items():
        assert not meta(cell)["locked"] and not meta(cell)["grade"], f"{gid}: a solution cell is not locked or graded"
    assert graded_cells(nb) and graded_cells(nb, "solution"), "a lab has exercises and tests"


@pytest.mark.parametrize("assignment", LABS)
def test_every_stub_names_its_exercise_and_raises(assignment: str) -> None:
    """After each ### END SOLUTION comes `raise NotImplementedError("Exercise N.k: <function>")`, N the lab.

    The config's stub is only "# YOUR CODE HERE", so this raise is what an unsolved exercise does.
    """
    for gid, cell in graded_cells(notebook(solution_notebook(assignment)), "solution").items():
        text = source(cell)
        regions = list(SOLUTION.finditer(text))
        assert regions, f"{gid}: no ### BEGIN SOLUTION ... ### END SOLUTION region"
        for region in regions:
            after = text[region.end():].lstrip("\n").splitlines()
            stub = STUB.fullmatch(after[0].strip()) if after else None
            assert stub, f"{gid}: the line after ### END SOLUTION must raise NotImplementedError(\"Exercise ...\")"
            assert stub["number"].split(".")[0] == str(lab_number(assignment)), f"{gid}: exercise {stub['number']}"
            defs = [n.name for n in ast.walk(ast.parse(text[: region.start()] + "    pass\n"))
                    if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
            assert defs and stub["name"] in defs, f"{gid}: the stub names {stub['name']}, the region is in {defs}"


@pytest.mark.parametrize("assignment", LABS)
def test_every_contract_stays_in_the_release(assignment: str) -> None:
    """Each function a student must write keeps its signature and docstring in course/ (outside the region)."""
    cells = graded_cells(released(assignment), "solution")
    assert cells, f"course/{assignment} has no exercise: run `make release`"
    for gid, cell in cells.items():
        stubs = [n for n in ast.walk(ast.parse(source(cell))) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
                 and any(isinstance(s, ast.Raise) and STUB.fullmatch(ast.get_source_segment(source(cell), s))
                         for s in n.body)]
        assert stubs, f"course/{assignment} [{gid}]: no function raises its exercise's NotImplementedError"
        for fn in stubs:
            assert ast.get_docstring(fn), f"course/{assignment} [{gid}]: {fn.name} lost its docstring"


def _ends_in_an_assertion(body: list[ast.stmt]) -> bool:
    """The last statement is an assert, a call of utils.mismatch.assert_no_problems (it returns None, and raises
    AssertionError), or a block (for, if, with, try) whose own last statement is one.

    A final expression would be shown as the cell's value, and nbgrader reads a number there as a partial score.
    """
    last = body[-1] if body else None
    if isinstance(last, ast.For | ast.While | ast.If | ast.With | ast.Try):
        return _ends_in_an_assertion(last.body)
    if isinstance(last, ast.Expr) and isinstance(last.value, ast.Call) and isinstance(last.value.func, ast.Name):
        return last.value.func.id == "assert_no_problems"
    return isinstance(last, ast.Assert)


def _test_cell_problems(gid: str, text: str) -> list[str]:
    tree = ast.parse(text)
    problems = []
    if not _ends_in_an_assertion(tree.body):
        problems.append(f"{gid} must end with an assert (nbgrader reads a final value as a partial score)")
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
    if any(c.func.id == "print" for c in calls):
        problems.append(f"{gid} prints (a test cell must stay silent)")
    for call in (c for c in calls if c.func.id == "launch"):
        timeout = {k.arg: k.value for k in call.keywords}.get("timeout")
        if not (isinstance(timeout, ast.Constant) and 0 < timeout.value <= CELL_TIMEOUT / 2):
            problems.append(f"{gid}, line {call.lineno}: launch(...) needs timeout=<at most {CELL_TIMEOUT / 2:g}>")
    return problems


@pytest.mark.parametrize("assignment", LABS)
def test_test_cells_end_in_an_assertion_print_nothing_and_bound_every_launch(assignment: str) -> None:
    problems = []
    for gid, cell in graded_cells(notebook(solution_notebook(assignment))).items():
        text = source(cell)
        problems += _test_cell_problems(gid, text)
        if HIDDEN.search(text):
            problems += [f"{p} (once its hidden tests are removed)"
                         for p in _test_cell_problems(gid, without_hidden_tests(text))]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("assignment", LABS)
def test_points_table_equals_the_nbgrader_points(assignment: str) -> None:
    nb = notebook(solution_notebook(assignment))
    rows = TABLE_ROW.findall(source(nb["cells"][0]))
    table = {number: sum(int(p) for p in points.split("+")) for number, points in rows}
    assert table, "the introduction (first cell) has no `| N.k | ... | points |` table"
    graded: dict[str, float] = defaultdict(float)
    for gid, cell in graded_cells(nb).items():
        first = EXERCISE.match(source(cell))
        assert first, f"{gid}: the first line of a test cell is `# Exercise N.k: what it checks`"
        graded[first[1]] += float(meta(cell)["points"])
    assert dict(graded) == {k: float(v) for k, v in table.items()}, (
        f"points by exercise: the introduction's table says {table}, the test cells give {dict(graded)}")


@pytest.mark.parametrize("assignment", LABS)
def test_no_hidden_test_in_course(assignment: str) -> None:
    """No marker and no line of a hidden-test block of solutions/ (unless it is visible there too) in course/."""
    cells = [source(c) for c in notebook(solution_notebook(assignment))["cells"]]
    released_lines = {ln.strip() for c in released(assignment)["cells"] for ln in source(c).splitlines()}
    assert not {ln for ln in released_lines if "HIDDEN TESTS" in ln}, f"hidden-test markers in course/{assignment}/"
    hidden = {ln.strip() for text in cells for block in HIDDEN.findall(text) for ln in block.splitlines()}
    visible = {ln.strip() for text in cells for ln in without_hidden_tests(text).splitlines()}
    secret = {ln for ln in hidden - visible if len(ln) > 3 and "HIDDEN TESTS" not in ln}  # skip blanks, brackets
    assert not secret & released_lines, f"hidden-test lines in course/{assignment}/: {sorted(secret & released_lines)}"


CASES = lab_params([(a, c.name) for a in ASSIGNMENTS for c in corpus.cases(a)], assignment_of=lambda v: v[0])


@pytest.mark.parametrize("case", CASES)
def test_every_corpus_case_can_be_built(case: tuple[str, str]) -> None:
    """The edit still applies to the current solution (e.g. the line it replaces is still there, once), and what it
    makes is a valid notebook where it is one."""
    assignment, name = case
    [found] = [c for c in corpus.cases(assignment) if c.name == name]
    made = build_case(assignment, found)
    if not isinstance(made, bytes):  # a notebook, as a student's JupyterLab saves it (nbformat 4.5: every cell an id)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # nbformat only warns of a missing id (MissingIDFieldWarning)
            nbformat.validate(nbformat.from_dict(made))
    unknown = found.loses - set(corpus.test_cells(assignment))
    assert not unknown, f"{name} must lose {sorted(unknown)}, which are not test cells of {assignment}"
