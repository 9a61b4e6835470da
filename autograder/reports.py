"""What a grading run reports: the feedback pages, the rows of grades.csv, the score table and the summary line.

    write_feedback(results, out)       # out/feedback/<student>/<assignment>/: nbgrader's HTML and grading_report.html
    print(format_table(results)); print(summary(results))

Used by a class run (autograder/class_run.py) as each submission finishes and at its end; the gradebook and the
CSV files themselves are autograder/gradebook.py's.
"""

from __future__ import annotations

import html
from pathlib import Path

from autograder.grade import FAILED, GRADED, TIMED_OUT, Result
from autograder.pipeline import course_dir, run_nbgrader
from autograder.sandbox import NOT_SANDBOXED


def write_feedback(results: list[Result], out: Path) -> None:
    """nbgrader's HTML feedback for the graded ones, and a short report page for every submission."""
    if any(r.status == GRADED for r in results):
        run_nbgrader("generate_feedback", "*", "--force", f"--CourseDirectory.source_directory={work_source(out)}",
                     root=out)
    for r in results:
        folder = course_dir(out, "feedback") / r.student / r.assignment
        folder.mkdir(parents=True, exist_ok=True)
        items = [*r.notes, *(f"tampering: {t}" for t in r.tampered)]
        body = "".join(f"<li><pre>{html.escape(i)}</pre></li>" for i in items) or "<li>nothing to report</li>"
        (folder / "grading_report.html").write_text(
            f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{html.escape(r.assignment)}</title></head>"
            f"<body><h1>{html.escape(r.assignment)}: {r.score:g} / {r.max_score:g} ({r.status})</h1>"
            f"<ul>{body}</ul></body></html>\n")


def work_source(out: Path) -> str:
    """generate_feedback wants a source folder to exist: the course root's own, or an empty one in a class folder."""
    source = course_dir(out, "source")
    if not source.is_dir():
        source = out / ".source"
        source.mkdir(exist_ok=True)
    return str(source)


def row_of(r: Result) -> dict[str, str]:
    """A result as a row of grades.csv (gradebook.CSV_FIELDS); tampering and notes joined with "; "."""
    return {"student": r.student, "assignment": r.assignment, "status": r.status, "score": f"{r.score:g}",
            "max_score": f"{r.max_score:g}", "seconds": f"{r.seconds:.0f}", "tampered": "; ".join(r.tampered),
            "notes": "; ".join(r.notes), "fingerprint": r.fingerprint}


def result_of(row: dict[str, str]) -> Result:
    """A row of grades.csv as a result again (for a resumed run)."""
    split = lambda text: text.split("; ") if text else []  # noqa: E731
    return Result(row["student"], row["assignment"], row["status"], float(row["score"]), float(row["max_score"]),
                  float(row["seconds"]), tampered=split(row["tampered"]), notes=split(row["notes"]),
                  fingerprint=row.get("fingerprint", ""))


def format_table(results: list[Result]) -> str:
    """The score table: student, assignment, status, score, tampering."""
    rows = [("student", "assignment", "status", "score", "tampered")]
    rows += [(r.student, r.assignment, r.status, f"{r.score:g}/{r.max_score:g}", "yes" if r.tampered else "")
             for r in results]
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    return "\n".join("  ".join(f"{v:<{w}}" for v, w in zip(row, widths, strict=True)).rstrip() for row in rows)


def summary(results: list[Result]) -> str:
    """One line: how many were graded, failed, timed out, which were tampered with, and whether unconfined."""
    count = {s: sum(r.status == s for r in results) for s in (GRADED, FAILED, TIMED_OUT)}
    tampered = [f"{r.student}/{r.assignment}" for r in results if r.tampered]
    line = f"{count[GRADED]} graded, {count[FAILED]} failed, {count[TIMED_OUT]} timed out"
    line += f"; tampering found in {len(tampered)}: {', '.join(tampered)}" if tampered else ""
    return line + (f"; {NOT_SANDBOXED}" if any(NOT_SANDBOXED in r.notes for r in results) else "")
