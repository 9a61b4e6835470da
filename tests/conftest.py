"""The markers of the suite, and the one grading run that every grading test reads.

Markers: each lab's tests carry `labNN` (a test_labNN.py module, or a parameter that names the lab), and every
test that reads the grading run carries `slow`. So `pytest -m lab02` runs one lab, and `pytest -m "not slow"`
(`make test-fast`) everything that needs no grading run.

The grading run (tests/grading_run.py): every selected lab's solution, untouched release and broken cases
(tests/corpus/) go through one `grade_class` run, one worker per core. It starts in a process of its own as the
session begins, and the tests that do not read it run meanwhile; the tests that read it (fixture `grading`) are
moved to the end of the session, where they wait for it, showing its progress. When only some labs' tests are
selected, only those labs are graded.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import corpus
from tests.common import ASSIGNMENTS, ROOT, GradingRun, lab_marker
from tests.grading_run import FINISHED, PROGRESS
from utils.timeouts import KILL_SLACK_S

RUN_KEY = pytest.StashKey[tuple[subprocess.Popen, Path]]()  # the grading run's process and folder


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
        if reads_grading(item):
            item.add_marker(pytest.mark.slow)
    items.sort(key=reads_grading)  # stable: the rest first, in order, while the run grades; then its readers


def reads_grading(item: pytest.Item) -> bool:
    return "grading" in getattr(item, "fixturenames", ())


def labs_to_grade(items: list[pytest.Item]) -> list[str]:
    """The assignments whose selected tests read the grading run (all of them when no test names a lab)."""
    wanted = {m.name for item in items if reads_grading(item) for m in item.iter_markers()}
    return [a for a in ASSIGNMENTS if lab_marker(a) in wanted] or ASSIGNMENTS


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the grading run when a selected test reads it (tests/grading_run.py), in its own session and folder."""
    if session.config.option.collectonly or not any(reads_grading(item) for item in session.items):
        return
    base = session.config._tmp_path_factory.mktemp("grading-run")  # tmp_path_factory's, before any fixture runs
    with (base / "grading_run.out").open("w") as log:
        process = subprocess.Popen([sys.executable, "-m", "tests.grading_run", str(base),
                                    *labs_to_grade(session.items)],
                                   cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    session.config.stash[RUN_KEY] = (process, base)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A run still going when the session ends (Ctrl-C, -x): interrupted as Ctrl-C would (grade_class then stops
    every process of every submission), killed outright if it does not end within the kill slack."""
    if RUN_KEY not in session.config.stash:
        return
    process, _ = session.config.stash[RUN_KEY]
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(timeout=KILL_SLACK_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.fixture(scope="session")
def grading(request: pytest.FixtureRequest) -> GradingRun:
    """The grading run's results, once it has finished; its progress, a line per submission, shown meanwhile."""
    process, base = request.config.stash[RUN_KEY]
    capture = request.config.pluginmanager.getplugin("capturemanager")
    shown = 0

    def show_new_lines() -> None:
        nonlocal shown
        lines = (base / PROGRESS).read_text().splitlines() if (base / PROGRESS).exists() else []
        with capture.global_and_fixture_disabled():
            for line in lines[shown:]:
                print(f"\n  grading run: {line}", end="", flush=True)
        shown = len(lines)

    while process.poll() is None:
        show_new_lines()
        time.sleep(1.0)
    show_new_lines()
    with capture.global_and_fixture_disabled():
        print(flush=True)  # the tests' own progress on a line of its own
    if process.returncode != 0 or not (base / FINISHED).exists():
        output = (base / "grading_run.out").read_text(errors="replace")
        pytest.fail(f"the grading run (python -m tests.grading_run) exited with {process.returncode}:\n"
                    f"{output[-4000:]}")
    finished = pickle.loads((base / FINISHED).read_bytes())
    cases = {(lab, case.name): case for lab in labs_to_grade(request.session.items) for case in corpus.cases(lab)}
    return GradingRun(finished.out, {(r.assignment, r.student): r for r in finished.results}, cases,
                      finished.lines, finished.workers, finished.peak_workers, finished.seconds)
