"""Command line of grading: python -m autograder {grade,autograde,merge,feedback}.

Batch grading of a class: python -m autograder grade SUBMISSIONS [--workers K] [--timeout S] [--out DIR]
[--shard I/N] [--fresh] [--memory GB] [--scratch GB] [--no-sandbox] (see autograder/class_run.py and
autograder/sandbox/); `merge OUT SHARD...` joins shards (autograder/gradebook.py).
`autograde [--root PATH]` is the same grading, of <root>/submitted into <root>; `feedback` writes its HTML feedback
again. The class's logistics (the release, nbgrader's exchange, the student edition) are `python -m classroom`'s.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from autograder import class_run, gradebook, reports
from autograder.run import INTERRUPTED, INTERRUPTED_NOTE, add_options, options_of, run_and_report
from nbplumbing.adapter import REPO_ROOT, PipelineError, course_dir


def main(argv: list[str] | None = None) -> int:
    """Run one step; return the exit status (1 with the reason on stderr when the step could not run)."""
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if hasattr(args, "timeout"):
        args.options = options_of(parser, args)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    start = time.perf_counter()
    try:
        args.func(args)
    except PipelineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(INTERRUPTED_NOTE, file=sys.stderr)
        return INTERRUPTED
    print(f"({time.perf_counter() - start:.0f} s)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The parser of every step; each subcommand's `func` runs it with the parsed arguments."""
    parser = argparse.ArgumentParser(prog="python -m autograder", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    steps = parser.add_subparsers(dest="step", required=True)
    for step, what, func in (("autograde", "grade <root>/submitted into <root>: gradebook, grades.csv, feedback/",
                              _autograde),
                             ("feedback", "write HTML feedback for everything in <root>/autograded", _feedback)):
        sub = steps.add_parser(step, help=what)
        sub.add_argument("--root", type=Path, default=REPO_ROOT,
                         help="course root holding solutions/, submitted/, ... (default: this repository)")
        if step == "autograde":
            add_options(sub)
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
    add_options(sub)
    sub.set_defaults(func=_grade_folder)
    sub = steps.add_parser("merge", help="join the out folders of `grade --shard` runs into one")
    sub.add_argument("out", type=Path, help="the joined folder: gradebook.db, grades.csv, lms-grades.csv, ...")
    sub.add_argument("shards", type=Path, nargs="+", help="the shards' out folders")
    sub.set_defaults(func=_merge)
    return parser


def _shard(text: str) -> tuple[int, int]:
    """--shard's value, with argparse's usage message when it is not i/n."""
    try:
        return class_run.parse_shard(text)
    except PipelineError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


# ---- the steps: each takes the parsed arguments and prints what it did ------------------------------------------


def _feedback(args: argparse.Namespace) -> None:
    root = args.root.resolve()
    print(f"wrote {len(reports.regenerate_feedback(root))} feedback files into {course_dir(root, 'feedback')}/")


def _merge(args: argparse.Namespace) -> None:
    rows = gradebook.merge_shards(args.out, args.shards)
    print(f"joined {len(args.shards)} shards, {len(rows)} submissions, into {args.out}/")


def _autograde(args: argparse.Namespace) -> None:
    root = args.root.resolve()
    run_and_report(course_dir(root, "submitted"), root, root, args.options)


def _grade_folder(args: argparse.Namespace) -> None:
    run_and_report(args.submissions, args.out, args.root.resolve(), args.options, shard=args.shard)


if __name__ == "__main__":
    sys.exit(main())
