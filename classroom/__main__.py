"""Command line of the class's logistics: python -m classroom {release,release-lab,collect,return-feedback,export}.

    python -m classroom release [--root PATH]       # solutions/ -> course/ (make release)
    python -m classroom release-lab LAB             # course/<lab> -> nbgrader's exchange (make release-lab)
    python -m classroom collect LAB                 # the exchange -> submitted/ (make collect; then make autograde)
    python -m classroom return-feedback LAB         # feedback/ -> the exchange (make return-feedback)
    python -m classroom export OUT                  # the student edition, a git repository (make student-repo)

Grading is `python -m autograder`'s; the class's JupyterHub is `python -m classroom.hub`'s.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from classroom.exchange import STEPS, exchange_step
from classroom.export import export
from nbplumbing.adapter import REPO_ROOT, PipelineError, course_dir, release


def main(argv: list[str] | None = None) -> int:
    """Run one step; return the exit status (1 with the reason on stderr when the step could not run)."""
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        args.func(args)
    except PipelineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The parser of every step; each subcommand's `func` runs it with the parsed arguments."""
    parser = argparse.ArgumentParser(prog="python -m classroom", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    steps = parser.add_subparsers(dest="step", required=True)
    sub = steps.add_parser("release", help="regenerate course/ from solutions/")
    sub.add_argument("--root", type=Path, default=REPO_ROOT,
                     help="course root holding solutions/ (default: this repository)")
    sub.set_defaults(func=_release)
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


# ---- the steps: each takes the parsed arguments and prints what it did ------------------------------------------


def _release(args: argparse.Namespace) -> None:
    root = args.root.resolve()
    print(f"released {len(release(root))} notebooks into {course_dir(root, 'release')}/")


def _exchange(args: argparse.Namespace) -> None:
    print(exchange_step(args.step, args.lab, args.root.resolve(), args.exchange).log.strip())


def _export(args: argparse.Namespace) -> None:
    out = export(args.out, args.root.resolve())
    print(f"wrote the student edition into {out}/ (a git repository: push it as it is)")


if __name__ == "__main__":
    sys.exit(main())
