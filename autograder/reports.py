"""What a grading run reports: the feedback pages, the rows of grades.csv, the records of the results, the score
table and the summary line.

    write_feedback(results, out)       # out/feedback/<student>/<assignment>/grading_report.html, beside nbgrader's
    write_records(results, out)        # out/grading-records/<student>/<assignment>.json, read back by read_records
    print(format_table(results)); print(summary(results))

Used by a class run (autograder/class_run.py) as each submission finishes and at its end; the gradebook and the
CSV files themselves are autograder/gradebook.py's.
"""

from __future__ import annotations

import html
import json
import tempfile
from dataclasses import fields
from pathlib import Path

from autograder.grade import FAILED, GRADED, GRADER_ERROR, TIMED_OUT, Result, Status, make_feedback
from autograder.gradebook import RECORDS
from autograder.sandbox import NOT_SANDBOXED
from autograder.scrub import assignment_answers
from nbplumbing.adapter import PipelineError, assignment_names, course_dir

WORKER_FIELDS = ("root", "tag")  # a Result's fields that only its worker needs
REPORT_PAGE = "grading_report.html"  # beside nbgrader's page(s) in feedback/<student>/<assignment>/
NO_PAGE = ("no feedback page could be made from the graded notebook (nbgrader's generate_feedback failed on it; "
           "its log in grading-logs/ says why): the score stands")


def write_feedback(results: list[Result], out: Path) -> None:
    """A short report page for every submission, beside the feedback page that its grading made (grade_one): the
    student's, so its notes and not what was withheld from them (Result.withheld, the CSV's).

    A graded submission without a page (nbgrader could not convert its notebook) gets the note NO_PAGE: the report
    pages are written whatever happened.
    """
    for r in results:
        folder = course_dir(out, "feedback") / r.student / r.assignment
        made = [page for page in folder.glob("*.html") if page.name != REPORT_PAGE]
        if r.status == GRADED and not made and NO_PAGE not in r.notes:
            r.notes.append(NO_PAGE)
        folder.mkdir(parents=True, exist_ok=True)
        items = [*r.notes, *(f"tampering: {t}" for t in r.tampered), *(f"for review: {f}" for f in r.flagged)]
        body = "".join(f"<li><pre>{html.escape(i)}</pre></li>" for i in items) or "<li>nothing to report</li>"
        (folder / REPORT_PAGE).write_text(
            f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{html.escape(r.assignment)}</title></head>"
            f"<body><h1>{html.escape(r.assignment)}: {_score_words(r)} ({r.status})</h1>"
            f"<ul>{body}</ul></body></html>\n")


def regenerate_feedback(root: Path) -> list[Path]:
    """Write HTML feedback for everything in the course root's autograded/ into its feedback/ (`python -m autograder
    feedback`), with no line of the answers in any output; return the files written."""
    autograded = course_dir(root, "autograded")
    if not any(autograded.glob("*/*/*.ipynb")):
        raise PipelineError(f"nothing autograded in {autograded}: run the autograde first")
    answers = assignment_answers(course_dir(root, "source"), course_dir(root, "release"), assignment_names(root))
    generate_feedback(root, answers)
    return sorted(course_dir(root, "feedback").glob("*/*/*.html"))


def generate_feedback(root: Path, answers: dict[str, list[str]]) -> None:
    """nbgrader generate_feedback of every graded submission of a course root, with `answers` (assignment -> answer
    lines, autograder/scrub.py) hidden from every output (NbgraderError on failure)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json") as lines:
        json.dump(answers, lines)
        lines.flush()
        make_feedback(Path(root).resolve(), Path(lines.name), "*")


def _score_words(r: Result) -> str:
    return "no score" if r.status == GRADER_ERROR else f"{r.score:g} / {r.max_score:g}"


def row_of(r: Result) -> dict[str, str]:
    """A result as a row of grades.csv (gradebook.CSV_FIELDS); tampering and notes joined with "; ", the notes
    followed by what was withheld from the student (a hidden check's message: the CSV is the instructor's)."""
    score = "" if r.status == GRADER_ERROR else f"{r.score:g}"  # no score: the grading, not the work, failed
    return {"student": r.student, "assignment": r.assignment, "status": r.status, "score": score,
            "max_score": f"{r.max_score:g}", "seconds": f"{r.seconds:.0f}", "tampered": "; ".join(r.tampered),
            "flagged": "; ".join(r.flagged), "notes": "; ".join([*r.notes, *r.withheld]), "fingerprint": r.fingerprint}


def write_records(results: list[Result], out: Path) -> None:
    """Write each result whole, as out/RECORDS/<student>/<assignment>.json: what a resumed run reads back
    (read_records), field by field, where grades.csv joins lists into one text. A worker's own fields (its course
    root and process tag, gone once its result is merged) are left out."""
    for r in results:
        path = out / RECORDS / r.student / f"{r.assignment}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        record = {f.name: getattr(r, f.name) for f in fields(Result) if f.name not in WORKER_FIELDS}
        tmp = path.with_suffix(".tmp")  # written whole, then renamed: an interrupted run never leaves half a record
        tmp.write_text(json.dumps(record, indent=1) + "\n")
        tmp.replace(path)


def read_records(out: Path) -> list[Result]:
    """The results recorded in out by write_records, as they were written; a record that cannot be read as a result
    (from another version of the grader) is passed over, so that its submission is graded again."""
    results = []
    for path in sorted((out / RECORDS).glob("*/*.json")):
        try:
            record = json.loads(path.read_text())
            results.append(Result(**{**record, "status": Status(record["status"])}))
        except (ValueError, TypeError, KeyError):
            continue
    return results


def format_table(results: list[Result]) -> str:
    """The score table: student, assignment, status, score, tampering, flags for review."""
    rows = [("student", "assignment", "status", "score", "tampered", "flagged")]
    rows += [(r.student, r.assignment, r.status, "-" if r.status == GRADER_ERROR else f"{r.score:g}/{r.max_score:g}",
              "yes" if r.tampered else "", str(len(r.flagged)) if r.flagged else "") for r in results]
    widths = [max(len(row[i]) for row in rows) for i in range(6)]
    return "\n".join("  ".join(f"{v:<{w}}" for v, w in zip(row, widths, strict=True)).rstrip() for row in rows)


def summary(results: list[Result]) -> str:
    """One line: how many were graded, failed, timed out; which were tampered with, flagged for review, or met a
    grader error (to grade again once the grader is fixed); and whether unconfined."""
    count = {s: sum(r.status == s for r in results) for s in (GRADED, FAILED, TIMED_OUT)}
    names = lambda which: [f"{r.student}/{r.assignment}" for r in results if which(r)]  # noqa: E731
    tampered, flagged = names(lambda r: r.tampered), names(lambda r: r.flagged)
    faults = names(lambda r: r.status == GRADER_ERROR)
    line = f"{count[GRADED]} graded, {count[FAILED]} failed, {count[TIMED_OUT]} timed out"
    line += f"; tampering found in {len(tampered)}: {', '.join(tampered)}" if tampered else ""
    line += f"; flagged for review in {len(flagged)}: {', '.join(flagged)}" if flagged else ""
    line += (f"; GRADER ERROR in {len(faults)} (no score; grade them again once the grader is fixed): "
             f"{', '.join(faults)}") if faults else ""
    return line + (f"; {NOT_SANDBOXED}" if any(NOT_SANDBOXED in r.notes for r in results) else "")
