r"""Keeping the answers out of what a student gets back: every line of a hidden test or a solution, whatever route
brought it (a cell's output, an error's text, a traceback, a note of the report or of grades.csv); and a failing
hidden check's message, which only the instructor reads (hidden_failure).

    lines = answer_lines(solution_notebook, released_notebooks)   # the lines to hide
    scrub("x\n    ring = [r for r in peers]\n", lines)            # -> "x\n[hidden: a line of the answers]\n"

A line is an answer line when it is inside a solution or hidden-test region of the instructor's notebook, has at
least MIN_CHARS characters once stripped (a bare `return x` says nothing of the answer, and hiding it would blank
innocent output), and is in no released notebook (a later lab may hand out an earlier lab's answer). Every text line
that contains one is replaced whole.

>>> scrub("ok\nassert ring_shift(world) == expected_ring\nfine", {"ring_shift(world) == expected_ring"})
'ok\n[hidden: a line of the answers]\nfine'

A failure inside a test cell's hidden region (its `### BEGIN HIDDEN TESTS` part) is told to the student as
"a hidden check of exercise N.k failed": its message names the hidden case and the expected value (lab 09's 9.1
printed both, to 12 digits). A failure in the visible part keeps its message, which the student can reproduce by
running that very code. Which part failed is read from the error's traceback, conservatively (in_sight).

>>> cell = "# Exercise 0.4: the share\nassert f(1) == 2\n### BEGIN HIDDEN TESTS\nassert f(7) == 3\n### END HIDDEN TESTS"
>>> header = "AssertionError   Traceback (most recent call last)"
>>> in_sight(["---", header, "Cell In[6], line 4\n----> 4 assert f(7) == 3"], cell)
False
>>> in_sight(["---", header, "Cell In[6], line 2\n----> 2 assert f(1) == 2"], cell)
True
>>> hidden_failure(cell, "test_share")
'a hidden check of exercise 0.4 failed'
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from functools import cache
from pathlib import Path

from autograder.execution import NOT_RUN
from nbplumbing.cells import source

MIN_CHARS = 16
ANSWERS_VARIABLE = "AUTOGRADER_ANSWERS"  # a JSON file {assignment: [answer line, ...]} for the feedback preprocessor
HIDDEN = "[hidden: a line of the answers]"
HIDDEN_REGION = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS$.*?^[ \t]*### END HIDDEN TESTS$", re.DOTALL | re.MULTILINE)
REGIONS = (re.compile(r"^[ \t]*### BEGIN SOLUTION$.*?^[ \t]*### END SOLUTION$", re.DOTALL | re.MULTILINE),
           HIDDEN_REGION)
HIDDEN_FAILURE = "a hidden check of {} failed"  # all a student is told of a failure in a hidden region
HIDDEN_CHECK = "HiddenCheckFailed"  # the error's name on the feedback page
NOT_RUN_TOLD = "this test did not run to its end as written: it scores 0, for review"  # of the grader's NOT_RUN
EXERCISE = re.compile(r"\A#\s*Exercise\s+(\d+\.\d+)\b")  # a test cell's first line (CONTRIBUTING.md)
# IPython's traceback: a header, then one entry per frame, each starting with where it is ("Cell In[6], line 4" for
# a cell, in every exception mode that shows frames), colours as ANSI escapes.
HEADER = "Traceback (most recent call last)"
FRAME = re.compile(r"\s*Cell In\[(\d+)\], line (\d+)")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def answer_lines(instructor: dict, released: Iterable[dict]) -> set[str]:
    """The stripped lines of the instructor notebook's solution and hidden-test regions that no released notebook
    holds, of MIN_CHARS characters or more."""
    visible = {line.strip() for nb in released for cell in nb["cells"] for line in source(cell).splitlines()}
    regions = [m[0] for cell in instructor["cells"] for pattern in REGIONS for m in pattern.finditer(source(cell))]
    return {s for region in regions for line in region.splitlines()
            if len(s := line.strip()) >= MIN_CHARS and not s.startswith("###") and s not in visible}


def scrub(text: str, lines: set[str]) -> str:
    """`text` with every line that contains one of `lines` replaced by HIDDEN."""
    if not lines or not text:
        return text
    pattern = _pattern(frozenset(lines))
    return "\n".join(HIDDEN if pattern.search(line) else line for line in text.split("\n"))


@cache
def _pattern(lines: frozenset[str]) -> re.Pattern:
    """One regex of every line, longest first (compiled once per set: a class's feedback scrubs many texts)."""
    return re.compile("|".join(re.escape(s) for s in sorted(lines, key=len, reverse=True)))


def assignment_answers(source: Path, release: Path, assignments: Iterable[str]) -> dict[str, list[str]]:
    """assignment -> its answer lines, from the instructor notebooks in source/<assignment>/ and every released
    notebook in release/."""
    released = [json.loads(p.read_text()) for p in sorted(Path(release).glob("*/*.ipynb"))]
    answers = {}
    for assignment in assignments:
        lines: set[str] = set()
        for path in sorted((Path(source) / assignment).glob("*.ipynb")):
            lines |= answer_lines(json.loads(path.read_text()), released)
        answers[assignment] = sorted(lines)
    return answers


def hidden_lines(source: str) -> set[int]:
    """The numbers (from 1) of the lines of a cell's hidden regions, their markers included."""
    return {n for m in HIDDEN_REGION.finditer(source)
            for n in range(source.count("\n", 0, m.start()) + 1, source.count("\n", 0, m.end()) + 2)}


def in_sight(traceback: list[str], source: str) -> bool:
    """Whether an error of the test cell `source` (its output's traceback, as IPython wrote it) comes from the cell's
    visible part, so that its message tells the student nothing the release does not show.

    True only when the traceback is whole (its header, then the cell's own frame first: the statement the cell was
    running) and every frame of the cell (those labelled as that first one) is on a line of the cell outside its
    hidden regions. Anything else counts as hidden: no traceback, a cut one, a frame past the cell's end. The
    traceback is the kernel's word, which a submission that rewrites IPython's traceback machinery can change (it
    must reach the shell for that: autograder/flags.py flags it, autograder/execution.py compares the shell's parts).
    """
    entries = [ANSI.sub("", str(entry)) for entry in traceback]
    if len(entries) < 3 or HEADER not in entries[1] or not (first := FRAME.match(entries[2])):
        return False
    hidden, count = hidden_lines(source), len(source.splitlines())
    lines = [int(m[2]) for entry in entries if (m := FRAME.match(entry)) and m[1] == first[1]]
    return all(1 <= n <= count and n not in hidden for n in lines)


def hidden_failure(source: str, grade_id: str) -> str:
    """What the student is told of a failure in a hidden region of the test cell `source`: HIDDEN_FAILURE, naming the
    exercise as the cell's first line does ("# Exercise 0.4: ..."), or the cell by its grade_id."""
    found = EXERCISE.match(source)
    return HIDDEN_FAILURE.format(f"exercise {found[1]}" if found else grade_id)


def as_told(error: dict, source: str, grade_id: str) -> tuple[str, str]:
    """An error output of the test cell `source` as the student is told it, (ename, evalue): its own where the
    visible part failed (in_sight); the grader's words for the grader's NotRunAsWritten (the reason is in the flags,
    and the notebook's text is the kernel's); (HIDDEN_CHECK, hidden_failure) otherwise."""
    if error.get("ename") == NOT_RUN:
        return NOT_RUN, NOT_RUN_TOLD
    if in_sight(error.get("traceback", []), source):
        return error.get("ename", ""), error.get("evalue", "")
    return HIDDEN_CHECK, hidden_failure(source, grade_id)
