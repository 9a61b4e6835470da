"""The session's one grading run, in a process of its own: `python -m tests.grading_run OUT LAB [LAB ...]`.

Every selected lab's solution, untouched release and broken cases (tests/corpus/) go through one `grade_class`
run, one worker per core, sandboxed, with COURSE_FAST=1. conftest.py starts this process when the session begins
and the tests that read no grading run go on meanwhile: most of them wait (on servers, on time limits) more than
they compute, and the run is most of the session. Its own process, not a thread of pytest's: no test's
monkeypatch, environment variable or output capture can reach it, nor its grade_one a test's.

It writes, under OUT: submissions/ (the corpus), graded/ (grade_class's out folder), progress.log (a line per
finished submission, as they come) and run.pickle (a Finished, once everything is graded).
"""

from __future__ import annotations

import argparse
import pickle
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from autograder import class_run, grade, reports
from autograder.sandbox import Limits
from tests import corpus
from tests.corpus.hostile import SANDBOX_LIMITS

# The corpus runs with nbgrader's per-cell limit lowered to GRADING_CELL_TIMEOUT, so that lab 00's infinite
# loop costs two cells of 50 s instead of two of 120 s (no cell of a solution needs 10 s with COURSE_FAST=1),
# and with GRADING_TIMEOUT for a whole submission; sandboxed within SANDBOX_LIMITS (tests/corpus/hostile.py).
# A cell that hangs in a launch must hold the launch's timeout and then its hang report (the stacks, up to
# STACK_DUMP_S, the kill, the kernel's traceback): REPORT_ROOM past lab 00's longest launch before a hang (30 s,
# test_ping_pong's, where the hostile case hangs first). With 10 s, that report went past a 40 s limit twice
# under a load of 20-40, where the kernel's few tenths of a second of CPU take many seconds.
REPORT_ROOM = 20.0
GRADING_CELL_TIMEOUT = 50.0
GRADING_TIMEOUT = 300.0
WORKERS = class_run.default_workers()  # one per core: a third on 2 cores gained nothing in make test (638 s, 641 s)
PROGRESS = "progress.log"
FINISHED = "run.pickle"


@dataclass
class Finished:
    """What the run hands back to the tests (tests.common.GradingRun adds the corpus cases)."""

    out: Path
    results: list[grade.Result]
    lines: list[str]
    workers: int
    peak_workers: int
    seconds: float


class Overlap:
    """grade_one, with the first `parties` submissions made to wait for each other before they are graded.

    So that many really are graded at once, whatever the machine's speed, and `peak` records how many were.
    """

    def __init__(self, grade_one: Callable[..., grade.Result], parties: int):
        self.grade_one = grade_one
        self.barrier = threading.Barrier(parties, timeout=300)
        self.lock = threading.Lock()
        self.calls = self.active = self.peak = 0

    def __call__(self, *args, **kwargs) -> grade.Result:
        with self.lock:
            self.calls += 1
            first = self.calls <= self.barrier.parties
            self.active += 1
            self.peak = max(self.peak, self.active)
        try:
            if first:
                self.barrier.wait()
            return self.grade_one(*args, **kwargs)
        finally:
            with self.lock:
                self.active -= 1


def grade_corpus(submissions: Path, out: Path, *, progress: Callable[[str], None], workers: int | None = None,
                 sandbox: Limits | None = SANDBOX_LIMITS) -> list[grade.Result]:
    """grade_class with the grading run's settings: its limits, COURSE_FAST=1, and (by default) its sandbox."""
    return class_run.grade_class(submissions, out, workers=workers, timeout=GRADING_TIMEOUT,
                                 cell_timeout=GRADING_CELL_TIMEOUT, env={"COURSE_FAST": "1"}, progress=progress,
                                 sandbox=sandbox)


def run(base: Path, labs: list[str]) -> Finished:
    """Write the labs' corpus under base/submissions, grade it into base/graded; log progress to base/PROGRESS."""
    submissions, out = base / "submissions", base / "graded"
    written = corpus.write(submissions, labs)
    overlap = Overlap(grade.grade_one, parties=min(WORKERS, len(written)))
    lines: list[str] = []
    log = (base / PROGRESS).open("a", buffering=1)  # line-buffered: the tests show each line as it comes

    def progress(line: str) -> None:
        lines.append(line)
        log.write(line + "\n")

    start = time.monotonic()
    class_run.grade_one = overlap  # this process's own grader: nothing else runs in it
    with log:
        results = grade_corpus(submissions, out, progress=progress, workers=WORKERS)
        progress(f"{reports.summary(results)} in {time.monotonic() - start:.0f} s")
    return Finished(out, results, lines, WORKERS, overlap.peak, time.monotonic() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("base", type=Path, help="an empty folder for the corpus, the graded output and the log")
    parser.add_argument("labs", nargs="+", help="the assignments to grade")
    args = parser.parse_args()
    finished = run(args.base, args.labs)
    partial = args.base / (FINISHED + ".part")
    partial.write_bytes(pickle.dumps(finished))
    partial.rename(args.base / FINISHED)  # whole or absent: the tests never read half a file


if __name__ == "__main__":
    from tests.grading_run import main as main_of_the_module  # so Finished pickles as tests.grading_run.Finished

    main_of_the_module()
