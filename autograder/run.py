"""A grading run as a command starts it: its options, and the run with its printed report.

`python -m autograder grade|autograde` and the hub's `python -m classroom.hub grade` take the same options
(add_options), read them into one Options (options_of), and grade through run_and_report:

    options = options_of(parser, parser.parse_args())
    results = run_and_report(submissions, out, root, options)   # PipelineError when the grader itself failed
"""

from __future__ import annotations

import argparse
import csv
import signal
from dataclasses import dataclass
from pathlib import Path

from autograder import class_run, gradebook, reports
from autograder.grade import GRADER_ERROR, Result, check_limits
from autograder.sandbox import DEFAULT_LIMITS, Limits
from nbplumbing.adapter import PipelineError
from utils.timeouts import CELL_S, SUBMISSION_S

INTERRUPTED = 130  # the exit status of a program stopped by Ctrl-C (128 + SIGINT)
INTERRUPTED_NOTE = ("interrupted: every running submission was stopped; what was graded is kept, and the same command "
                    "grades the rest")


@dataclass(frozen=True)
class Options:
    """How to grade: class_run.grade_class's knobs, as the command lines set them."""

    workers: int | None = None  # None: one per core
    timeout: float = SUBMISSION_S
    cell_timeout: float | None = None  # None: the config's
    fast: bool = False  # COURSE_FAST=1 for the grading kernels
    fresh: bool = False  # grade again what an earlier run graded
    sandbox: Limits | None = DEFAULT_LIMITS  # None: unconfined (--no-sandbox)
    roster: frozenset[str] | None = None  # the students whose uploads are graded (--roster); None: anyone's


def add_options(parser: argparse.ArgumentParser) -> None:
    """The grading options, on a command line's parser (read them back with options_of)."""
    parser.add_argument("--workers", type=int, default=None,
                        help=f"submissions graded at once (default: one per core, {class_run.default_workers()} here)")
    parser.add_argument("--timeout", type=float, default=SUBMISSION_S,
                        help=f"wall-clock seconds for one whole submission (default: {SUBMISSION_S:g})")
    parser.add_argument("--cell-timeout", type=float, default=None,
                        help=f"nbgrader's per-cell limit, below --timeout (default: the config's, {CELL_S:g})")
    parser.add_argument("--fast", action="store_true", help="set COURSE_FAST=1 for the grading kernels")
    parser.add_argument("--fresh", action="store_true",
                        help="grade everything again (default: keep what an earlier run in the out folder graded)")
    parser.add_argument("--memory", type=float, default=Limits.memory_bytes / (1 << 30), metavar="GB",
                        help="memory bound of one submission, its kernel and ranks together (default: %(default)g)")
    parser.add_argument("--scratch", type=float, default=Limits.scratch_bytes / (1 << 30), metavar="GB",
                        help="disk space of one submission's scratch folder (default: %(default)g)")
    parser.add_argument("--no-sandbox", action="store_true",
                        help="run submissions unconfined, with the grader's rights (results say 'not sandboxed')")
    parser.add_argument("--roster", type=Path, default=None, metavar="CSV",
                        help="grade only the students of this roster (the first field of each line: the hub's "
                             "roster.csv as it is); an upload of anyone else is a failed row")


def options_of(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Options:
    """The Options that add_options' arguments say; a bad value ends the program with the parser's usage message."""
    if args.workers is not None and args.workers < 1:
        parser.error("--workers must be >= 1")
    if args.memory <= 0 or args.scratch <= 0:
        parser.error("--memory and --scratch must be > 0")
    try:
        check_limits(args.cell_timeout, args.timeout)
    except PipelineError as exc:
        parser.error(str(exc))
    sandbox = None if args.no_sandbox else Limits(int(args.memory * (1 << 30)),
                                                  scratch_bytes=int(args.scratch * (1 << 30)))
    try:
        roster = None if args.roster is None else read_roster(args.roster)
    except (OSError, ValueError) as exc:
        parser.error(f"--roster {args.roster}: {exc}")
    return Options(args.workers, args.timeout, args.cell_timeout, args.fast, args.fresh, sandbox, roster)


def read_roster(path: Path) -> frozenset[str]:
    """The student ids of a roster: the first field of each CSV line, less a `username` header and instructors
    (a third field `instructor`, as the hub's roster.csv has them); ValueError when it names none."""
    with open(path, newline="") as file:
        rows = [[cell.strip() for cell in row] for row in csv.reader(file)]
    ids = frozenset(row[0] for row in rows if row and row[0] and row[0].lower() != "username"
                    and (len(row) < 3 or row[2] != "instructor"))
    if not ids:
        raise ValueError(f"{path} names no student")
    return ids


def run_and_report(submissions: Path, out: Path, root: Path, options: Options,
                   shard: tuple[int, int] | None = None) -> list[Result]:
    """Grade (class_run.grade_class), then print the score table, the summary and where everything went.

    Raises PipelineError, naming them, when some uploads could not be read or the grader failed on some submissions
    (nothing was scored for them), once everything else is graded and written.
    A batch system stops a job with SIGTERM (Slurm at its time limit, scancel): it is handled as Ctrl-C is.
    """
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        results = class_run.grade_class(submissions, out, workers=options.workers, timeout=options.timeout,
                                        cell_timeout=options.cell_timeout, root=root, fresh=options.fresh,
                                        shard=shard, env={"COURSE_FAST": "1"} if options.fast else None,
                                        sandbox=options.sandbox, roster=options.roster)
    finally:
        signal.signal(signal.SIGTERM, previous)
    print(reports.format_table(results))
    print(reports.summary(results))
    print(f"wrote {out / gradebook.CSV_NAME}, {out / gradebook.LMS_NAME}, {out / 'gradebook.db'} and "
          f"{out / 'feedback'}/")
    problems = []
    if unread := [f"{r.student}/{r.assignment}" for r in results
                  if any(note.startswith(class_run.UNREADABLE) for note in r.notes)]:
        problems.append(f"{len(unread)} uploads could not be read ({', '.join(unread)}): their rows in "
                        f"{gradebook.CSV_NAME} say why; every other submission was graded")
    if faults := [f"{r.student}/{r.assignment}" for r in results if r.status == GRADER_ERROR]:
        problems.append(f"grader error in {len(faults)} submissions ({', '.join(faults)}): nothing was scored for "
                        "them; fix the grader (grades.csv's notes say what failed), then run the same command "
                        "again: it grades only them")
    if problems:
        raise PipelineError("; ".join(problems))
    return results
