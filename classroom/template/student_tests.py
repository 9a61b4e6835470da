"""Every lab's visible tests, checked as the Validate button checks them: `make test` (one lab: make test LAB=01).

nbgrader's Validator runs the notebook top to bottom in a fresh kernel and reports each test cell that fails.
(This file ships in the student edition of the course as tests/test_labs.py; see classroom/export.py.)
"""

from pathlib import Path

import pytest
from nbgrader.validator import Validator

COURSE = Path(__file__).resolve().parents[1] / "course"
NOTEBOOKS = sorted(COURSE.glob("*/*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.parent.name for p in NOTEBOOKS])
def test_visible_tests_pass(path: Path) -> None:
    results = Validator().validate(str(path))
    problems = results.get("failed", []) + results.get("changed", []) + results.get("type_changed", [])
    lines = [(p.get("raw_error") or "a test cell was changed: " + p["source"]).strip().splitlines()[-1]
             for p in problems]
    assert not problems, f"{path.parent.name}: {len(problems)} test cells fail:\n  " + "\n  ".join(lines)
