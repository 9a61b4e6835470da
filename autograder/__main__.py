"""Command line: python -m autograder {release,autograde,feedback} [--root PATH]."""

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


if __name__ == "__main__":
    sys.exit(main())
