"""Every solution notebook runs top to bottom under nbclient (COURSE_FAST=1), and its graded cells print nothing.

tests/test_pipeline.py grades only the test cells; this also runs the derivations, demos and experiments in
between, which no grade would notice breaking. Lab 00 runs in tests/test_lab00.py, which also reads its outputs.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from autograder import pipeline

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = pipeline.course_dir(ROOT, "source")
READ_ELSEWHERE = {"00_ranks_and_alpha_beta"}  # tests/test_lab00.py runs it and checks what it prints


@pytest.mark.parametrize("assignment", [a for a in pipeline.assignment_names(ROOT) if a not in READ_ELSEWHERE])
def test_solution_notebook_runs_top_to_bottom(
    assignment: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COURSE_FAST", "1")  # the kernel inherits this process's environment
    work = tmp_path / assignment
    shutil.copytree(SOLUTIONS / assignment, work)  # run where nbgrader runs it: in a copy of the assignment folder
    for path in sorted(work.glob("*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        NotebookClient(notebook, timeout=120, kernel_name="python3",
                       resources={"metadata": {"path": str(work)}}).execute()  # raises on the first failing cell
        noisy = [(cell["metadata"]["nbgrader"]["grade_id"], out.get("name", out["output_type"]))
                 for cell in notebook.cells if cell.get("metadata", {}).get("nbgrader", {}).get("grade")
                 for out in cell.get("outputs", [])]
        assert not noisy, f"{path.name}: test cells must print nothing (nbgrader scores stderr as a failure): {noisy}"
