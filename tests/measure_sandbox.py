"""The sandbox's cost: a lab's corpus graded with and without it, in one run, in both orders.

    python -m tests.measure_sandbox [ASSIGNMENT|all] [CASE,CASE,...] [--passes on,off,off,on]

Passes over the same submissions (the lab's corpus, or every lab's with `all`, without the hostile cases, which
run only sandboxed): by default on, off, off, on, so that a machine that gets busier or quieter during the run
weighs on both alike (the whole corpus is about 8 minutes a pass on 2 cores: `all --passes on,off` halves it).
Each pass is one grade_corpus with the grading run's settings (tests/grading_run.py); the number is the sum of the
submissions' own grading times per pass, and the overhead the ratio of the sandboxed sums to the unsandboxed ones.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from autograder import grade
from tests.corpus import cases, hostile, lab_modules
from tests.corpus.common import write_case
from tests.grading_run import grade_corpus


def one_pass(submissions: Path, sandboxed: bool) -> tuple[float, list[grade.Result]]:
    """Grade every submission once; return the sum of their grading times and the results."""
    with tempfile.TemporaryDirectory(prefix="measure-") as out:
        results = grade_corpus(submissions, Path(out), progress=lambda line: None,
                               sandbox=hostile.SANDBOX_LIMITS if sandboxed else None)
    return sum(r.seconds for r in results), results


def compare(assignments: list[str], names: set[str] | None, passes: list[bool],
            grade_pass: Callable[[Path, bool], tuple[float, list[grade.Result]]], words: tuple[str, str]) -> None:
    """Write the corpus (less the hostile cases), grade it once per pass with grade_pass(submissions, on), print
    each pass and the ratio of the "on" sums to the "off" ones; `words` name the two ways."""
    if set(passes) != {True, False}:
        raise SystemExit("--passes needs at least one 'on' and one 'off'")
    with tempfile.TemporaryDirectory(prefix="measure-subs-") as subs:
        hostile_names = {c.name for c in hostile.CASES}
        for assignment in assignments:
            for case in cases(assignment):
                if case.name not in hostile_names and (names is None or case.name in names):
                    write_case(Path(subs), assignment, case)
        sums: dict[bool, list[float]] = {True: [], False: []}
        scores: dict[bool, list[dict]] = {True: [], False: []}
        for on in passes:
            start = time.monotonic()
            seconds, results = grade_pass(Path(subs), on)
            sums[on].append(seconds)
            scores[on].append({(r.student, r.assignment): r.score for r in results})
            print(f"{words[not on]}: {len(results)} submissions, {seconds:.0f} s of grading "
                  f"({time.monotonic() - start:.0f} s wall)", flush=True)
    on, off = sum(sums[True]), sum(sums[False])
    same = all(s == scores[True][0] for s in scores[True] + scores[False])
    print(f"{words[0]} / {words[1]}: {on:.0f} s / {off:.0f} s = {on / off:.3f} ({100 * (on / off - 1):+.1f} %); "
          f"the same scores every pass: {same}")


def command_line(module: str, doc: str, grade_pass: Callable[[Path, bool], tuple[float, list[grade.Result]]],
                 words: tuple[str, str]) -> None:
    """`python -m <module> [ASSIGNMENT|all] [CASE,...] [--passes on,off,off,on]`: compare, as the arguments say."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=doc.splitlines()[0])
    parser.add_argument("assignment", nargs="?", default=hostile.ASSIGNMENT, help="a lab, or `all` (every lab)")
    parser.add_argument("cases", nargs="?", default=None, help="CASE,CASE,... (default: all of them)")
    parser.add_argument("--passes", default="on,off,off,on", help=f"the order of {words[0]} (on) and {words[1]} "
                        "(off) passes")
    args = parser.parse_args()
    compare(sorted(lab_modules()) if args.assignment == "all" else [args.assignment],
            set(args.cases.split(",")) if args.cases else None, [word == "on" for word in args.passes.split(",")],
            grade_pass, words)


if __name__ == "__main__":
    command_line("tests.measure_sandbox", __doc__, one_pass, ("sandboxed", "unconfined"))
