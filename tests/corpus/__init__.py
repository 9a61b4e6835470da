"""Every lab's corpus of broken submissions (tests/labs/labNN/corpus.py), plus its solution and untouched release, and
the hostile submissions (tests/corpus/hostile.py) in the lab they are written for.

    from tests import corpus
    corpus.cases("01_collectives")   # -> [Case("solution"), Case("release"), Case("broken_broadcast"), ...]
    python -m tests.corpus OUT       # writes every case of every lab as OUT/<case>/<assignment>/<notebook>
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.corpus.common import ROOT, Case, cells, released, solution_notebook, write_case
from tests.labs import corpus_modules as lab_modules


def test_cells(assignment: str) -> dict[str, float]:
    """The graded test cells of an assignment's solution notebook and their points."""
    nb = json.loads(solution_notebook(assignment).read_text())
    return {gid: float(c["metadata"]["nbgrader"].get("points", 0)) for gid, c in cells(nb).items()
            if c["metadata"]["nbgrader"].get("grade")}


def cases(assignment: str) -> list[Case]:
    """The solution (full marks), the untouched release (zero) and the lab's own broken cases."""
    from tests.corpus import hostile  # here, not above: it imports lab 00's corpus, which imports this package

    release = ROOT / "course" / assignment / solution_notebook(assignment).name
    own = lab_modules().get(assignment)
    return [Case("solution", released),
            Case("release", lambda nb: release.read_bytes(), loses=frozenset(test_cells(assignment))),
            *(own.CASES if own else []), *(hostile.CASES if assignment == hostile.ASSIGNMENT else [])]


def write(out: Path, assignments: list[str]) -> dict[tuple[str, str], Case]:
    """Write every case of the assignments under out/; return them by (assignment, student)."""
    written = {}
    for assignment in assignments:
        for case in cases(assignment):
            write_case(out, assignment, case)
            written[(assignment, case.name)] = case
    return written
