"""The cost of checking that the tests ran as written (autograder/execution.py): a corpus graded with and without.

    python -m tests.measure_defences [ASSIGNMENT|all] [CASE,CASE,...] [--passes on,off,off,on]
    python -m tests.measure_defences cells [N]     # the guard alone: N test cells, run both ways, 3 times each

Like tests/measure_sandbox.py (the same submissions, the grading run's settings, passes in both orders so that a
machine that gets busier or quieter weighs on both alike), but every pass is sandboxed and what changes is
GuardedExecute's `guard`: on, the recorder, the marker and the seal of every test cell, the output cap and the tests
kept out of IPython's history; off, nbgrader's own Execute. The static flags and the scrub run in both (they cost
milliseconds). The number is the sum of the submissions' own grading times per pass; the hostile cases are left
out (unguarded, the kernel attacks gain points: not the same work both ways).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import nbformat

from autograder import grade
from autograder.execution import GuardedExecute
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


def per_cell(count: int) -> None:
    """A notebook of `count` small test cells run by GuardedExecute in one kernel, guarded and not, alternating (no
    nbgrader, no sandbox: what the guard adds to each test cell, where a grading's noise cannot hide it)."""
    # torch imported as every lab's setup cell does: the recorder imports it before the first cell (to know its
    # functions before a submission can replace them), which moves the import rather than adding one
    cells = [nbformat.v4.new_code_cell("import numpy as np\nimport torch\nx = np.arange(10)")]
    for i in range(count):
        cells.append(nbformat.v4.new_code_cell("assert x.sum() == 45\nassert np.allclose(x * 2, x + x)\n"))
        cells[-1].metadata["nbgrader"] = {"grade": True, "solution": False, "locked": True, "grade_id": f"t{i}",
                                          "points": 1}
    seconds: dict[bool, float] = {True: 0.0, False: 0.0}
    with tempfile.TemporaryDirectory() as folder:
        for guard in (True, False, False, True, True, False):
            nb = nbformat.v4.new_notebook(cells=[nbformat.from_dict(c) for c in cells])
            start = time.perf_counter()
            out, _ = GuardedExecute(guard=guard, kernel_name="python3").preprocess(nb, {"metadata": {"path": folder}})
            seconds[guard] += time.perf_counter() - start
            assert not [o for c in out.cells for o in c.outputs], "a test cell failed or printed"
    print(f"{count} test cells, 3 runs each: guarded {seconds[True]:.2f} s, unguarded {seconds[False]:.2f} s: "
          f"{(seconds[True] - seconds[False]) / 3 / count * 1000:+.2f} ms per test cell")


if __name__ == "__main__" and sys.argv[1:2] == ["cells"]:
    per_cell(int(sys.argv[2]) if len(sys.argv) > 2 else 200)
elif __name__ == "__main__":
    command_line("tests.measure_defences", __doc__, one_pass, ("guarded", "unguarded"))
