"""Grading side of the course: the nbgrader config, the release, and grading one submission or a whole class.

Run from the repository root (or use the make targets of the same names):

    python -m autograder release     # solutions/ -> course/ (byte-identical when nothing changed)
    python -m autograder autograde   # submitted/<student>/<assignment>/*.ipynb -> gradebook, grades.csv, feedback/
    python -m autograder feedback    # autograded/ -> feedback/<student>/<assignment>/*.html, again
    python -m autograder grade DIR   # a class's submissions, in any layout -> graded/ (class_run.py)

`autograde` and `grade` are one implementation (autograder/class_run.py): `autograde` grades the course root's own
submitted/ folder into the course root. Nothing in this package ships to students. The same command line runs the
class logistics of classroom/ (release-lab, collect, return-feedback, export); the benchmark is benchmark/.

    pipeline.py        nbgrader's config and the one way to run it; the release and the feedback
    grade.py           one submission: checked, run by nbgrader in a course root of its own, scored
    class_run.py       a class: the submissions found, graded in parallel, resumed, sharded, stopped by Ctrl-C
    reports.py         the feedback pages, the CSV rows, the score table and the summary line
    gradebook.py       the gradebook and the CSVs of a run, and the merge of shards
    tamper.py          what a submission changed that it must not; cells.py reads the cells (shared with benchmark/)
    processes.py       every process of a run, found by its tag and stopped
    feedback.py        the students' HTML feedback without the hidden tests (nbgrader_config.py wires it in)
"""
