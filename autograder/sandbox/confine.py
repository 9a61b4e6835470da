"""Run a command confined as a grading kernel is, less the namespaces: every nbgrader run that reads a submission.

    argv = confined(read=[root], write=[root / "feedback"]) + [sys.executable, "-c", ...]
    python -m autograder.sandbox.confine '{"read": [...], "write": [...]}' -- COMMAND ARG...

The launcher gives up every capability (root's included: uid 0 without them is an ordinary user), sets
no_new_privs and applies Landlock (landlock.py): COMMAND, and every process it starts, then reads only the installed
environment (what a kernel reads, readable_runtime, and the Jupyter files installed with it) and `read`, and writes
only `write`. It then execs COMMAND: nothing of this launcher is left but the confinement.

nbgrader's autograde runs this way (autograder/grade.py): it reads the submitted notebook and the kernel's messages,
and writes the autograded notebook and the gradebook; it cannot start the sandboxed kernel (namespaces, mounts and
the cgroup need root, and Landlock forbids mounting), so the kernelspec's argv asks the grader's launch server
(launch.py). generate_feedback too (autograder/grade.py, autograder/reports.py): it reads the autograded notebook,
whose every output the submission wrote, and renders it through nbconvert's templates.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path

from autograder.sandbox import PACKAGE_ROOT, landlock, readable_runtime
from autograder.sandbox.namespaces import drop_capabilities

# What nbgrader needs of the repository besides utils/ (readable_runtime): the course's nbgrader config, the
# preprocessors it names (autograder/), the plumbing they import (nbplumbing/) and the release header the config
# reads (classroom/template/). Not solutions/ or tests/.
GRADER_CODE = ("autograder", "nbplumbing", "classroom/template")


def installed() -> list[Path]:
    """What a confined nbgrader may read besides its course root: the runtime and the installed Jupyter files."""
    share = [Path(sys.prefix, "share", "jupyter"), Path(sys.base_prefix, "share", "jupyter")]
    return [*readable_runtime(), *share, *(PACKAGE_ROOT / part for part in GRADER_CODE)]


def confined(read: Iterable[Path], write: Iterable[Path]) -> list[str]:
    """The argv prefix that runs a command confined: reads installed() and `read`, writes only `write`."""
    config = {"read": [str(p) for p in [*installed(), *read]], "write": [str(p) for p in [*write, "/dev/null"]],
              "listed": [str(PACKAGE_ROOT)]}  # the config imports autograder/ from there: Python lists the folder
    launcher = (f"import sys; sys.path.insert(0, {str(PACKAGE_ROOT)!r}); "  # it runs from the course root
                "from autograder.sandbox.confine import main; main(sys.argv[1:])")
    return [sys.executable, "-c", launcher, json.dumps(config), "--"]


def main(argv: list[str]) -> None:
    """Drop every capability, apply Landlock, exec the command after "--"."""
    config, separator, *command = argv
    if separator != "--" or not command:
        raise SystemExit("usage: python -m autograder.sandbox.confine CONFIG_JSON -- COMMAND ARG...")
    rights = json.loads(config)
    drop_capabilities()
    landlock.restrict(rights["read"], rights["write"], rights["listed"])
    os.execv(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
