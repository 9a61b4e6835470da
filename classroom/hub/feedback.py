"""The feedback that `make hub-grade` returns: nbgrader's pages, each with the student's grading report on top."""

from __future__ import annotations

import re
from pathlib import Path

REPORT_MARK = "<!-- the grading report (make hub-grade) -->"


def add_grading_reports(folder: Path, lab: str) -> None:
    """In a course root's feedback folder, put each student's grading report (autograder/reports.py's
    grading_report.html: the score, the notes, the tampering found) at the top of each of their feedback pages of the
    lab: nbgrader's Fetch Feedback fetches one page per notebook, and no page of another name. Done again, it replaces
    the report it added before."""
    for report in sorted(folder.glob(f"*/{lab}/grading_report.html")):
        body = re.search(r"<body>(.*)</body>", report.read_text(), re.DOTALL)
        section = f"{REPORT_MARK}<section>{body.group(1) if body else ''}</section>{REPORT_MARK}"
        for page in sorted(set(report.parent.glob("*.html")) - {report}):
            text = re.sub(f"{re.escape(REPORT_MARK)}.*?{re.escape(REPORT_MARK)}", "", page.read_text(), flags=re.DOTALL)
            if tag := re.search(r"<body[^>]*>", text):
                page.write_text(text[:tag.end()] + section + text[tag.end():])
