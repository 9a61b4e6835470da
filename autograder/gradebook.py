"""The class gradebook: templates whose ids agree, merging gradebooks, the CSVs, and joining shards.

nbgrader gives every row a random uuid, also the rows that describe the assignments (assignment, notebook, cells):
two `generate_assignment` runs of the same solutions/ disagree on every id. `canonical_ids` replaces those ids
by ones derived from the names, so that the template of any run (a worker, a resumed run, a shard on another
machine) is the same rows with the same ids, and `merge_gradebook`, a plain `INSERT OR IGNORE` of the rows a
gradebook lacks, joins the submissions of any of them. A template that differs (solutions/ changed between
runs) is refused by `check_same_template` instead of being mixed in.

    python -m autograder merge OUT SHARD_DIR...    # the shards' gradebooks, CSVs, autograded/ and feedback/
"""

from __future__ import annotations

import csv
import shutil
import sqlite3
import uuid
from collections.abc import Iterable
from pathlib import Path

from nbplumbing.adapter import PipelineError

# The rows that describe the assignments, as generate_assignment writes them, and the columns that point at them.
TEMPLATE_TABLES = ("assignment", "notebook", "base_cell", "grade_cells", "solution_cells", "task_cells", "source_cell")
ID_COLUMNS = {
    "assignment": ("id",), "notebook": ("id", "assignment_id"), "base_cell": ("id", "notebook_id"),
    "source_cell": ("id", "notebook_id"), "grade_cells": ("id",), "solution_cells": ("id",), "task_cells": ("id",),
}
LOGS = "grading-logs"  # in an out folder: nbgrader's log of every submission
RECORDS = "grading-records"  # in an out folder: every submission's result, <student>/<assignment>.json
CSV_NAME, LMS_NAME = "grades.csv", "lms-grades.csv"
CSV_FIELDS = ("student", "assignment", "status", "score", "max_score", "seconds", "tampered", "flagged", "notes",
              "fingerprint")
LMS_FIELDS = ("student_id", "assignment", "score", "max_score")


def _name_id(*parts: str) -> str:
    """A 32-character id that follows from the names (uuid5), the length of nbgrader's uuid4().hex ids."""
    return uuid.uuid5(uuid.NAMESPACE_URL, "/".join(parts)).hex


def canonical_ids(db: Path) -> None:
    """Replace the random ids of a template gradebook's assignment rows by ids derived from their names."""
    con = sqlite3.connect(db)
    try:
        new: dict[str, str] = {}
        for old, name in con.execute("SELECT id, name FROM assignment"):
            new[old] = _name_id("assignment", name)
        for old, name, assignment in con.execute("SELECT id, name, assignment_id FROM notebook"):
            new[old] = _name_id(new[assignment], name)
        for old, name, notebook, kind in con.execute("SELECT id, name, notebook_id, type FROM base_cell"):
            new[old] = _name_id(new[notebook], name, kind)
        for old, name, notebook in con.execute("SELECT id, name, notebook_id FROM source_cell"):
            new[old] = _name_id(new[notebook], "source", name)
        with con:
            con.execute("CREATE TEMP TABLE new_id (old TEXT PRIMARY KEY, new TEXT)")
            con.executemany("INSERT INTO new_id VALUES (?, ?)", new.items())
            for table, columns in ID_COLUMNS.items():
                for column in columns:
                    con.execute(f'UPDATE "{table}" SET "{column}" = (SELECT new FROM new_id WHERE old = "{column}") '
                                f'WHERE "{column}" IN (SELECT old FROM new_id)')
    finally:
        con.close()


def template_rows(db: Path) -> dict[str, list[tuple]]:
    """The assignment-describing rows of a gradebook, table by table, sorted (to compare two gradebooks)."""
    with sqlite3.connect(db) as con:
        return {t: sorted(con.execute(f'SELECT * FROM "{t}"'), key=repr) for t in TEMPLATE_TABLES}


def check_same_template(db: Path, other: Path, what: str) -> None:
    """Raise PipelineError when two gradebooks describe an assignment they share differently."""
    mine, theirs = template_rows(db), template_rows(other)
    for table in TEMPLATE_TABLES:
        ids = {row[0] for row in mine[table]} & {row[0] for row in theirs[table]}
        a = [r for r in mine[table] if r[0] in ids]
        b = [r for r in theirs[table] if r[0] in ids]
        if a != b:
            raise PipelineError(f"{what} was graded from other solutions than {db} (their {table} rows differ): "
                                "grade everything again from one solutions/")


def merge_gradebook(into: Path, source: Path) -> None:
    """Copy every row of gradebook `source` that `into` lacks (the template rows have the same ids in both)."""
    con = sqlite3.connect(into)
    try:
        con.execute("ATTACH DATABASE ? AS w", (str(source),))
        tables = [r[0] for r in con.execute("SELECT name FROM w.sqlite_master WHERE type='table'")]
        with con:
            for table in tables:
                if table != "alembic_version":
                    con.execute(f'INSERT OR IGNORE INTO main."{table}" SELECT * FROM w."{table}"')
        con.execute("DETACH DATABASE w")
    finally:
        con.close()


# One submission's rows in a worker's gradebook `w`, by table: the student's, and those under its submitted assignment
# of the assignment named :assignment in the class's gradebook (`main`: the template, not the worker's word for it).
_SUBMITTED = ("SELECT id FROM w.submitted_assignment WHERE student_id = :student AND assignment_id IN "
              "(SELECT id FROM main.assignment WHERE name = :assignment)")
_NOTEBOOKS = f"SELECT id FROM w.submitted_notebook WHERE assignment_id IN ({_SUBMITTED})"
SUBMISSION_ROWS = {"student": "id = :student", "submitted_assignment": f"id IN ({_SUBMITTED})",
                   "submitted_notebook": f"id IN ({_NOTEBOOKS})", "grade": f"notebook_id IN ({_NOTEBOOKS})",
                   "comment": f"notebook_id IN ({_NOTEBOOKS})"}


def merge_submission(into: Path, source: Path, student: str, assignment: str) -> None:
    """Copy into gradebook `into` the rows of one submission (student's `assignment`) that gradebook `source` holds,
    and nothing else: `source` is what a worker's nbgrader wrote (confined, but it read the submission), so its other
    rows (another student's grades, a changed template) are not taken. `into` must hold the template already.
    """
    con = sqlite3.connect(into)
    try:
        con.execute("ATTACH DATABASE ? AS w", (str(source),))
        with con:
            for table, where in SUBMISSION_ROWS.items():
                con.execute(f'INSERT OR IGNORE INTO main."{table}" SELECT * FROM w."{table}" WHERE {where}',
                            {"student": student, "assignment": assignment})
        con.execute("DETACH DATABASE w")
    finally:
        con.close()


def add_gradebook(into: Path, source: Path, what: str) -> None:
    """Start gradebook `into` as a copy of `source`, or merge `source` into it if both describe their shared
    assignments alike (PipelineError naming `what` otherwise)."""
    if into.is_file():
        check_same_template(into, source, what)
        merge_gradebook(into, source)
    else:
        shutil.copy(source, into)


# ---- the CSVs ---------------------------------------------------------------------------------------------------


def read_rows(path: Path) -> list[dict[str, str]]:
    """The rows of a grades.csv (none when there is no file)."""
    if not Path(path).is_file():
        return []
    with Path(path).open(newline="") as fh:
        return list(csv.DictReader(fh))


def write_rows(rows: Iterable[dict[str, str]], out: Path) -> None:
    """Write out/grades.csv (CSV_FIELDS) and out/lms-grades.csv (LMS_FIELDS), sorted by assignment and student.

    The LMS file has one row per submission: the student id, the assignment, the score and the maximum, with a
    submission that could not be graded scored 0, as in grades.csv.
    """
    rows = sorted(rows, key=lambda r: (r["assignment"], r["student"]))
    for name, fields in ((CSV_NAME, CSV_FIELDS), (LMS_NAME, LMS_FIELDS)):
        tmp = out / f".{name}.tmp"  # written whole, then renamed: an interrupted run never leaves half a file
        with tmp.open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
            writer.writeheader()
            writer.writerows({**r, "student_id": r["student"]} for r in rows)
        tmp.replace(out / name)


# ---- joining shards ------------------------------------------------------------------------------------------------


def merge_shards(out: Path, shards: list[Path]) -> list[dict[str, str]]:
    """Join the out folders of `make grade --shard i/n` runs into `out`; return the joined rows of grades.csv.

    Each shard brings its gradebook (merged row by row), its CSV rows, autograded/, feedback/ and grading logs.
    Refused: a shard without grades.csv, a submission graded in two shards, shards graded from other solutions.
    """
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    rows: dict[tuple[str, str], dict[str, str]] = {}
    db = out / "gradebook.db"
    db.unlink(missing_ok=True)
    for shard in map(Path, shards):
        if not (shard / CSV_NAME).is_file():
            raise PipelineError(f"{shard} holds no {CSV_NAME}: not the out folder of a finished `grade` run")
        for row in read_rows(shard / CSV_NAME):
            key = (row["assignment"], row["student"])
            if key in rows:
                raise PipelineError(f"{key[1]}/{key[0]} was graded in two shards (the second: {shard})")
            rows[key] = row
        if (shard / "gradebook.db").is_file():
            add_gradebook(db, shard / "gradebook.db", str(shard))
        for folder in ("autograded", "feedback", LOGS, RECORDS):
            if (shard / folder).is_dir():
                shutil.copytree(shard / folder, out / folder, dirs_exist_ok=True)
    write_rows(rows.values(), out)
    return list(rows.values())
