r"""Reading a notebook's cells: nbgrader's metadata, the source, and the syntax tree of a code cell.

Grading (autograder/tamper.py, autograder/grade.py) and the benchmark's reference implementations
(benchmark/reference.py, which runs solution cells) read cells the same way, through this module.

>>> cell = {"cell_type": "code", "source": ["%matplotlib inline\n", "x = 1\n"],
...         "metadata": {"nbgrader": {"grade_id": "setup", "locked": True}}}
>>> meta(cell)["grade_id"], source(cell)
('setup', '%matplotlib inline\nx = 1\n')
>>> strip_magics(source(cell))
'\nx = 1'
>>> type(parse_cell("x = 1")).__name__, parse_cell("x = ")
('Module', None)
"""

from __future__ import annotations

import ast
import functools
import threading


def meta(cell: dict) -> dict:
    """The nbgrader metadata of a cell ({} for a plain cell)."""
    return cell.get("metadata", {}).get("nbgrader", {})


def source(cell: dict) -> str:
    """A cell's source as one string (nbformat allows a list of lines)."""
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


# CPython 3.11's ast.parse keeps its recursion depth in state that threads share, and two threads parsing at once can
# fail with "SystemError: AST constructor recursion depth mismatch" (python/cpython#106905). The grader checks
# submissions on several threads: they parse one at a time.
_PARSE_LOCK = threading.Lock()


@functools.lru_cache(maxsize=1024)  # each check of a cell parses it: once is enough (the trees are only read)
def parse_cell(source: str) -> ast.Module | None:
    """A code cell's syntax tree (IPython magics blanked out), or None if it is not valid Python. Do not modify it."""
    with _PARSE_LOCK:
        try:
            return ast.parse(strip_magics(source))
        except SyntaxError:
            return None


def strip_magics(source: str) -> str:
    """The source with IPython magics and shell escapes (%, !) blanked, so that ast can parse it."""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())
