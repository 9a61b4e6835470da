"""Command line: python -m autograder {release,autograde,feedback} [--root PATH].

Batch grading of a class: python -m autograder grade SUBMISSIONS [--workers K] [--timeout S] [--out DIR]
(see autograder/grade.py).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from autograder.pipeline import (
    REPO_ROOT,
    PipelineError,
    autograde,
    course_dir,
    feedback,
    format_table,
    release,
    write_csv,
)


def main(argv: list[str] | None = None) -> int:
    """Run one pipeline step; return the exit status (1 with the reason on stderr when it fails)."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["grade"]:
        return grade_main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m autograder", description=__doc__)
    parser.add_argument("step", choices=["release", "autograde", "feedback"])
    parser.add_argument("--root", type=Path, default=REPO_ROOT,
                        help="course root holding solutions/, submitted/, ... (default: this repository)")
    parser.add_argument("--csv", type=Path, default=None,
                        help="where autograde writes the scores (default: <root>/grades.csv)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    root = args.root.resolve()
    start = time.perf_counter()
    try:
        if args.step == "release":
            written = release(root)
            print(f"released {len(written)} notebooks into {course_dir(root, 'release')}/")
        elif args.step == "autograde":
            scores = autograde(root)
            print(format_table(scores))
            csv_path = write_csv(scores, args.csv or root / "grades.csv")
            print(f"wrote {csv_path}")
        else:
            written = feedback(root)
            print(f"wrote {len(written)} feedback files into {course_dir(root, 'feedback')}/")
    except PipelineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"({time.perf_counter() - start:.0f} s)")
    return 0


def grade_main(argv: list[str]) -> int:
    """`grade`: grade a folder of submissions in parallel; exit 1 if the grader could not run at all."""
    from autograder import grade  # imports nothing slow, but only this command needs it

    parser = argparse.ArgumentParser(prog="python -m autograder grade", description=grade.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("submissions", type=Path,
                        help="<student>/<assignment>/<notebook>.ipynb, or a flat folder of LMS .ipynb/.zip files")
    parser.add_argument("--workers", type=int, default=2, help="submissions graded at once (default: 2)")
    parser.add_argument("--timeout", type=float, default=900.0,
                        help="wall-clock seconds for one whole submission (default: 900)")
    parser.add_argument("--cell-timeout", type=float, default=None,
                        help="nbgrader's per-cell limit, overriding Execute.timeout of the config")
    parser.add_argument("--out", type=Path, default=Path("graded"),
                        help="where the gradebook, grades.csv, autograded/ and feedback/ go (default: ./graded)")
    parser.add_argument("--root", type=Path, default=REPO_ROOT, help="course root holding solutions/")
    parser.add_argument("--fast", action="store_true", help="set COURSE_FAST=1 for the grading kernels")
    args = parser.parse_args(argv)
    if args.workers < 1 or args.timeout <= 0:
        parser.error("--workers must be >= 1 and --timeout > 0")
    start = time.perf_counter()
    try:
        results = grade.grade_class(args.submissions, args.out, workers=args.workers, timeout=args.timeout,
                                    cell_timeout=args.cell_timeout, root=args.root.resolve(),
                                    env={"COURSE_FAST": "1"} if args.fast else None)
    except PipelineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(grade.format_results(results))
    print(grade.summary(results))
    print(f"wrote {args.out / 'grades.csv'}, {args.out / 'gradebook.db'} and {args.out / 'feedback'}/ "
          f"({time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
