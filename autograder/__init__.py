"""Grading side of the course: the nbgrader config, the release, and grading one submission or a whole class.

Run from the repository root (or use the make targets of the same names):

    python -m autograder release     # solutions/ -> course/ (byte-identical when nothing changed)
    python -m autograder autograde   # submitted/<student>/<assignment>/*.ipynb -> gradebook, grades.csv, feedback/
    python -m autograder feedback    # autograded/ -> feedback/<student>/<assignment>/*.html, again
    python -m autograder grade DIR   # a class's submissions, in any layout -> graded/ (see grade.py)

`autograde` and `grade` are one implementation (autograder/grade.py): `autograde` grades the course root's own
submitted/ folder into the course root. Nothing in this package ships to students. The same command line runs the
class logistics of classroom/ (release-lab, collect, return-feedback, export); the benchmark is benchmark/.
"""
