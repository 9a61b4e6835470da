"""Grading side of the course: the nbgrader config and the release / autograde / feedback pipeline.

Run from the repository root (or use the make targets of the same names):

    python -m autograder release     # solutions/ -> course/ (byte-identical when nothing changed)
    python -m autograder autograde   # submitted/<student>/<assignment>/*.ipynb -> score table + grades.csv
    python -m autograder feedback    # autograded/ -> feedback/<student>/<assignment>/*.html

Nothing in this package ships to students.
"""

from autograder.pipeline import (
    CONFIG_FILE,
    REPO_ROOT,
    NbgraderError,
    PipelineError,
    Score,
    Submission,
    assignment_names,
    autograde,
    feedback,
    find_submissions,
    format_table,
    read_scores,
    register_assignments,
    release,
    write_csv,
)

__all__ = [
    "CONFIG_FILE",
    "REPO_ROOT",
    "NbgraderError",
    "PipelineError",
    "Score",
    "Submission",
    "assignment_names",
    "autograde",
    "feedback",
    "find_submissions",
    "format_table",
    "read_scores",
    "register_assignments",
    "release",
    "write_csv",
]
