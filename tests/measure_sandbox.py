"""The sandbox's cost: a lab's corpus graded with and without it, in one run, in both orders.

    python -m tests.measure_sandbox [ASSIGNMENT [CASE,CASE,...]]     (default: lab 00, all its cases)

Four passes over the same submissions (the lab's corpus without the hostile cases, which run only sandboxed):
on, off, off, on, so that a machine that gets busier or quieter during the run weighs on both alike. Each pass is
one grade_class with the grading run's settings (tests/conftest.py); the number is the sum of the submissions'
own grading times per pass, and the overhead the ratio of the sandboxed sums to the unsandboxed ones.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from autograder import class_run, grade
from tests.conftest import GRADING_CELL_TIMEOUT, GRADING_TIMEOUT
from tests.corpus import cases, hostile
from tests.corpus.common import write_case


def one_pass(submissions: Path, sandboxed: bool) -> tuple[float, list[grade.Result]]:
    """Grade every submission once; return the sum of their grading times and the results."""
    with tempfile.TemporaryDirectory(prefix="measure-") as out:
        results = class_run.grade_class(submissions, Path(out), timeout=GRADING_TIMEOUT,
                                        cell_timeout=GRADING_CELL_TIMEOUT, env={"COURSE_FAST": "1"},
                                        progress=lambda line: None,
                                        sandbox=hostile.SANDBOX_LIMITS if sandboxed else None)
    return sum(r.seconds for r in results), results


def main(assignment: str, names: set[str] | None) -> None:
    with tempfile.TemporaryDirectory(prefix="measure-subs-") as subs:
        hostile_names = {c.name for c in hostile.CASES}
        for case in cases(assignment):
            if case.name not in hostile_names and (names is None or case.name in names):
                write_case(Path(subs), assignment, case)
        sums: dict[bool, list[float]] = {True: [], False: []}
        scores: dict[bool, list[dict]] = {True: [], False: []}
        for sandboxed in (True, False, False, True):
            start = time.monotonic()
            seconds, results = one_pass(Path(subs), sandboxed)
            sums[sandboxed].append(seconds)
            scores[sandboxed].append({(r.student, r.assignment): r.score for r in results})
            print(f"{'sandboxed' if sandboxed else 'unconfined'}: {len(results)} submissions, {seconds:.0f} s of "
                  f"grading ({time.monotonic() - start:.0f} s wall)", flush=True)
    on, off = sum(sums[True]), sum(sums[False])
    same = all(s == scores[True][0] for s in scores[True] + scores[False])
    print(f"sandboxed / unconfined: {on:.0f} s / {off:.0f} s = {on / off:.3f} ({100 * (on / off - 1):+.1f} %); "
          f"the same scores every pass: {same}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else hostile.ASSIGNMENT,
         set(sys.argv[2].split(",")) if len(sys.argv) > 2 else None)
