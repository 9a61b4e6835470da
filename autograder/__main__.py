"""Command line: python -m autograder {release,autograde,feedback} [--root PATH].

Batch grading of a class: python -m autograder grade SUBMISSIONS [--workers K] [--timeout S] [--out DIR]
[--shard I/N] [--fresh] [--memory GB] [--scratch GB] [--no-sandbox] (see autograder/class_run.py and
autograder/sandbox/);
`merge OUT SHARD...` joins shards (autograder/gradebook.py).
`autograde` is the same grading, of <root>/submitted into <root>. nbgrader's exchange: `release-lab`, `collect`,
`return-feedback` LAB (classroom/exchange.py). The student edition: `export OUT` (classroom/export.py).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import time
from pathlib import Path

from autograder import class_run, gradebook, reports
from autograder.grade import GRADER_ERROR, check_limits
from autograder.pipeline import REPO_ROOT, PipelineError, course_dir, feedback, release
from autograder.sandbox import Limits
from classroom.exchange import STEPS, exchange_step
from classroom.export import export
from utils.timeouts import CELL_S, SUBMISSION_S

INTERRUPTED = 130  # the exit status of a program stopped by Ctrl-C (128 + SIGINT)


def main(argv: list[str] | None = None) -> int:
    """Run one step; return the exit status (1 with the reason on stderr when the step could not run)."""
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if getattr(args, "workers", None) is not None and args.workers < 1:  # None: one per core
        parser.error("--workers must be >= 1")
    if getattr(args, "memory", 1) <= 0 or getattr(args, "scratch", 1) <= 0:
        parser.error("--memory and --scratch must be > 0")
    if hasattr(args, "timeout"):
        try:
            check_limits(args.cell_timeout, args.timeout)
        except PipelineError as exc:
            parser.error(str(exc))
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    start = time.perf_counter()
    try:
        args.func(args)
    except PipelineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted: every running submission was stopped; what was graded is kept, and the same command "
              "grades the rest", file=sys.stderr)
        return INTERRUPTED
    print(f"({time.perf_counter() - start:.0f} s)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The parser of every step; each subcommand's `func` runs it with the parsed arguments."""
    parser = argparse.ArgumentParser(prog="python -m autograder", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    steps = parser.add_subparsers(dest="step", required=True)
    for step, what, func in (("release", "regenerate course/ from solutions/", _release),
                             ("autograde", "grade <root>/submitted into <root>: gradebook, grades.csv, feedback/",
                              _autograde),
                             ("feedback", "write HTML feedback for everything in <root>/autograded", _feedback)):
        sub = steps.add_parser(step, help=what)
        sub.add_argument("--root", type=Path, default=REPO_ROOT,
                         help="course root holding solutions/, submitted/, ... (default: this repository)")
        if step == "autograde":
            _grading_options(sub)
        sub.set_defaults(func=func)
    sub = steps.add_parser("grade", help="grade a folder of submissions in parallel",
                           description=class_run.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub.add_argument("submissions", type=Path,
                     help="<student>/<assignment>/<notebook>.ipynb, or a flat folder of LMS .ipynb/.zip files")
    sub.add_argument("--out", type=Path, default=Path("graded"),
                     help="where the gradebook, grades.csv, autograded/ and feedback/ go (default: ./graded)")
    sub.add_argument("--root", type=Path, default=REPO_ROOT, help="course root holding solutions/")
    sub.add_argument("--shard", type=_shard, default=None, metavar="I/N",
                     help="grade only shard I of N of the students (a stable split; join them with `merge`)")
    _grading_options(sub)
    sub.set_defaults(func=_grade_folder)
    sub = steps.add_parser("merge", help="join the out folders of `grade --shard` runs into one")
    sub.add_argument("out", type=Path, help="the joined folder: gradebook.db, grades.csv, lms-grades.csv, ...")
    sub.add_argument("shards", type=Path, nargs="+", help="the shards' out folders")
    sub.set_defaults(func=_merge)
    for step, (command, _) in STEPS.items():
        sub = steps.add_parser(step, help=f"nbgrader {command} of one lab, through the exchange")
        sub.add_argument("lab", help="the assignment, e.g. 00_ranks_and_alpha_beta")
        sub.add_argument("--root", type=Path, default=REPO_ROOT, help="course root holding solutions/")
        sub.add_argument("--exchange", type=Path, default=None, help="the exchange folder (default: nbgrader's config)")
        sub.set_defaults(func=_exchange)
    sub = steps.add_parser("export", help="write the student edition (a git repository) into a new folder")
    sub.add_argument("out", type=Path)
    sub.add_argument("--root", type=Path, default=REPO_ROOT, help="course root holding course/ and utils/")
    sub.set_defaults(func=_export)
    return parser


def _shard(text: str) -> tuple[int, int]:
    """--shard's value, with argparse's usage message when it is not i/n."""
    try:
        return class_run.parse_shard(text)
    except PipelineError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _grading_options(parser: argparse.ArgumentParser) -> None:
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


# ---- the steps: each takes the parsed arguments and prints what it did ------------------------------------------


def _release(args: argparse.Namespace) -> None:
    root = args.root.resolve()
    print(f"released {len(release(root))} notebooks into {course_dir(root, 'release')}/")


def _feedback(args: argparse.Namespace) -> None:
    root = args.root.resolve()
    print(f"wrote {len(feedback(root))} feedback files into {course_dir(root, 'feedback')}/")


def _merge(args: argparse.Namespace) -> None:
    rows = gradebook.merge_shards(args.out, args.shards)
    print(f"joined {len(args.shards)} shards, {len(rows)} submissions, into {args.out}/")


def _exchange(args: argparse.Namespace) -> None:
    print(exchange_step(args.step, args.lab, args.root.resolve(), args.exchange).log.strip())


def _export(args: argparse.Namespace) -> None:
    out = export(args.out, args.root.resolve())
    print(f"wrote the student edition into {out}/ (a git repository: push it as it is)")


def _autograde(args: argparse.Namespace) -> None:
    root = args.root.resolve()
    _grade(course_dir(root, "submitted"), root, root, args)


def _grade_folder(args: argparse.Namespace) -> None:
    _grade(args.submissions, args.out, args.root.resolve(), args)


def _grade(submissions: Path, out: Path, root: Path, args: argparse.Namespace) -> None:
    """Grade, then print the score table, the summary and where everything went.

    A batch system stops a job with SIGTERM (Slurm at its time limit, scancel): it is handled as Ctrl-C is.
    """
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        results = class_run.grade_class(submissions, out, workers=args.workers, timeout=args.timeout,
                                        cell_timeout=args.cell_timeout, root=root, fresh=args.fresh,
                                        shard=getattr(args, "shard", None),
                                        env={"COURSE_FAST": "1"} if args.fast else None,
                                        sandbox=None if args.no_sandbox else Limits(
                                            int(args.memory * (1 << 30)), scratch_bytes=int(args.scratch * (1 << 30))))
    finally:
        signal.signal(signal.SIGTERM, previous)
    print(reports.format_table(results))
    print(reports.summary(results))
    print(f"wrote {out / gradebook.CSV_NAME}, {out / gradebook.LMS_NAME}, {out / 'gradebook.db'} and "
          f"{out / 'feedback'}/")
    if faults := [f"{r.student}/{r.assignment}" for r in results if r.status == GRADER_ERROR]:
        raise PipelineError(f"grader error in {len(faults)} submissions ({', '.join(faults)}): nothing was scored "
                            "for them; fix the grader (grades.csv's notes say what failed), then run the same command "
                            "again: it grades only them")


if __name__ == "__main__":
    sys.exit(main())
