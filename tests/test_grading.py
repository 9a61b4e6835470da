"""Every lab, graded as the class grader grades it, in the session's one grading run (tests/grading_run.py).

For every lab: the solution gets full marks and runs top to bottom without an error anywhere and without a
word from its test cells; the untouched release gets zero, promptly; each broken case of tests/corpus/ loses
exactly the test cells it names, and scores full marks minus exactly their points. For every submission:
grading ends within its bound, no process is left behind, the feedback says what went wrong, tampering is
flagged exactly when it happened. For the run: one result per submission, a CSV and a merged gradebook that
agree, a summary that counts each outcome, and as many submissions graded at once as there are workers.
"""

from __future__ import annotations

import csv
import html
import re
import sqlite3

import pytest

from autograder import grade, gradebook, reports
from nbplumbing import adapter
from nbplumbing.processes import tagged_processes
from tests import corpus
from tests.common import (
    ASSIGNMENTS,
    CELL_TIMEOUT,
    KILL_SLACK,
    GradingRun,
    autograded,
    cell_seconds,
    cells_losing_points,
    lab_params,
    meta,
)
from tests.grading_run import GRADING_TIMEOUT, WORKERS

ALL = [(a, c.name) for a in ASSIGNMENTS for c in corpus.cases(a)]
CASES = lab_params(ALL, assignment_of=lambda v: v[0])
LABS = lab_params(ASSIGNMENTS)


def graded_here(grading: GradingRun, case: tuple[str, str]) -> grade.Result:
    """The result of a case; the lab was graded in this run whenever one of its tests was selected."""
    assert case in grading.results, f"{case} was not graded in this run: {sorted(grading.results)[:5]}..."
    return grading.results[case]


def feedback_text(grading: GradingRun, assignment: str, student: str) -> str:
    """Every feedback page of a submission, as plain text (tags dropped, entities decoded)."""
    pages = sorted((adapter.course_dir(grading.out, "feedback") / student / assignment).glob("*.html"))
    return "\n".join(html.unescape(re.sub(r"<[^>]+>", "", p.read_text())) for p in pages)


def report_text(grading: GradingRun, assignment: str, student: str) -> str:
    """What the instructor reads of a submission: its row of grades.csv (status, tampering, flags, notes)."""
    with (grading.out / gradebook.CSV_NAME).open(newline="") as fh:
        rows = [row for row in csv.DictReader(fh) if (row["student"], row["assignment"]) == (student, assignment)]
    assert len(rows) == 1, f"{(assignment, student)}: {len(rows)} rows in grades.csv"
    return "\n".join(f"{k}: {v}" for k, v in rows[0].items())


# ---- every case of every lab -----------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES)
def test_score_is_exactly_the_expected_one(grading: GradingRun, case: tuple[str, str]) -> None:
    """Full marks minus exactly the points of the test cells the case must lose, and those cells exactly."""
    r, expected = graded_here(grading, case), grading.cases[case]
    points = corpus.test_cells(r.assignment)
    full = sum(points.values())
    assert r.max_score == full, f"{case}: max score {r.max_score:g}, the notebook's test cells give {full:g}"
    assert r.status == expected.status, f"{case}: {r.status}, expected {expected.status}; notes: {r.notes}"
    want = full - sum(points[c] for c in expected.loses) if r.status == grade.GRADED else 0
    assert r.score == want, (f"{case}: {r.score:g}/{full:g}, expected {want:g} (losing {sorted(expected.loses)}); "
                             "what failed:\n  " + "\n  ".join(r.notes) + f"\ntampering: {r.tampered}")
    if r.status == grade.GRADED:
        assert cells_losing_points(grading, *case) == expected.loses


@pytest.mark.parametrize("case", CASES)
def test_grading_ends_within_its_bound(grading: GradingRun, case: tuple[str, str]) -> None:
    r = graded_here(grading, case)
    bound = GRADING_TIMEOUT + KILL_SLACK if r.status == grade.TIMED_OUT else GRADING_TIMEOUT
    assert r.seconds < bound, f"{case} took {r.seconds:.0f} s (bound {bound:g} s)"


@pytest.mark.parametrize("case", CASES)
def test_no_process_is_left_behind(grading: GradingRun, case: tuple[str, str]) -> None:
    """Nothing that carries the submission's tag (nbgrader, its kernel, every rank it forked) still runs."""
    r = graded_here(grading, case)
    if r.tag:  # empty when no nbgrader ran (a submission that could not be read)
        assert not tagged_processes(r.tag), f"{case}: processes left behind: {tagged_processes(r.tag)}"
    else:
        assert r.status == grade.FAILED, f"{case}: graded without a tagged nbgrader run"
    assert r.root is not None and not r.root.exists(), f"{case}: its temporary course root is still there"


@pytest.mark.parametrize("case", CASES)
def test_feedback_says_what_went_wrong(grading: GradingRun, case: tuple[str, str]) -> None:
    text = feedback_text(grading, *case)
    r = graded_here(grading, case)
    assert f"{r.score:g} / {r.max_score:g}" in text, f"{case}: the report does not give the score"
    for words in grading.cases[case].says:
        assert words in text, f"{case}: the feedback does not say {words!r}:\n{text[-3000:]}"


@pytest.mark.parametrize("case", CASES)
def test_the_instructors_report_says_what_the_student_is_not_told(grading: GradingRun, case: tuple[str, str]) -> None:
    """The case's `reports` words are in its row of grades.csv (a failing hidden check's message, which the
    student's feedback replaces by "a hidden check of exercise N.k failed"), and none of its `hides` words is in
    the student's feedback pages."""
    row = report_text(grading, *case)
    for words in grading.cases[case].reports:
        assert words in row, f"{case}: grades.csv's row does not say {words!r}:\n{row[-3000:]}"
    text = feedback_text(grading, *case)
    for words in grading.cases[case].hides:
        assert words not in text, f"{case}: the student's feedback shows {words!r}:\n{text[-3000:]}"


@pytest.mark.parametrize("case", CASES)
def test_tampering_is_flagged_and_only_then(grading: GradingRun, case: tuple[str, str]) -> None:
    r = graded_here(grading, case)
    assert bool(r.tampered) == grading.cases[case].tampered, f"{case}: tampering found: {r.tampered}"


@pytest.mark.parametrize("case", CASES)
def test_flagged_for_review_exactly_when_expected(grading: GradingRun, case: tuple[str, str]) -> None:
    """autograder/flags.py's constructs and the tests that did not run as written: never in a solution or a
    release, always in a case that uses them; in the result, its row of grades.csv and its report."""
    r = graded_here(grading, case)
    assert bool(r.flagged) == grading.cases[case].flagged, f"{case}: flagged for review: {r.flagged}"
    if r.flagged:
        assert f"for review: {r.flagged[0]}" in feedback_text(grading, *case)


# ---- every lab --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("assignment", LABS)
def test_solution_runs_top_to_bottom_without_errors_or_noisy_tests(grading: GradingRun, assignment: str) -> None:
    """Autograding executed every cell of the solution: the derivations, demos and experiments too.

    nbgrader runs on past a failing cell and scores only test cells, so a broken demo would cost no point:
    no cell may raise or write to stderr, and test cells print nothing at all.
    """
    problems = []
    for nb in autograded(grading, assignment, "solution"):
        for cell in (c for c in nb["cells"] if c["cell_type"] == "code"):
            where = meta(cell).get("grade_id", cell.get("id"))
            problems += [f"[{where}] {e}" for e in grade.cell_errors(cell)]
            if meta(cell).get("grade") and cell.get("outputs"):
                problems.append(f"[{where}] is a test cell and shows an output")
    assert not problems, f"the solution of {assignment}, run top to bottom:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("assignment", LABS)
def test_untouched_release_fails_fast(grading: GradingRun, assignment: str) -> None:
    """The stubs raise at once instead of hanging: no cell takes half of nbgrader's cell timeout, and the whole
    release (nbgrader's start, the kernel's, every cell) is graded in less than one cell timeout."""
    r = graded_here(grading, (assignment, "release"))
    [nb] = autograded(grading, assignment, "release")
    slow = {cell: t for cell, t in cell_seconds(nb).items() if t > CELL_TIMEOUT / 2}
    assert not slow, f"cells of the untouched release that take over half of the {CELL_TIMEOUT:g} s timeout: {slow}"
    assert r.seconds < CELL_TIMEOUT, f"grading the untouched release took {r.seconds:.0f} s: something waits"


# ---- the run as a whole -----------------------------------------------------------------------------------------


def test_every_submission_is_graded_once(grading: GradingRun) -> None:
    assert sorted(grading.results) == sorted(grading.cases)
    assert sum(line.startswith("[") for line in grading.lines) == len(grading.cases), grading.lines


def test_workers_grade_at_once(grading: GradingRun) -> None:
    """The first submissions wait for each other before grading (a barrier, not a clock), so `workers` of them
    ran nbgrader at the same time, each in its own course root; the exact scores above show none disturbed
    another."""
    assert grading.peak_workers == grading.workers == WORKERS
    roots = [r.root for r in grading.results.values()]
    assert len(set(roots)) == len(roots), "two submissions shared a course root"


def test_csv_and_class_gradebook_agree(grading: GradingRun) -> None:
    with (grading.out / "grades.csv").open() as fh:
        rows = {(row["assignment"], row["student"]): row for row in csv.DictReader(fh)}
    assert sorted(rows) == sorted(grading.results)
    for key, r in grading.results.items():
        assert float(rows[key]["score"]) == r.score and rows[key]["status"] == r.status
        assert bool(rows[key]["tampered"]) == bool(r.tampered) and rows[key]["flagged"] == "; ".join(r.flagged)
        if r.status == grade.GRADED:
            assert adapter.read_score(grading.out, r.student, r.assignment) == (r.score, r.max_score)
    graded = sum(r.status == grade.GRADED for r in grading.results.values())
    with sqlite3.connect(grading.out / "gradebook.db") as con:  # one row per graded submission, none twice
        [(count,)] = con.execute("SELECT COUNT(*) FROM submitted_assignment").fetchall()
    assert count == graded


def test_summary_counts_each_outcome(grading: GradingRun) -> None:
    results = list(grading.results.values())
    want = {s: sum(c.status == s for c in grading.cases.values()) for s in (grade.GRADED, grade.FAILED,
                                                                             grade.TIMED_OUT)}
    text = reports.summary(results)
    assert text.startswith(f"{want[grade.GRADED]} graded, {want[grade.FAILED]} failed, "
                           f"{want[grade.TIMED_OUT]} timed out"), text
    tampered, _, flagged = text.partition("; flagged for review in ")
    for key, case in grading.cases.items():
        assert (f"{key[1]}/{key[0]}" in tampered) == case.tampered, f"{key}: tampering in the summary: {text}"
        assert (f"{key[1]}/{key[0]}" in flagged) == case.flagged, f"{key}: flagged in the summary: {text}"
