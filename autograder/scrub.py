r"""Keeping the answers out of what a student gets back: every line of a hidden test or a solution, whatever route
brought it (a cell's output, an error's text, a traceback, a note of the report or of grades.csv).

    lines = answer_lines(solution_notebook, released_notebooks)   # the lines to hide
    scrub("x\n    ring = [r for r in peers]\n", lines)            # -> "x\n[hidden: a line of the answers]\n"

A line is an answer line when it is inside a solution or hidden-test region of the instructor's notebook, has at
least MIN_CHARS characters once stripped (a bare `return x` says nothing of the answer, and hiding it would blank
innocent output), and is in no released notebook (a later lab may hand out an earlier lab's answer). Every text line
that contains one is replaced whole.

>>> scrub("ok\nassert ring_shift(world) == expected_ring\nfine", {"ring_shift(world) == expected_ring"})
'ok\n[hidden: a line of the answers]\nfine'
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from functools import cache
from pathlib import Path

from nbplumbing.cells import source

MIN_CHARS = 16
ANSWERS_VARIABLE = "AUTOGRADER_ANSWERS"  # a JSON file {assignment: [answer line, ...]} for the feedback preprocessor
HIDDEN = "[hidden: a line of the answers]"
REGIONS = (re.compile(r"^[ \t]*### BEGIN SOLUTION$.*?^[ \t]*### END SOLUTION$", re.DOTALL | re.MULTILINE),
           re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS$.*?^[ \t]*### END HIDDEN TESTS$", re.DOTALL | re.MULTILINE))


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
