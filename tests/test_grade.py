"""The class grader's own behaviour, beyond the session's grading run (tests/test_grading.py reads that one).

- past its wall-clock limit a submission is stopped with its whole process tree (slow: about 35 s);
- a flat LMS folder through the command line, and `autograde` of a course root's submitted/ folder, both on an
  empty notebook, which fails without running nbgrader's autograde;
- a notebook outside an assignment folder is refused with a message that says where it belongs;
- the process helpers find and stop a tagged process and its children (on any system psutil supports).
"""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from autograder import grade, pipeline
from autograder.__main__ import main
from autograder.pipeline import PipelineError
from autograder.processes import TAG_VARIABLE, kill_tagged, new_tag, tagged_processes
from tests import corpus
from tests.common import (
    ASSIGNMENTS,
    KILL_SLACK,
    GradingRun,
    lab_params,
    meta,
    notebook,
    page_text,
    secret_lines,
    text_lines,
)
from tests.corpus.common import HIDDEN, write_case


@pytest.mark.slow
@pytest.mark.lab00
def test_submission_limit_kills_the_whole_tree(tmp_path: Path) -> None:
    """Past its wall-clock limit a submission is stopped: nbgrader, its kernel and the ranks the kernel forked."""
    [hang] = [c for c in corpus.cases("00_ranks_and_alpha_beta") if c.name == "hang_no_interrupt"]
    write_case(tmp_path / "submissions", "00_ranks_and_alpha_beta", hang)
    [entry] = grade.collect(tmp_path / "submissions", tmp_path)
    template = grade.prepare_template([entry.assignment], tmp_path)
    limit = 30.0  # the course's cell limit (120 s) is longer: only the submission limit can stop it
    r = grade.grade_one(entry, template, tmp_path, timeout=limit, env={"COURSE_FAST": "1"})
    assert r.status == grade.TIMED_OUT and r.score == 0, (r.status, r.notes)
    assert any("grading stopped after 30 s" in n for n in r.notes), r.notes
    assert r.seconds < limit + KILL_SLACK, r.seconds
    assert not tagged_processes(r.tag), "processes of the stopped submission are still running"


def test_lms_folder_through_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A flat LMS folder (zip_collect's documented naming); an empty file fails fast, and says so."""
    folder = tmp_path / "download"
    folder.mkdir()
    (folder / "lab00_bitdiddle_attempt_2026-11-29-10-00-00_ranks_and_alpha_beta.ipynb").write_bytes(b"")
    assert main(["grade", str(folder), "--out", str(tmp_path / "out"), "--workers", "1"]) == 0
    printed = capsys.readouterr().out
    assert "bitdiddle" in printed and "0 graded, 1 failed, 0 timed out" in printed, printed


def test_autograde_grades_the_course_roots_submissions_into_it(tmp_path: Path) -> None:
    """`make autograde` is the class grader run on <root>/submitted, writing into <root>."""
    root = tmp_path / "course"
    root.mkdir()
    (root / "solutions").symlink_to(corpus.ROOT / "solutions")
    target = root / "submitted" / "alyssa" / "00_ranks_and_alpha_beta"
    target.mkdir(parents=True)
    (target / "ranks_and_alpha_beta.ipynb").write_text("")
    assert main(["autograde", "--root", str(root), "--workers", "1"]) == 0
    with (root / "grades.csv").open() as fh:
        [row] = list(csv.DictReader(fh))
    assert (row["student"], row["status"], row["score"]) == ("alyssa", grade.FAILED, "0")
    assert (root / "feedback" / "alyssa" / "00_ranks_and_alpha_beta" / "grading_report.html").is_file()


def test_a_notebook_outside_an_assignment_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "ben").mkdir()
    (tmp_path / "ben" / "ranks_and_alpha_beta.ipynb").write_text("{}")
    with pytest.raises(PipelineError, match=r"ben/<assignment>/<notebook>.ipynb"):
        grade.collect(tmp_path, tmp_path)


def test_a_tagged_process_and_its_children_are_found_and_stopped() -> None:
    tag = new_tag()
    # A shell that starts a child and waits: the child inherits the tag through the environment.
    proc = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                             "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
                             "print('started', flush=True); time.sleep(60)"],
                            env={**os.environ, **tag}, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "started"
        found = tagged_processes(tag[TAG_VARIABLE])
        assert proc.pid in found and len(found) == 2, found
        assert sorted(kill_tagged(tag[TAG_VARIABLE])) == sorted(found)
        assert proc.wait(timeout=10) != 0
        assert not tagged_processes(tag[TAG_VARIABLE])
    finally:
        proc.kill()


# ---- feedback keeps the hidden tests hidden (reads the session's grading run) ------------------------------------


@pytest.mark.parametrize("assignment", lab_params(ASSIGNMENTS))
def test_feedback_shows_failures_but_no_hidden_test(grading: GradingRun, assignment: str) -> None:
    """Every submission's nbgrader feedback: no line of a hidden test, in the source or in a traceback; each
    failing test cell's error message and its score are there; the solution's pages show no error at all
    (lab 00's deliberate deadlock is caught and printed, not raised)."""
    hidden = secret_lines(assignment, HIDDEN)
    assert hidden, f"{assignment} has no hidden test lines to look for"
    for (a, student), r in grading.results.items():
        if a != assignment or r.status != grade.GRADED:
            continue
        feedback = pipeline.course_dir(grading.out, "feedback") / student / assignment
        for path in sorted((pipeline.course_dir(grading.out, "autograded") / student / assignment).glob("*.ipynb")):
            nb, page = notebook(path), feedback / f"{path.stem}.html"
            raw, text = page.read_text(), page_text(page)
            leaked = sorted(hidden & text_lines(text))
            assert not leaked, f"{student}/{assignment}: the feedback shows hidden test lines: {leaked[:5]}"
            for cell in nb["cells"]:
                info = meta(cell)
                if info.get("grade") and not info.get("solution") and (errors := grade.cell_errors(cell)):
                    first = errors[0].splitlines()[0]
                    assert first in text, f"{student}/{assignment}: {info['grade_id']}'s error is not shown: {first}"
            assert re.search(r"Score: [\d.]+ / [\d.]+", text), f"{student}/{assignment}: no score in {page.name}"
            if student == "solution":
                assert "output_error" not in raw and "output_stderr" not in raw, \
                    f"the solution's feedback of {assignment} shows an error or stderr output"
