"""nbgrader configuration of the course (nbgrader 0.9.6).

`python -m autograder ...` (and so `make release|autograde|feedback`) passes this file to every nbgrader
command with `--config`. To run a bare `nbgrader` command by hand, from the repository root:

    nbgrader autograde 00_ranks_and_alpha_beta --config autograder/nbgrader_config.py

traitlets sets `__file__` while it executes a config file, so the course root below follows the clone
wherever it lives. `--CourseDirectory.root=...` on the command line overrides it (the tests grade into a
temporary course root that way, without touching the repository's gradebook).
"""

import sys
from pathlib import Path

from utils.timeouts import CELL_S

c = get_config()  # noqa: F821  (traitlets puts get_config in this file's namespace)

# ---- where things live: nbgrader's "source" step is solutions/, its "release" step is course/ ----------
c.CourseDirectory.root = str(Path(__file__).resolve().parents[1])
c.CourseDirectory.course_id = "ddp-course"
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "course"
# submitted/<student>/<assignment>/<notebook>.ipynb -> autograded/... -> feedback/..., gradebook.db at
# the root: nbgrader's defaults, spelled out so that nobody has to look them up.
c.CourseDirectory.submitted_directory = "submitted"
c.CourseDirectory.autograded_directory = "autograded"
c.CourseDirectory.feedback_directory = "feedback"

# ---- executing submissions --------------------------------------------------------------------------------
# Per-cell limit (nbgrader's default is 30 s), from the timeout ladder (utils/timeouts.py). A cold kernel's first
# `import torch` takes 10-30 s on a busy 2-core laptop, and a distributed test forks up to 5 ranks, rendezvouses
# over Gloo and runs the work; the launcher's own watchdog bounds each launch well below a minute. 120 s leaves
# that a 2x margin, so a hung submission is stopped by the watchdog (which reports where every rank was blocked)
# and not by nbgrader's bare "CellTimeoutError". On timeout nbgrader interrupts the kernel and carries on with the
# next cell.
c.Execute.timeout = int(CELL_S)
# Once the last cell has run, the kernel is killed rather than asked to leave: a kernel that imported torch takes
# 1-2.5 s to exit on a shutdown request (measured on 2 cores, quiet to busy; jupyter_client waits up to half its
# shutdown_wait_time, 2.5 s, then sends SIGTERM), a wait in every graded submission; killed, 0.1 s. Nothing is lost:
# every output is in by then, and the sandbox's PID namespace and cgroup end the ranks with the kernel.
c.Execute.shutdown_kernel = "immediate"

# nbgrader zeroes a test cell with *any* stderr output (nbgrader/utils.py, determine_grade), and
# ipykernel captures the file descriptors of forked ranks, so a rank's harmless warning would cost a
# correct answer its points. IgnorePattern (nbgrader/preprocessors/ignorepattern.py; off by default,
# runs right after Execute during autograde) drops every stderr output that `re.search`es the pattern.
# The pattern is anchored to the whole output and every line of it must be known noise, so an output
# that also holds a traceback or any other message still zeroes the cell.
NOISE_LINES = (
    r"\S.*:\d+: \w*Warning: .*",  # Python warnings: "popen_fork.py:66: DeprecationWarning: ... fork() ..."
    r"[ \t]+\S.*",  # ... and the indented source line the warnings module prints under one
    r"[ \t]*",  # blank lines
    r"\[W\d{4} [^\]]*\] .*",  # C++ (c10) warnings from torch or Gloo: "[W1129 08:40:12.34 socket.cpp:7] ..."
    r"\[Gloo\] Rank \d+ is connected to \d+ peer ranks\..*",  # Gloo's connection report (older torch)
    r"Matplotlib is building the font cache; this may take a moment\.",  # first import on a fresh box
    r"Matplotlib created a temporary cache directory .*",  # read-only home directory
)
c.IgnorePattern.enabled = True
c.IgnorePattern.pattern = r"\A(?:(?:" + "|".join(NOISE_LINES) + r")(?:\n|\Z))+\Z"

# ---- what the released notebooks keep ---------------------------------------------------------------------
# Each "### BEGIN SOLUTION ... ### END SOLUTION" region becomes this stub. nbgrader's default adds a bare
# `raise NotImplementedError()`; instead each exercise of solutions/ ends, after END SOLUTION, with its own
# `raise NotImplementedError("Exercise 0.1: ping_pong")` (dead code under the solution's return), so the
# student's stub names the exercise (CONTRIBUTING.md). tests/test_release.py checks that every stub still raises.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE"}

# A cell tagged "instructor" (the manual of a derivation exercise: the full argument) stays in solutions/ and is
# dropped from the release: nbconvert's TagRemovePreprocessor, ahead of nbgrader's own preprocessors.
from nbconvert.preprocessors import TagRemovePreprocessor  # noqa: E402
from nbgrader.converters import GenerateAssignment  # noqa: E402

c.TagRemovePreprocessor.enabled = True
c.TagRemovePreprocessor.remove_cell_tags = {"instructor"}
c.GenerateAssignment.preprocessors = [TagRemovePreprocessor,
                                      *GenerateAssignment.class_traits()["preprocessors"].default()]

# Every released notebook starts with the one markdown cell of classroom/template/release_header.ipynb, which says
# that the file is generated. An absolute path: nbgrader reads it relative to the course root, which the tests move.
TEMPLATE = Path(__file__).resolve().parents[1] / "classroom" / "template"
c.IncludeHeaderFooter.header = str(TEMPLATE / "release_header.ipynb")

# ClearOutput runs in generate_assignment (course/ ships without outputs or execution counts) and on every
# submission before autograde executes it (a stale output can never earn points). Beyond nbgrader's
# defaults it also drops the per-cell timing metadata JupyterLab ("execution") and the ExecuteTime
# extension write, so that running a solution notebook never changes course/.
c.ClearOutput.remove_metadata_fields = {"collapsed", "scrolled", "execution", "ExecuteTime"}

# ---- feedback: no hidden test in what students get back ---------------------------------------------------
# nbgrader's feedback preprocessors, then the course's TestErrorsOnly (a test cell's error keeps only its last line,
# a hidden region's failure says only which exercise: it reads the hidden regions, so it comes first), nbgrader's own
# ClearHiddenTests (what generate_assignment uses; here on test cells only) and ScrubOutputs (no line of the answers
# in any output, rich outputs as text): autograder/feedback.py says why.
# nbgrader runs anywhere (a class folder, formgrader), so the course root goes on sys.path for the import.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor  # noqa: E402
from nbgrader.preprocessors import GetGrades  # noqa: E402

from autograder.execution import GuardedExecute  # noqa: E402
from autograder.feedback import ClearHiddenTestsOfTests, ScrubOutputs, TestErrorsOnly  # noqa: E402

c.GenerateFeedback.preprocessors = [GetGrades, CSSHTMLHeaderPreprocessor, TestErrorsOnly, ClearHiddenTestsOfTests,
                                   ScrubOutputs]

# ---- autograding: test cells must prove they ran as written ----------------------------------------------------
# nbgrader's autograde preprocessors (nbgrader/converters/autograde.py), with its Execute replaced by GuardedExecute:
# autograder/execution.py says why and how.
from nbconvert.preprocessors import ClearMetadataPreprocessor  # noqa: E402
from nbgrader.preprocessors import (  # noqa: E402
    AssignLatePenalties,
    CheckCellMetadata,
    IgnorePattern,
    LimitOutput,
    SaveAutoGrades,
)

c.Autograde.autograde_preprocessors = [GuardedExecute, IgnorePattern, ClearMetadataPreprocessor, LimitOutput,
                                       SaveAutoGrades, AssignLatePenalties, CheckCellMetadata]
