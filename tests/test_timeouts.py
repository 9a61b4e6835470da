"""The timeout ladder (utils/timeouts.py): every limit in its order, and each place that uses one uses the ladder's.

launch < its watchdog's report < process group < cell < submission, the kill slack after it; the defaults of
launch(), nbgrader's config, grade_class, the command line and docs/instructors.md are the ladder's; a cell limit at
or above the submission's is refused, by grade_class and by the command line, before anything runs.
"""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import pytest

from autograder import class_run
from autograder.__main__ import main
from nbplumbing import adapter, processes
from nbplumbing.cells import meta, source
from tests.common import CELL_TIMEOUT, KILL_SLACK, ROOT
from tests.corpus.common import HIDDEN, solution_notebook
from tests.corpus.hostile import ASSIGNMENT as HOSTILE_LAB
from tests.grading_run import GRADING_CELL_TIMEOUT, GRADING_TIMEOUT, REPORT_ROOM
from utils import launch
from utils.timeouts import (
    CELL_S,
    HANG_BUDGET_S,
    KILL_SLACK_S,
    KILL_WAIT_S,
    LAUNCH_S,
    STACK_DUMP_S,
    SUBMISSION_S,
    check_grading_limits,
    process_group_s,
)


def _default(function: object, name: str) -> object:
    return inspect.signature(function).parameters[name].default


def test_the_ladder_is_in_order() -> None:
    # A hung launch's report (the stacks) is written before the process group gives up, and the group gives up
    # before nbgrader's cell limit: a deadlock in a cell ends with the launcher's report, never a bare timeout.
    assert 0 < LAUNCH_S < LAUNCH_S + STACK_DUMP_S < process_group_s(LAUNCH_S) < CELL_S < SUBMISSION_S
    assert 0 < KILL_WAIT_S < KILL_SLACK_S < CELL_S
    # A submission that hangs in every launch: one launch's worth of hanging, then the rest fail at once, and the
    # whole of it (a cell's limit more at most, for the cell that hangs last) ends well before the submission's limit.
    assert LAUNCH_S <= HANG_BUDGET_S and HANG_BUDGET_S + CELL_S < SUBMISSION_S
    check_grading_limits(CELL_S, SUBMISSION_S)
    check_grading_limits(GRADING_CELL_TIMEOUT, GRADING_TIMEOUT)  # the grading corpus' own, lowered limits


def test_the_grading_runs_cell_limit_holds_a_hang_and_its_report() -> None:
    """Lab 00's test cells hang in the corpus (hostile, deadlock_and_infinite_loop): each launch of their visible
    parts (the first a hung submission meets; later ones fail at once) ends with its report, REPORT_ROOM before the
    grading run's cell limit, not with nbgrader's bare timeout."""
    nb = json.loads(solution_notebook(HOSTILE_LAB).read_text())
    launches = [float(t) for cell in nb["cells"] if meta(cell).get("grade") and not meta(cell).get("solution")
                for t in re.findall(r"timeout=(\d+)", HIDDEN.sub("", source(cell)))]
    assert launches and max(launches) + REPORT_ROOM <= GRADING_CELL_TIMEOUT, (max(launches), GRADING_CELL_TIMEOUT)


def test_every_default_is_the_ladders() -> None:
    assert _default(launch.launch, "timeout") == LAUNCH_S
    assert launch._pg_timeout(LAUNCH_S).total_seconds() == process_group_s(LAUNCH_S)
    assert adapter.nbgrader_config().Execute.timeout == CELL_TIMEOUT == CELL_S
    assert _default(class_run.grade_class, "timeout") == SUBMISSION_S
    assert _default(processes.kill_tagged, "wait") == KILL_WAIT_S
    assert KILL_SLACK == KILL_SLACK_S
    guide = (ROOT / "docs" / "instructors.md").read_text()
    assert f"(`--timeout`, default {SUBMISSION_S:g} s)" in guide


def test_the_command_line_default_is_the_ladders(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["grade", "--help"])
    assert re.search(rf"default:\s+{SUBMISSION_S:g}\)", capsys.readouterr().out)


@pytest.mark.parametrize(("cell", "submission"), [(SUBMISSION_S, SUBMISSION_S), (CELL_S, CELL_S - 1), (0, 10)])
def test_a_cell_limit_not_below_the_submissions_is_refused(cell: float, submission: float) -> None:
    with pytest.raises(ValueError, match=r"must be (below|positive)"):
        check_grading_limits(cell, submission)


def test_grade_class_refuses_before_grading(tmp_path: Path) -> None:
    with pytest.raises(adapter.PipelineError, match=r"cell limit \(120 s\) must be below the submission's \(60 s\)"):
        class_run.grade_class(tmp_path / "nothing here", tmp_path / "out", timeout=60)
    assert not (tmp_path / "out").exists()


def test_the_command_line_refuses_with_the_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_status:
        main(["grade", str(tmp_path), "--timeout", "300", "--cell-timeout", "300"])
    assert exit_status.value.code == 2
    error = capsys.readouterr().err
    assert "the cell limit (300 s) must be below the submission's (300 s)" in error and "--cell-timeout" in error

