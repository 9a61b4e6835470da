"""Batch grading of a class (autograder/grade.py) on a corpus of broken lab 00 submissions (tests/corpus/).

One run grades the whole corpus with 8 workers at once on a 2-core machine (each submission launches its own
ranks), and every test asserts on that run: each submission's score is exactly the expected one (full marks
minus exactly what it broke; stderr noise costs nothing), grading ends within its bound, no process of any
submission is left, the feedback says what went wrong, tampering is flagged and earns nothing, and the class
gradebook merged from the workers' gradebooks holds the same scores as the CSV. Scores equal to the expected
table are the "same as graded one by one" check (each expectation is what one submission alone must get).

The corpus runs with nbgrader's per-cell limit lowered to CELL_TIMEOUT (the command line's --cell-timeout,
i.e. --Execute.timeout) so that the infinite loop costs two cells of 40 s instead of two of 120 s, and with a
per-submission limit of TIMEOUT, which stops the submission that ignores interrupts. About 5 minutes on 2 cores.
Run just these with `python -m pytest tests/test_grade.py`.
"""

from __future__ import annotations

import csv
import html
import re
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from autograder import grade, pipeline
from tests.corpus import mutants

WORKERS = 8
TIMEOUT = 300.0  # seconds for one whole submission (the infinite loop needs about 225 under load)
CELL_TIMEOUT = 40.0  # nbgrader's per-cell limit for the corpus (the course's config says 120)
KILL_SLACK = 20.0  # from the limit to every process of the submission gone


@dataclass(frozen=True)
class Run:
    out: Path
    results: dict[str, grade.Result]
    cases: dict[str, mutants.Case]
    lines: list[str]  # the progress display
    seconds: float


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    submissions = tmp_path_factory.mktemp("submissions")
    cases = mutants.write(submissions)
    out = tmp_path_factory.mktemp("graded")
    lines: list[str] = []
    start = time.monotonic()
    results = grade.grade_class(submissions, out, workers=WORKERS, timeout=TIMEOUT, cell_timeout=CELL_TIMEOUT,
                                env={"COURSE_FAST": "1"}, progress=lines.append)
    return Run(out, {r.student: r for r in results}, cases, lines, time.monotonic() - start)


def feedback_text(out: Path, student: str) -> str:
    """Every feedback page of a student, as plain text (tags dropped, entities decoded)."""
    pages = sorted((pipeline.course_dir(out, "feedback") / student).rglob("*.html"))
    return "\n".join(html.unescape(re.sub(r"<[^>]+>", "", p.read_text())) for p in pages)


CASES = [c.name for c in mutants.CASES]


def test_every_submission_is_graded_once(run: Run) -> None:
    assert sorted(run.results) == sorted(CASES)
    assert sum(line.startswith("[") for line in run.lines) == len(CASES), run.lines


@pytest.mark.parametrize("case", CASES)
def test_score_is_exactly_the_expected_one(run: Run, case: str) -> None:
    r, expected = run.results[case], run.cases[case]
    assert (r.status, r.score) == (expected.status, expected.expected), (
        f"{case}: {r.status} {r.score:g}/{r.max_score:g}, expected {expected.status} {expected.expected:g}; "
        f"notes: {r.notes}; tampering: {r.tampered}")
    assert r.max_score == mutants.FULL


@pytest.mark.parametrize("case", CASES)
def test_grading_ends_within_its_bound(run: Run, case: str) -> None:
    r = run.results[case]
    bound = 5.0 if case == "empty" else TIMEOUT + KILL_SLACK
    assert r.seconds < bound, f"{case} took {r.seconds:.0f} s (bound {bound:g} s)"


@pytest.mark.parametrize("case", CASES)
def test_no_process_is_left_behind(run: Run, case: str) -> None:
    """Nothing that carries the submission's tag (nbgrader, its kernel, every rank it forked) still runs."""
    r = run.results[case]
    left = grade.tagged_processes(r.tag)
    assert not left, f"{case}: processes left behind: {left}"
    assert r.root is not None and not r.root.exists(), f"{case}: its temporary course root is still there"


@pytest.mark.parametrize("case", [c.name for c in mutants.CASES if c.says])
def test_feedback_says_what_went_wrong(run: Run, case: str) -> None:
    text = feedback_text(run.out, case)
    for words in run.cases[case].says:
        assert words in text, f"{case}: the feedback does not say {words!r}:\n{text[-3000:]}"


@pytest.mark.parametrize("case", CASES)
def test_tampering_is_flagged_and_only_then(run: Run, case: str) -> None:
    r = run.results[case]
    assert bool(r.tampered) == run.cases[case].tampered, f"{case}: tampering found: {r.tampered}"


def test_csv_and_class_gradebook_agree(run: Run) -> None:
    with (run.out / "grades.csv").open() as fh:
        rows = {row["student"]: row for row in csv.DictReader(fh)}
    assert sorted(rows) == sorted(CASES)
    for name, r in run.results.items():
        assert float(rows[name]["score"]) == r.score and rows[name]["status"] == r.status
        assert bool(rows[name]["tampered"]) == bool(r.tampered)
    graded = [(n, "00_ranks_and_alpha_beta") for n, r in run.results.items() if r.status == grade.GRADED]
    from_db = {s.student: s.score for s in pipeline.read_scores(run.out, graded)}
    assert from_db == {n: run.results[n].score for n, _ in graded}
    with sqlite3.connect(run.out / "gradebook.db") as con:  # one row per graded submission, none twice
        [(count,)] = con.execute("SELECT COUNT(*) FROM submitted_assignment").fetchall()
    assert count == len(graded)


def test_summary_counts_each_outcome(run: Run) -> None:
    text = grade.summary(list(run.results.values()))
    want = {s: sum(c.status == s for c in mutants.CASES) for s in (grade.GRADED, grade.FAILED, grade.TIMED_OUT)}
    assert text.startswith(f"{want[grade.GRADED]} graded, {want[grade.FAILED]} failed, "
                           f"{want[grade.TIMED_OUT]} timed out"), text
    assert "patched_helper" in text and "tampered_test" in text and "deleted_test" in text


def test_submission_limit_kills_the_whole_tree(tmp_path: Path) -> None:
    """Past its wall-clock limit a submission is stopped: nbgrader, its kernel and the ranks the kernel forked."""
    submissions = tmp_path / "submissions"
    hang = next(c for c in mutants.CASES if c.name == "hang_no_interrupt")
    mutants.write(submissions, [hang])
    [entry] = grade.collect(submissions, tmp_path)
    template = grade.prepare_template([entry.assignment], tmp_path)
    limit = 45.0  # the course's cell limit (120 s) is longer: only the submission limit can stop it
    r = grade.grade_one(entry, template, tmp_path, timeout=limit, env={"COURSE_FAST": "1"})
    assert r.status == grade.TIMED_OUT and r.score == 0, (r.status, r.notes)
    assert any("grading stopped after 45 s" in n for n in r.notes), r.notes
    assert r.seconds < limit + KILL_SLACK, r.seconds
    assert not grade.tagged_processes(r.tag), "processes of the stopped submission are still running"


def test_lms_folder_and_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A flat LMS folder (zip_collect's documented naming), through the command line; an empty file fails fast."""
    from autograder.__main__ import main

    folder = tmp_path / "download"
    folder.mkdir()
    (folder / "lab00_bitdiddle_attempt_2026-11-29-10-00-00_ranks_and_alpha_beta.ipynb").write_bytes(b"")
    assert main(["grade", str(folder), "--out", str(tmp_path / "out"), "--workers", "2"]) == 0
    printed = capsys.readouterr().out
    assert "bitdiddle" in printed and "0 graded, 1 failed, 0 timed out" in printed, printed


def test_replaced_helper_fools_nbgrader_but_not_the_grader(run: Run) -> None:
    """patched_helper: nbgrader's own score for test_ring_shift is full (its torch.equal says yes to everything);
    the grader withholds it (a manual score of 0), so the submission ends with the points of a wrong ring_shift."""
    query = ("SELECT g.auto_score, g.manual_score FROM grade g JOIN submitted_notebook sn ON g.notebook_id = sn.id "
             "JOIN submitted_assignment sa ON sn.assignment_id = sa.id JOIN base_cell bc ON g.cell_id = bc.id "
             "WHERE sa.student_id = 'patched_helper' AND bc.name = 'test_ring_shift'")
    with sqlite3.connect(run.out / "gradebook.db") as con:
        [(auto, manual)] = con.execute(query).fetchall()
    assert (auto, manual) == (4.0, 0.0)
