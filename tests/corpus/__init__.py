"""Every lab's corpus of broken submissions (tests/corpus/labNN.py), plus its solution and untouched release, and
the hostile submissions (tests/corpus/hostile.py) in the lab they are written for.

    from tests import corpus
    corpus.cases("01_collectives")   # -> [Case("solution"), Case("release"), Case("broken_broadcast"), ...]
    python -m tests.corpus OUT       # writes every case of every lab as OUT/<case>/<assignment>/<notebook>
"""

from __future__ import annotations

import importlib
import json
import pkgutil
from pathlib import Path

from tests.corpus import hostile
from tests.corpus.common import ROOT, Case, cells, released, solution_notebook, write_case


def lab_modules() -> dict[str, object]:
    """assignment -> its corpus module, for every tests/corpus/labNN.py."""
    modules = [importlib.import_module(f"{__name__}.{m.name}") for m in pkgutil.iter_modules(__path__)
               if m.name.startswith("lab")]
    return {m.ASSIGNMENT: m for m in modules}


def test_cells(assignment: str) -> dict[str, float]:
    """The graded test cells of an assignment's solution notebook and their points."""
    nb = json.loads(solution_notebook(assignment).read_text())
    return {gid: float(c["metadata"]["nbgrader"].get("points", 0)) for gid, c in cells(nb).items()
            if c["metadata"]["nbgrader"].get("grade")}


def cases(assignment: str) -> list[Case]:
    """The solution (full marks), the untouched release (zero) and the lab's own broken cases."""
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
