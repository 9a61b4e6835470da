"""Lab 01 (collectives): one broken collective costs exactly its own points.

- Three submissions, each the solution notebook with exactly one collective broken (broadcast, all_gather,
  reduce_scatter), are autograded together with the pipeline of autograder/ in a temporary course root; each
  must score full marks minus the points of that collective's test cell. The broken reduce_scatter also proves
  that exercise 1.7 (all_reduce_rs_ag, built from reduce_scatter and all_gather) is graded on its own.
- tests/test_pipeline.py autogrades the solution, which runs it top to bottom, and checks no cell raised.

About 2 minutes on a 2-core machine (one nbgrader autograde of three notebooks). Run just these
with `python -m pytest tests/test_lab01.py`.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from autograder import pipeline

ROOT = Path(__file__).resolve().parents[1]

ASSIGNMENT = "01_collectives"
NOTEBOOK = pipeline.course_dir(ROOT, "source") / ASSIGNMENT / "collectives.ipynb"
SOLUTION = re.compile(r"(?P<indent>[ \t]*)### BEGIN SOLUTION\n.*?### END SOLUTION\n", re.DOTALL)

# A wrong body for one exercise: wrong results, but no hang (the graded cell fails within seconds).
BROKEN = {
    # Checks src, then returns: the other ranks keep their own data.
    "broadcast": 'check_root(src, "src")\nreturn\n',
    # Copies its own tensor everywhere instead of receiving the others'.
    "all_gather": "for piece in tensor_list:\n    piece.copy_(tensor)\nreturn\n",
    # Forgets to add the other ranks' contributions.
    "reduce_scatter": "output.copy_(input_list[dist.get_rank()])\nreturn\n",
}


def cells_by_id(notebook: dict) -> dict[str, dict]:
    return {cell["metadata"]["nbgrader"]["grade_id"]: cell for cell in notebook["cells"]
            if "nbgrader" in cell.get("metadata", {})}


def break_exercise(notebook: dict, grade_id: str, body: str) -> dict:
    """A copy of `notebook` in which the solution region of cell `grade_id` holds `body` instead."""
    broken = json.loads(json.dumps(notebook))
    cell = cells_by_id(broken)[grade_id]
    source = "".join(cell["source"])
    match = SOLUTION.search(source)
    assert match, f"no solution region in cell {grade_id}"
    indented = "".join(match["indent"] + line for line in body.splitlines(keepends=True))
    cell["source"] = source[: match.start()] + indented + source[match.end():]
    return broken


def graded_cell_errors(root: Path, student: str) -> str:
    """The error or stderr output of every graded cell of an autograded notebook (for assertion messages)."""
    lines = []
    for path in sorted((pipeline.course_dir(root, "autograded") / student / ASSIGNMENT).glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            meta = cell.get("metadata", {}).get("nbgrader", {})
            for out in cell.get("outputs", []) if meta.get("grade") else []:
                if out["output_type"] == "error":
                    lines.append(f"  [{meta['grade_id']}] {out['ename']}: {out['evalue'][:300]}")
                elif out["output_type"] == "stream" and out["name"] == "stderr":
                    lines.append(f"  [{meta['grade_id']}] stderr: {''.join(out['text'])[:300]}")
    return "\n".join(lines) or "  (no error in any graded cell)"


def test_one_broken_collective_costs_exactly_its_own_points(tmp_path: Path) -> None:
    solution = json.loads(NOTEBOOK.read_text())
    cells = cells_by_id(solution)
    points = {grade_id: cell["metadata"]["nbgrader"].get("points", 0) for grade_id, cell in cells.items()
              if cell["metadata"]["nbgrader"]["grade"]}
    full = sum(points.values())
    shutil.copytree(NOTEBOOK.parent, pipeline.course_dir(tmp_path, "source") / ASSIGNMENT)
    for name, body in BROKEN.items():
        folder = pipeline.course_dir(tmp_path, "submitted") / f"broken_{name}" / ASSIGNMENT
        folder.mkdir(parents=True)
        (folder / NOTEBOOK.name).write_text(json.dumps(break_exercise(solution, name, body), indent=1))

    scores = {s.student: s for s in pipeline.autograde(tmp_path, env={"COURSE_FAST": "1"})}

    for name in BROKEN:
        score = scores[f"broken_{name}"]
        expected = full - points[f"test_{name}"]
        assert score.max_score == full, f"max score {score.max_score:g}, the notebook's test cells give {full}"
        assert score.score == expected, (
            f"with {name} broken the submission scores {score.score:g}/{full}, expected {expected}: it should "
            f"lose exactly the {points[f'test_{name}']} points of test_{name}. Graded cells that failed:\n"
            + graded_cell_errors(tmp_path, score.student))
