"""Grading side of the course: the nbgrader config, and grading one submission or a whole class.

Run from the repository root (or use the make targets of the same names):

    python -m autograder autograde   # submitted/<student>/<assignment>/*.ipynb -> gradebook, grades.csv, feedback/
    python -m autograder feedback    # autograded/ -> feedback/<student>/<assignment>/*.html, again
    python -m autograder grade DIR   # a class's submissions, in any layout -> graded/ (class_run.py)

`autograde` and `grade` are one implementation (autograder/class_run.py): `autograde` grades the course root's own
submitted/ folder into the course root. Nothing in this package ships to students. It stands on nbplumbing/ (running
nbgrader, cells, processes, cgroups) and never imports classroom/, whose command line (`python -m classroom`) runs
the release and the class's logistics; the benchmark is benchmark/.

    nbgrader_config.py the course's nbgrader config: the grading and feedback preprocessors wired in
    grade.py           one submission: checked, run by nbgrader in a course root of its own, scored
    class_run.py       a class: the submissions found, graded in parallel, resumed, sharded, stopped by Ctrl-C
    run.py             a grading run as a command starts it: its options, and its printed report
    reports.py         the feedback pages, the CSV rows, the score table and the summary line
    gradebook.py       the gradebook and the CSVs of a run, and the merge of shards
    execution.py       nbgrader's Execute, with evidence that each test cell ran as written
    tamper.py          what a submission changed that it must not; flags.py, what an instructor should review
    scrub.py           no line of the answers in what a student gets back
    feedback.py        the students' HTML feedback without the hidden tests (nbgrader_config.py wires it in)
    sandbox/           the confinement of a submission's kernel and ranks
"""
