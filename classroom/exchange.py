"""nbgrader's exchange, the instructor's side: hand a lab out, collect the submissions, return the feedback.

The round trip on one machine (or on a JupyterHub, where the exchange is a shared folder):

    make release-lab LAB=00_ranks_and_alpha_beta   # course/<lab> -> the exchange (nbgrader release_assignment)
    (students: Assignments tab of JupyterLab: Fetch, solve, Submit)
    make collect LAB=00_ranks_and_alpha_beta       # the exchange -> submitted/<student>/<lab>/ (nbgrader collect)
    make autograde                                 # submitted/ -> gradebook.db, grades.csv, feedback/
    make return-feedback LAB=00_ranks_and_alpha_beta   # feedback/ -> the exchange (nbgrader release_feedback)
    (students: Assignments tab: Fetch Feedback)

The exchange folder is nbgrader's Exchange.root: `make` sets it up inside the virtual environment (so that
`make lab` on the same machine sees it); a JupyterHub sets its own in a system-wide nbgrader_config.py.
"""

from __future__ import annotations

from pathlib import Path

from nbplumbing.adapter import REPO_ROOT, NbgraderRun, PipelineError, assignment_names, run_nbgrader

# Our step -> (nbgrader command, its options). --force: a lab released again (a fix) replaces the one in the
# exchange, each notebook's first cell saying what a class's student does (ClassRelease); --update: a student's newer
# submission replaces the one collected before; classroom/collect.py's collect takes only what each student
# submitted as themselves, and no link.
STEPS = {
    "release-lab": ("release_assignment", ("--force", "--ExchangeFactory.release_assignment="
                                                       "classroom.hub.exchange.ClassRelease")),
    "collect": ("collect", ("--update", "--ExchangeFactory.collect=classroom.collect.CheckedCollect")),
    "return-feedback": ("release_feedback", ()),
}


def exchange_step(step: str, assignment: str, root: Path = REPO_ROOT, exchange: Path | None = None,
                  options: tuple[str, ...] = ()) -> NbgraderRun:
    """Run one instructor step of the exchange for an assignment; `exchange` overrides nbgrader's Exchange.root,
    `options` are nbgrader's options added to the step's."""
    if step not in STEPS:
        raise PipelineError(f"no exchange step {step!r} (steps: {', '.join(STEPS)})")
    known = assignment_names(root)
    if assignment not in known:
        raise PipelineError(f"no assignment {assignment!r} in solutions/ (assignments: {', '.join(known)})")
    command, defaults = STEPS[step]
    given = {option.split("=", 1)[0] for option in options}  # the hub's release class for ours: traitlets refuses
    defaults = tuple(d for d in defaults if d.split("=", 1)[0] not in given)  # an option given twice
    where = [f"--Exchange.root={Path(exchange).resolve()}"] if exchange is not None else []
    return run_nbgrader(command, assignment, *defaults, *options, *where, root=root)
