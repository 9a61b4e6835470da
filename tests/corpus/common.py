"""What every lab's corpus of broken submissions is made of: a Case, and the edits that make one.

Each lab has one module, tests/labs/labNN/corpus.py, with its assignment name and a list of cases:

    ASSIGNMENT = "03_data_parallel_math"
    CASES = [
        Case("sums", replace("average_gradients", WEIGHT_LINE, "    weight = 1.0\\n"),
             loses={"test_average_gradients", "test_average_gradients_uneven"}),
    ]

A case is the solution notebook with one thing broken; `loses` names the test cells (grade_ids) that must score
nothing, and every other test cell must keep its points; `tampered` and `flagged` say whether the grader must
report tampering, or flag it for review (autograder/flags.py, a test that did not run as written); `says` what the
student's feedback must say, `reports` what the instructor's row of grades.csv must say (where a failing hidden
check's message goes: the student reads only "a hidden check of exercise N.k failed"), `hides` what the student's
feedback must not hold (that message). The grading run
(tests/grading_run.py) adds two cases of its own to every lab, "solution" (loses nothing) and "release" (the
untouched course/ notebook: scores zero), and grades them all at once. Nothing is committed: the cases are built
from solutions/ every time.

    python -m tests.corpus OUT      # writes every lab's cases as OUT/<case>/<assignment>/<notebook>.ipynb
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from autograder.grade import FAILED as FAILED  # the statuses a case expects: the labs' corpora import them from here
from autograder.grade import GRADED, Status
from autograder.grade import TIMED_OUT as TIMED_OUT
from nbplumbing.cells import meta, source

ROOT = Path(__file__).resolve().parents[2]
SOLUTION = re.compile(r"(?P<indent>[ \t]*)### BEGIN SOLUTION\n.*?### END SOLUTION\n", re.DOTALL)
HIDDEN = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS$.*?^[ \t]*### END HIDDEN TESTS$\n?", re.DOTALL | re.MULTILINE)

Notebook = dict  # a notebook as json.load gives it
Edit = Callable[[Notebook], "Notebook | bytes"]  # solution notebook -> submitted notebook (or raw bytes)


@dataclass(frozen=True)
class Case:
    """One submission of the corpus and what grading it must give."""

    name: str  # the student id
    make: Edit
    loses: frozenset[str] = frozenset()  # the test cells that must score 0; all others keep their points
    status: Status = GRADED  # GRADED, or FAILED / TIMED_OUT (then nothing is scored)
    file_name: str | None = None  # the submitted file's name, if not the notebook's own
    tampered: bool = False  # whether the grader must flag it
    says: tuple[str, ...] = ()  # words the student's feedback pages must contain
    flagged: bool = False  # whether it must be flagged for review (autograder/flags.py, a test not run as written)
    reports: tuple[str, ...] = ()  # words the instructor's report (its row of grades.csv) must contain
    hides: tuple[str, ...] = ()  # words the student's feedback must not contain (a failing hidden check's message)

    def __post_init__(self) -> None:
        object.__setattr__(self, "loses", frozenset(self.loses))


def solution_notebook(assignment: str) -> Path:
    """The one instructor notebook of an assignment (every lab has exactly one)."""
    [path] = sorted((ROOT / "solutions" / assignment).glob("*.ipynb"))
    return path


def cells(nb: Notebook) -> dict[str, dict]:
    """The nbgrader cells of a notebook, by grade_id."""
    return {meta(c)["grade_id"]: c for c in nb["cells"] if meta(c).get("grade_id")}


def own_cell(kind: str, text: str) -> dict:
    """A cell of the student's own ("code" or "markdown"), as JupyterLab saves one in nbformat 4.5: with an id.

    The id is made from the text, so that a case is written the same way every time."""
    cell = {"cell_type": kind, "id": hashlib.sha1(f"{kind}:{text}".encode()).hexdigest()[:12], "metadata": {},
            "source": text}
    return (cell | {"execution_count": None, "outputs": []}) if kind == "code" else cell


def released(nb: Notebook) -> Notebook:
    """What a student who solved everything submits: the solution without its hidden tests."""
    nb = json.loads(json.dumps(nb))
    for cell in nb["cells"]:
        cell["source"] = HIDDEN.sub("", source(cell))
    return nb


def _in_solution(grade: str, code: str, keep_solution: bool) -> Edit:
    """Put `code` (indented like the region) at the top of the first solution region of cell `grade`,
    in place of the region unless `keep_solution`."""
    def make(nb: Notebook) -> Notebook:
        nb = released(nb)
        cell = cells(nb)[grade]
        src = source(cell)
        m = SOLUTION.search(src)
        assert m, f"no solution region in cell {grade}"
        new = "".join(m["indent"] + line for line in code.splitlines(keepends=True))
        cell["source"] = src[: m.start()] + new + src[m.start() if keep_solution else m.end():]
        return nb
    return make


def body(grade: str, new: str) -> Edit:
    """Replace the first solution region of cell `grade` by `new` (indented like the region)."""
    return _in_solution(grade, new, keep_solution=False)


def prepend(grade: str, code: str) -> Edit:
    """Insert `code` at the top of the first solution region of `grade` (the solution then runs as before)."""
    return _in_solution(grade, code, keep_solution=True)


def replace(grade: str, old: str, new: str) -> Edit:
    """Replace the text `old`, which must occur exactly once in cell `grade`, by `new`."""
    def make(nb: Notebook) -> Notebook:
        nb = released(nb)
        cell = cells(nb)[grade]
        src = source(cell)
        assert src.count(old) == 1, f"{old!r} occurs {src.count(old)} times in cell {grade}, not once"
        cell["source"] = src.replace(old, new)
        return nb
    return make


def append(grade: str, code: str) -> Edit:
    """Add `code` at the end of cell `grade`, at top level."""
    def make(nb: Notebook) -> Notebook:
        nb = released(nb)
        cell = cells(nb)[grade]
        cell["source"] = source(cell).rstrip("\n") + "\n\n\n" + code
        return nb
    return make


def edit_cell(grade: str, new_source: str) -> Edit:
    """Replace the whole source of cell `grade` (a locked cell: the grader must notice)."""
    def make(nb: Notebook) -> Notebook:
        cells(nb)[grade]["source"] = new_source
        return nb
    return make


def delete_cell(grade: str) -> Edit:
    def make(nb: Notebook) -> Notebook:
        nb["cells"] = [c for c in nb["cells"] if meta(c).get("grade_id") != grade]
        return nb
    return make


def chain(*edits: Edit) -> Edit:
    """Apply edits one after the other."""
    def make(nb: Notebook) -> Notebook:
        for edit in edits:
            nb = edit(nb)
        return nb
    return make


def build_case(assignment: str, case: Case) -> Notebook | bytes:
    """What one case submits: its edit applied to the solution notebook (a notebook, or the file's raw bytes)."""
    return case.make(json.loads(solution_notebook(assignment).read_text()))


def write_case(out: Path, assignment: str, case: Case) -> Path:
    """Write one case as out/<case>/<assignment>/<file>, built from the solution notebook; return the file."""
    made = build_case(assignment, case)
    folder = Path(out) / case.name / assignment
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (case.file_name or solution_notebook(assignment).name)
    path.write_bytes(made if isinstance(made, bytes) else json.dumps(made, indent=1).encode())
    return path
