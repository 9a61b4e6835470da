"""Command line of the class's hub (as root): python -m classroom.hub {start,stop,status,release,grade}.

    python -m classroom.hub start --roster roster.csv [--port 8000] [--dir /srv/ddp-course-hub]   # make hub
    python -m classroom.hub status                                                               # make hub-status
    python -m classroom.hub release 00_ranks_and_alpha_beta                                      # make hub-release
    python -m classroom.hub grade 00_ranks_and_alpha_beta [--workers K ...]                       # make hub-grade
    python -m classroom.hub stop [--purge | --purge-grades]                                      # make hub-stop

--dir defaults to the last `start`'s (remembered in the venv until `stop --purge`), else /srv/ddp-course-hub.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from autograder.run import INTERRUPTED, INTERRUPTED_NOTE, add_options, options_of
from classroom.hub import server
from classroom.hub.roster import RosterError
from nbplumbing.adapter import PipelineError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m classroom.hub", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    steps = parser.add_subparsers(dest="step", required=True)
    for name, what in (("start", "make the roster's users and start JupyterHub"),
                       ("stop", "stop the hub and every server of its users"),
                       ("status", "is it up, who has a server, the log"),
                       ("release", "hand a lab out through the hub's exchange"),
                       ("grade", "collect a lab, grade it in the sandbox, return the feedback")):
        sub = steps.add_parser(name, help=what)
        sub.add_argument("--dir", type=Path, default=None,
                         help=f"the hub's folder (default: the last start's, else {server.DEFAULT_DIR})")
        if name == "start":
            sub.add_argument("--roster", type=Path, required=True, help="CSV: username,full name,role")
            sub.add_argument("--port", type=int, default=8000)
            sub.add_argument("--ip", default="0.0.0.0", help="where students connect (default: every address)")
            sub.add_argument("--home-base", type=Path, default=Path("/home"), help="new users' homes go here")
            sub.add_argument("--memory", type=float, default=4.0, metavar="GB", help="per user server (%(default)g)")
            sub.add_argument("--cpus", type=float, default=2.0, help="cores' worth of CPU per server (%(default)g)")
            sub.add_argument("--cull", type=int, default=3600, metavar="S",
                             help="stop servers idle this long (%(default)s s)")
        if name == "stop":
            sub.add_argument("--purge", action="store_true",
                             help="also remove the users, groups and homes it made (the grader's: submissions, "
                                  "feedback) and the hub's folder (exchange, log, state), all but the gradebook and "
                                  "grades' CSV files, kept in <dir>/grades/")
            sub.add_argument("--purge-grades", action="store_true", help="--purge, and the gradebook and grades too")
        if name in ("release", "grade"):
            sub.add_argument("lab", help="e.g. 00_ranks_and_alpha_beta")
        if name == "grade":
            add_options(sub)  # `python -m autograder autograde`'s
            grade_parser = sub
    args = parser.parse_args(argv)
    hub_dir = args.dir or server.remembered_dir()
    try:
        if args.step == "start":
            server.start(args.roster, hub_dir, args.port, args.ip, args.home_base, memory_gb=args.memory,
                         cpus=args.cpus, cull_s=args.cull)
        elif args.step == "stop":
            server.stop(hub_dir, purge=args.purge or args.purge_grades, keep_grades=not args.purge_grades)
        elif args.step == "status":
            print(server.status(hub_dir))
        elif args.step == "release":
            print(server.release(args.lab, hub_dir).strip())
        else:
            server.grade(args.lab, hub_dir, options=options_of(grade_parser, args))
    except (server.HubError, RosterError, PipelineError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        layout = server.Layout(hub_dir.resolve())
        if args.step == "start" and layout.state_file.exists() and not server.running(layout.load()):
            print(f"what it made is on record: `python -m classroom.hub stop --dir {hub_dir} --purge` "
                  "(make hub-stop HUB_ARGS=--purge) removes it", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(INTERRUPTED_NOTE, file=sys.stderr)
        return INTERRUPTED
    return 0


if __name__ == "__main__":
    sys.exit(main())
