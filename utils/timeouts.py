"""The timeout ladder: every time limit of a launch and of grading, defined here once, each above the one it outlasts.

    launch  <  process group  <  cell  <  submission;  kill slack after the submission's limit

- LAUNCH_S (60 s): utils.launch.launch's default `timeout`, the whole run of the ranks. A hung launch ends with the
  watchdog's deadlock report, which takes up to STACK_DUMP_S more (each hung rank writes its stack).
- process group (the launch's timeout + PG_MARGIN_S): Gloo's and the store's own limit. It must outlast the
  watchdog and its report, or a deadlock would surface as one rank's "Timed out waiting for recv".
- CELL_S (120 s): nbgrader's limit for one cell (Execute.timeout in autograder/nbgrader_config.py). Above a
  default launch and its process group, so that a hung launch in a cell ends with the launcher's report, not with
  nbgrader's bare CellTimeoutError. The labs' own launches take at most half of it (tests/test_structure.py).
- SUBMISSION_S (900 s): one whole submission (`python -m autograder grade --timeout`, `make autograde`,
  grade_class): nbgrader's start, the kernel's, every cell. A cell limit at or above it could never stop a cell
  before the submission's limit does, so it is refused (check_grading_limits).
- HANG_BUDGET_S (60 s): grading only. The seconds a submission's launches may spend hung, in all; later launches
  then fail at once (utils.launch_report.hang_budget), so a submission that deadlocks everywhere is graded in a few
  minutes with its other points, far below SUBMISSION_S. The grader passes it to the kernel in $HANG_BUDGET, with
  the ledger file that adds up the seconds in $HANG_LEDGER.
- KILL_SLACK_S (20 s): from a submission's limit to every process of it gone; nbplumbing.processes keeps killing
  for KILL_WAIT_S of it.

>>> process_group_s(LAUNCH_S)
90.0
>>> check_grading_limits(cell_s=CELL_S, submission_s=SUBMISSION_S)
>>> check_grading_limits(cell_s=120, submission_s=100)
Traceback (most recent call last):
...
ValueError: the cell limit (120 s) must be below the submission's (100 s): a cell that hangs would run until the \
whole submission is stopped. Lower the cell limit (--cell-timeout) or raise the submission's (--timeout).
"""

from __future__ import annotations

__all__ = ["CELL_S", "HANG_BUDGET", "HANG_BUDGET_S", "HANG_LEDGER", "KILL_SLACK_S", "KILL_WAIT_S", "LAUNCH_S",
           "PG_MARGIN_S", "STACK_DUMP_S", "SUBMISSION_S", "check_grading_limits", "process_group_s"]

LAUNCH_S = 60.0  # launch()'s default timeout: the whole run of its ranks
STACK_DUMP_S = 3.0  # after the launch's timeout, how long a hung rank gets to write its stack (SIGUSR1)
PG_MARGIN_S = 30.0  # the process group's timeout is the launch's plus this: it outlasts the watchdog's report
CELL_S = 120.0  # nbgrader's per-cell limit: a default launch, its process group and a cold `import torch` fit
SUBMISSION_S = 900.0  # one whole submission, nbgrader's and the kernel's start included
HANG_BUDGET_S = 60.0  # grading: seconds a submission's launches may hang in all before the rest fail at once
HANG_LEDGER, HANG_BUDGET = "AUTOGRADER_HANG_LEDGER", "AUTOGRADER_HANG_BUDGET_S"  # their environment variables
KILL_WAIT_S = 10.0  # how long nbplumbing.processes keeps killing a stopped run's processes (they may fork)
KILL_SLACK_S = 20.0  # from a submission's limit to every process of it gone: the kill wait and the OS's clean-up


def process_group_s(launch_s: float) -> float:
    """The process group's (and its store's) timeout, in seconds, for a launch of `launch_s` seconds."""
    return launch_s + PG_MARGIN_S


def check_grading_limits(cell_s: float, submission_s: float) -> None:
    """Raise ValueError, saying which limit to change, unless 0 < cell_s < submission_s (seconds)."""
    if not cell_s > 0 or not submission_s > 0:
        raise ValueError(f"time limits must be positive, got {cell_s:g} s for a cell and {submission_s:g} s for a "
                         "submission")
    if cell_s >= submission_s:
        raise ValueError(f"the cell limit ({cell_s:g} s) must be below the submission's ({submission_s:g} s): a "
                         "cell that hangs would run until the whole submission is stopped. Lower the cell limit "
                         "(--cell-timeout) or raise the submission's (--timeout).")
