"""Students' HTML feedback that keeps the hidden tests hidden (wired in by autograder/nbgrader_config.py).

What nbgrader 0.9.6 offers, and what it lacks:
- `GenerateFeedback.preprocessors` is configurable (nbgrader/converters/generate_feedback.py), and nbgrader's own
  `ClearHiddenTests` (the preprocessor that makes the student release) removes the hidden regions from the test
  cells' source: the config appends it. Autograding puts the hidden tests back into every test cell
  (OverwriteCells), which is why the feedback shows them by default (jupyter/nbgrader#917, open).
- The error output of a failing test cell still quotes its source: IPython's traceback prints the lines around
  the failing one. nbgrader's only traceback option, `LimitOutput.max_traceback`, runs during autograding (the
  instructor's copy would lose the tracebacks too) and keeps the first frames, which are the test cell's own.
  `TestErrorsOnly` below cuts a test cell's traceback down to its last line, `AssertionError: <message>` (or a
  `RankHangError` saying which rank waited where): what the student needs, and no test code; and a failure of a
  hidden region down to "a hidden check of exercise N.k failed" (its message is the instructor's).

The student's own cells keep their whole traceback: it quotes only code the student wrote or was given.
Hidden regions are cleared from the test cells only (`ClearHiddenTestsOfTests`): nbgrader's ClearHiddenTests reads
every cell, so a student's cell that merely holds the marker's text ("BEGIN HIDDEN TESTS" in a string) stopped the
whole feedback with "No end hidden tests statement found".
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from nbconvert.exporters.exporter import ResourcesDict
from nbformat.notebooknode import NotebookNode
from nbgrader import utils
from nbgrader.preprocessors import ClearHiddenTests, NbGraderPreprocessor

from autograder.scrub import ANSWERS_VARIABLE, as_told, scrub

KEPT_DATA = ("text/plain", "image/png", "image/jpeg")  # what ScrubOutputs keeps of a rich output


class TestErrorsOnly(NbGraderPreprocessor):
    """In every test cell (a grade cell that is not a solution), keep of each error only `ename: evalue`, and
    nothing else: what a test cell printed (its launches' ranks, a hook of the submission's, a warning that quotes
    its line) says how the test is built, and the instructor's copy keeps it. An error of a hidden region says only
    "a hidden check of exercise N.k failed" (autograder/scrub.py's in_sight decides, from the cell's own source and
    the error's traceback): its message names the hidden case, and often the expected value.

    It reads the hidden regions, so it runs before ClearHiddenTestsOfTests removes them (nbgrader_config.py).
    """

    def preprocess_cell(self, cell: NotebookNode, resources: ResourcesDict,
                        cell_index: int) -> tuple[NotebookNode, ResourcesDict]:
        if cell.cell_type == "code" and utils.is_grade(cell) and not utils.is_solution(cell):
            cell.outputs = [said_to_student(output, cell.source, cell.metadata.nbgrader.get("grade_id", "?"))
                            for output in cell.get("outputs", []) if output.output_type == "error"]
        return cell, resources


def said_to_student(error: NotebookNode, source: str, grade_id: str) -> NotebookNode:
    """An error output of a test cell as its feedback shows it: one line, `ename: evalue` as autograder/scrub.py's
    as_told words it."""
    ename, evalue = as_told(error, source, grade_id)
    return NotebookNode(output_type="error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"])


class ClearHiddenTestsOfTests(ClearHiddenTests):
    """nbgrader's ClearHiddenTests on the test cells (locked, restored from the source); other cells as they are."""

    def preprocess_cell(self, cell: NotebookNode, resources: ResourcesDict,
                        cell_index: int) -> tuple[NotebookNode, ResourcesDict]:
        if utils.is_grade(cell) and not utils.is_solution(cell):
            return super().preprocess_cell(cell, resources, cell_index)
        return cell, resources


class ScrubOutputs(NbGraderPreprocessor):
    """Every output of every cell: rich data kept only as text (an image stays), and every line of the answers hidden.

    A submission's cell may print a hidden test or a solution line by any route (reading IPython's history, a
    hook, an exception's text): autograder/scrub.py's lines come from the file named by ANSWERS_VARIABLE, which the
    grader writes. HTML, Markdown, LaTeX, SVG and JavaScript outputs become their text/plain: a Markdown output that
    names a missing attachment stopped nbconvert, and HTML can hide text from a scrub that reads lines.
    """

    def preprocess(self, nb: NotebookNode, resources: ResourcesDict) -> tuple[NotebookNode, ResourcesDict]:
        assignment = resources.get("nbgrader", {}).get("assignment", "")
        path = os.environ.get(ANSWERS_VARIABLE)
        self._lines = set(json.loads(Path(path).read_text()).get(assignment, [])) if path else set()
        if not path:
            self.log.warning("%s is not set: the feedback's outputs are not scrubbed of answer lines", ANSWERS_VARIABLE)
        return super().preprocess(nb, resources)

    def preprocess_cell(self, cell: NotebookNode, resources: ResourcesDict,
                        cell_index: int) -> tuple[NotebookNode, ResourcesDict]:
        for output in cell.get("outputs", []):
            if "text" in output:
                output.text = scrub(str(output.text), self._lines)
            if "evalue" in output:
                output.evalue = scrub(str(output.evalue), self._lines)
                output.traceback = [scrub(str(line), self._lines) for line in output.get("traceback", [])]
            if "data" in output:
                kept = {k: v for k, v in output.data.items() if k in KEPT_DATA}
                kept["text/plain"] = scrub(str(output.data.get("text/plain", "")), self._lines)
                output.data = NotebookNode(kept)
        return cell, resources
