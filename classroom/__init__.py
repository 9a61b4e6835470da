"""Class logistics: nbgrader's exchange (exchange.py), the student edition (export.py and template/, the files made
for it), the release, the instructor's JupyterLab (instructor/) and the class's hub (hub/). Run through
`python -m classroom` (classroom/__main__.py) and `python -m classroom.hub`; it stands on autograder/ (the hub grades)
and nbplumbing/.

The student edition gets template/'s files (the release header in every notebook, student_tests.py as its
tests/test_labs.py), never this package's code.
"""
