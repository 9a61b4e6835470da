"""What the test modules share: the course's folders, reading notebooks, lab markers and the grading run's type.

Every lab is tested the same way (tests/test_structure.py, tests/test_grading.py); a lab's own file,
tests/labs/labNN/test_labNN.py, holds only what is particular to it. `pytest -m lab02` runs one lab's tests, and
`pytest -m "not slow"` everything except what needs the grading run (tests/grading_run.py).
"""

from __future__ import annotations

import html
import json
import re
import socket
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest

from autograder import grade
from nbplumbing import adapter
from nbplumbing.cells import meta, source
from tests.corpus.common import HIDDEN, Case
from tests.labs import lab_marker
from utils.timeouts import KILL_SLACK_S

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = adapter.course_dir(ROOT, "source")
COURSE = adapter.course_dir(ROOT, "release")
ASSIGNMENTS = adapter.assignment_names(ROOT)
KILL_SLACK = KILL_SLACK_S  # from a submission's time limit to every process of it gone
CELL_TIMEOUT = float(adapter.nbgrader_config().Execute.timeout)  # nbgrader's per-cell limit, as configured

__all__ = ["ASSIGNMENTS", "CELL_TIMEOUT", "COURSE", "HIDDEN", "KILL_SLACK", "ROOT", "SOLUTIONS", "GradingRun",
           "autograded", "cell_seconds", "cells_losing_points", "free_port", "graded_cells", "lab_marker",
           "lab_params", "meta", "notebook", "own_lines", "page_text", "secret_lines", "source", "text_lines",
           "without_hidden_tests"]


def lab_params(values: list, assignment_of=lambda v: v) -> list:
    """pytest parameters, each marked with the lab it belongs to (so that `-m lab02` selects it)."""
    return [pytest.param(v, marks=getattr(pytest.mark, lab_marker(assignment_of(v))), id=str(v)
                         if not isinstance(v, tuple) else "/".join(map(str, v))) for v in values]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for a server a test starts)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def notebook(path: Path) -> dict:
    return json.loads(Path(path).read_text())


def graded_cells(nb: dict, kind: str = "grade") -> dict[str, dict]:
    """grade_id -> cell, for the test cells ("grade") or the solution cells ("solution") of a notebook."""
    return {meta(c)["grade_id"]: c for c in nb["cells"] if meta(c).get(kind)}


def secret_lines(assignment: str, region: re.Pattern) -> set[str]:
    """The lines of an assignment's solution notebook inside `region` (corpus.common's SOLUTION or HIDDEN) that
    appear nowhere in the student release, stripped, of 20 characters or more (a bare `]` says nothing). A later
    lab may hand out an earlier lab's answer on purpose (lab 02 gives lab 00's): a line of the release is no secret.
    Compare with whole lines (`text_lines`): a secret `f(x)` is a part of the visible `def f(x) -> int:`."""
    [solution] = sorted((SOLUTIONS / assignment).glob("*.ipynb"))
    regions = "\n".join(m[0] for cell in notebook(solution)["cells"] for m in region.finditer(source(cell)))
    visible = {line.strip() for path in COURSE.glob("*/*.ipynb")
               for cell in notebook(path)["cells"] for line in source(cell).splitlines()}
    return {s for line in regions.splitlines() if len(s := line.strip()) >= 20 and not s.startswith("### ")
            and s not in visible}


def own_lines(nb: dict) -> set[str]:
    """The stripped lines of a submission's cells other than its test cells: the student's own, theirs to see in
    feedback even where a hidden test holds the same line (a stand-in written like the solution, for example)."""
    return {line.strip() for cell in nb["cells"] if not (meta(cell).get("grade") and not meta(cell).get("solution"))
            for line in source(cell).splitlines()}


def text_lines(text: str) -> set[str]:
    """The stripped lines of a text: what `secret_lines` are compared with."""
    return {line.strip() for line in text.splitlines()}


def page_text(page: Path) -> str:
    """An HTML page as a reader sees it: tags dropped (syntax highlighting too), entities decoded."""
    return html.unescape(re.sub(r"<[^>]+>", "", Path(page).read_text()))


def without_hidden_tests(text: str) -> str:
    """What the student release keeps of a test cell (nbgrader's ClearHiddenTests drops the region)."""
    return HIDDEN.sub("", text)


@dataclass(frozen=True)
class GradingRun:
    """The one grading run of a test session: every lab's solution, untouched release and broken cases."""

    out: Path  # grade_class's out folder: gradebook.db, grades.csv, autograded/, feedback/
    results: dict[tuple[str, str], grade.Result]  # (assignment, student) -> result
    cases: dict[tuple[str, str], Case]  # (assignment, student) -> what it must score
    lines: list[str]  # the progress display
    workers: int
    peak_workers: int  # the most submissions that were being graded at once
    seconds: float


def autograded(run: GradingRun, assignment: str, student: str) -> list[dict]:
    """The autograded notebooks of a submission (executed: outputs and all)."""
    folder = adapter.course_dir(run.out, "autograded") / student / assignment
    return [notebook(p) for p in sorted(folder.glob("*.ipynb"))]


def cells_losing_points(run: GradingRun, assignment: str, student: str) -> set[str]:
    """The test cells of a submission that scored below their points, from the class gradebook."""
    from nbgrader.api import Gradebook

    course_id = adapter.nbgrader_config().CourseDirectory.course_id
    with Gradebook(adapter.gradebook_url(run.out), course_id) as gb:
        submission = gb.find_submission(assignment, student)
        return {g.name for nb in submission.notebooks for g in nb.grades if g.score < g.max_score}


def cell_seconds(nb: dict) -> dict[str, float]:
    """How long each executed code cell took (grade_id or cell id -> s), from nbclient's timestamps."""
    out = {}
    for cell in nb["cells"]:
        stamps = cell.get("metadata", {}).get("execution", {})
        if "iopub.execute_input" in stamps and "shell.execute_reply" in stamps:
            begin, end = (datetime.fromisoformat(stamps[k].replace("Z", "+00:00"))
                          for k in ("iopub.execute_input", "shell.execute_reply"))
            out[meta(cell).get("grade_id", cell.get("id"))] = round((end - begin).total_seconds(), 1)
    return out
