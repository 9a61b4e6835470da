"""Class logistics: nbgrader's exchange (exchange.py), the student edition (export.py and template/, the files made
for it), and the instructor's JupyterLab (instructor/). Run through `python -m autograder` (autograder/__main__.py).

The student edition gets template/'s files (the release header in every notebook, student_tests.py as its
tests/test_labs.py), never this package's code.
"""
