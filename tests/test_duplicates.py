"""The code stays small and unrepeated: no module of utils/ or of the grading code over MAX_LINES lines, and no
copy-pasted block in the solution notebooks' code, their cells extracted to files.

`duplicates` (the review tool that finds places sharing six or more lines, also alike but for names) reads .py
files, not notebooks. write_code_cells puts every code cell of solutions/ into a file of its own, magics blanked
(nbplumbing.cells.strip_magics), so that the tool reads them as it reads the rest of the tree:

    python -m tests.test_duplicates OUT && duplicates --repo OUT

The test does the same in a temporary folder where the tool is installed (no pair may be found), and the same for
the tree itself; otherwise it checks the extraction alone.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nbplumbing.cells import meta, source, strip_magics
from tests.common import ASSIGNMENTS, ROOT, SOLUTIONS

MAX_LINES = 450  # a module a reader holds in their head (issue #22)


def test_no_module_is_over_the_limit() -> None:
    sizes = {path.relative_to(ROOT).as_posix(): len(path.read_text().splitlines())
             for folder in ("utils", "nbplumbing", "autograder", "classroom", "benchmark")
             for path in (ROOT / folder).rglob("*.py")}
    over = {name: n for name, n in sizes.items() if n > MAX_LINES}
    assert sizes and not over, f"modules over {MAX_LINES} lines: {over}"


def write_code_cells(out: Path) -> list[Path]:
    """Write each code cell of every solution notebook to out/<assignment>/<NN>_<grade_id>.py; return the files."""
    written = []
    for assignment in ASSIGNMENTS:
        for notebook in sorted((SOLUTIONS / assignment).glob("*.ipynb")):
            cells = json.loads(notebook.read_text())["cells"]
            for index, cell in enumerate(cells):
                if cell["cell_type"] != "code" or not source(cell).strip():
                    continue
                path = out / assignment / f"{index:02d}_{meta(cell).get('grade_id', 'cell')}.py"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(strip_magics(source(cell)) + "\n")
                written.append(path)
    return written


def test_every_code_cell_is_extracted(tmp_path: Path) -> None:
    written = write_code_cells(tmp_path)
    cells = [c for a in ASSIGNMENTS for nb in (SOLUTIONS / a).glob("*.ipynb")
             for c in json.loads(nb.read_text())["cells"] if c["cell_type"] == "code" and source(c).strip()]
    assert len(written) == len(cells) and {p.parent.name for p in written} == set(ASSIGNMENTS)
    assert all(compile(p.read_text(), str(p), "exec") for p in written)  # each one valid Python on its own


NO_TOOL = shutil.which("duplicates") is None


def repeated_blocks(repo: Path) -> str:
    """What `duplicates` says of the .py files under repo: "" when it finds no pair (and read everything)."""
    found = subprocess.run(["duplicates", "--repo", str(repo), "--most", "40", "--seconds", "120"],
                           capture_output=True, text=True, timeout=300)
    clean = found.returncode == 0 and found.stdout.startswith("no duplicates") and "incomplete:" not in found.stdout
    return "" if clean else found.stdout + found.stderr


# Issue #22: no pair, in the tree or in the solutions' cells. The last ones were folded: lab 01's rooted hidden tests
# run one case function each through the setup cell's rooted_problems, and its bad-argument tests through
# bad_list_refusals (the cases stay in the hidden parts, as arguments); lab 02's ring and tree tests share
# scaled_sum_problems and sampled_problems; lab 01's scatter and gather solutions are each written their own way.
@pytest.mark.skipif(NO_TOOL, reason="the `duplicates` review tool is not installed here")
def test_no_repeated_block_in_the_solutions_code(tmp_path: Path) -> None:
    write_code_cells(tmp_path)
    assert not (found := repeated_blocks(tmp_path)), found


@pytest.mark.skipif(NO_TOOL, reason="the `duplicates` review tool is not installed here")
def test_no_repeated_block_in_the_tree() -> None:
    assert not (found := repeated_blocks(ROOT)), found


if __name__ == "__main__":
    print(f"wrote {len(write_code_cells(Path(sys.argv[1])))} code cells into {sys.argv[1]}/")
