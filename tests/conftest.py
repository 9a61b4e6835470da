"""The markers of the suite, and the one grading run that every grading test reads.

Markers: each lab's tests carry `labNN` (a test_labNN.py module, or a parameter that names the lab), and every
test that reads the grading run carries `slow`. So `pytest -m lab02` runs one lab, and `pytest -m "not slow"`
(`make test-fast`) everything that needs no grading run.

The grading run (fixture `grading`, once per session): every lab's solution, untouched release and broken cases
(tests/corpus/) go through one `grade_class` run, one worker per core, and the tests read its results. When
only some labs' tests are selected, only those labs are graded.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from autograder import class_run, grade, reports
from tests import corpus
from tests.common import ASSIGNMENTS, GradingRun, lab_marker
from tests.corpus.hostile import SANDBOX_LIMITS

# The corpus runs with nbgrader's per-cell limit lowered to GRADING_CELL_TIMEOUT, so that lab 00's infinite
# loop costs two cells of 40 s instead of two of 120 s (no cell of a solution needs 10 s with COURSE_FAST=1),
# and with GRADING_TIMEOUT for a whole submission; sandboxed within SANDBOX_LIMITS (tests/corpus/hostile.py).
GRADING_CELL_TIMEOUT = 40.0
GRADING_TIMEOUT = 300.0


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: reads the session's grading run (deselect with -m 'not slow')")
    for assignment in ASSIGNMENTS:
        config.addinivalue_line("markers", f"{lab_marker(assignment)}: the tests of {assignment}")


@pytest.hookimpl(tryfirst=True)  # before -m deselects anything
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    labs = {lab_marker(a) for a in ASSIGNMENTS}
    for item in items:
        module = Path(str(item.fspath)).stem.removeprefix("test_")
        if module in labs:
            item.add_marker(module)
        if "grading" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)


def labs_to_grade(items: list[pytest.Item]) -> list[str]:
    """The assignments whose selected tests read the grading run (all of them when no test names a lab)."""
    wanted = {m.name for item in items if "grading" in getattr(item, "fixturenames", ())
              for m in item.iter_markers()}
    return [a for a in ASSIGNMENTS if lab_marker(a) in wanted] or ASSIGNMENTS


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


@pytest.fixture(scope="session")
def grading(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> GradingRun:
    """Grade every selected lab's corpus in one grade_class run; show its progress on the terminal."""
    labs = labs_to_grade(request.session.items)
    submissions = tmp_path_factory.mktemp("submissions")
    written = corpus.write(submissions, labs)
    out = tmp_path_factory.mktemp("graded")
    workers = class_run.default_workers()
    overlap = Overlap(grade.grade_one, parties=min(workers, len(written)))
    lines: list[str] = []
    capture = request.config.pluginmanager.getplugin("capturemanager")

    def progress(line: str) -> None:
        lines.append(line)
        with capture.global_and_fixture_disabled():
            print(f"\n  grading run: {line}", end="", flush=True)

    start = time.monotonic()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(class_run, "grade_one", overlap)
        results = class_run.grade_class(submissions, out, workers=workers, timeout=GRADING_TIMEOUT,
                                        cell_timeout=GRADING_CELL_TIMEOUT, env={"COURSE_FAST": "1"},
                                        progress=progress, sandbox=SANDBOX_LIMITS)
    progress(f"{reports.summary(results)} in {time.monotonic() - start:.0f} s\n")
    return GradingRun(out, {(r.assignment, r.student): r for r in results},
                      written, lines, workers, overlap.peak,
                      time.monotonic() - start)
