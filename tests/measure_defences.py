"""The cost of checking that the tests ran as written (autograder/execution.py): a corpus graded with and without.

    python -m tests.measure_defences [ASSIGNMENT|all] [CASE,CASE,...] [--passes on,off,off,on]

Like tests/measure_sandbox.py (the same submissions, the grading run's settings, passes in both orders so that a
machine that gets busier or quieter weighs on both alike), but every pass is sandboxed and what changes is
GuardedExecute's `guard`: on, the recorder, the marker and the seal of every test cell, the output cap and the tests
kept out of IPython's history; off, nbgrader's own Execute. The static flags and the scrub run in both (they cost
milliseconds). The number is the sum of the submissions' own grading times per pass; the hostile cases are left
out (unguarded, the kernel attacks gain points: not the same work both ways).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from autograder import grade
from tests.grading_run import grade_corpus
from tests.measure_sandbox import command_line


def one_pass(submissions: Path, guarded: bool) -> tuple[float, list[grade.Result]]:
    """Grade every submission once, with or without the guard; return the sum of their grading times and results."""
    run_nbgrader = grade.run_nbgrader

    def unguarded(command: str, *args: str, **kwargs):  # noqa: ANN202 (run_nbgrader's own signature)
        return run_nbgrader(command, *args, "--GuardedExecute.guard=False", **kwargs)

    grade.run_nbgrader = run_nbgrader if guarded else unguarded
    try:
        with tempfile.TemporaryDirectory(prefix="measure-") as out:
            results = grade_corpus(submissions, Path(out), progress=lambda line: None)
    finally:
        grade.run_nbgrader = run_nbgrader
    return sum(r.seconds for r in results), results


if __name__ == "__main__":
    command_line("tests.measure_defences", __doc__, one_pass, ("guarded", "unguarded"))
