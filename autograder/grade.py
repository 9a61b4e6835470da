"""Grading one submission: its notebooks read and checked for tampering, then `nbgrader autograde` in a course root of
its own, within the submission's time limit; never raises (a broken submission must not stop a class).

    template = prepare_template(["00_ranks_and_alpha_beta"], work)   # the assignments registered and released once
    result = grade_one(entry, template, work, timeout=SUBMISSION_S)  # -> Result: status, score, notes, tampering

A class run (autograder/class_run.py) finds the entries and grades them in parallel; autograder/reports.py writes
what a result says. Tampering is looked for before a submission runs (autograder/tamper.py), and a submission that
runs past its limit is stopped with its whole process tree (nbplumbing/processes.py).
"""

from __future__ import annotations

import functools
import json
import shutil
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import NamedTuple

from autograder import gradebook
from autograder.execution import CUT_KEY, FAULT_KEY, NOT_RUN_KEY, OUTPUT_CAP, RESULT_KEY, VERDICTS_VARIABLE
from autograder.flags import find_flags
from autograder.sandbox import DEFAULT_LIMITS, JUPYTER_FOLDER, MIN_LANDLOCK_ABI, Box, Limits, jupyter_env, landlock
from autograder.sandbox.confine import confined
from autograder.scrub import ANSWERS_VARIABLE, HIDDEN_CHECK, as_told, assignment_answers, scrub
from autograder.tamper import find_tampering, reported_by_nbgrader
from nbplumbing.adapter import (
    REPO_ROOT,
    NbgraderRun,
    PipelineError,
    course_dir,
    gradebook_url,
    nbgrader_config,
    nbgrader_env,
    read_score,
    run_nbgrader,
)
from nbplumbing.cells import meta, source
from nbplumbing.processes import TAG_VARIABLE, new_tag
from utils.timeouts import check_grading_limits

# What nbgrader's exchange puts beside a submitted notebook: when it was submitted (late penalties) and the secret
# that release_feedback and fetch_feedback match the feedback with. They go along into autograded/ and feedback/.
EXCHANGE_FILES = ("timestamp.txt", "submission_secret.txt")

# Figures are not graded: the kernel draws them on Agg, where plt.show() renders nothing (a lab's plots cost about
# a second of each submission's grading inline), and the warning that show() then gives is not printed.
FIGURES_UNDRAWN = {"MPLBACKEND": "agg", "PYTHONWARNINGS": "ignore:FigureCanvasAgg is non-interactive"}
OUTPUT_WORDS = f"{OUTPUT_CAP // 1000} kB"  # the output cap as the notes say it


class Status(StrEnum):
    """How grading one submission ended; its value is what grades.csv, the reports and the records say."""

    GRADED = "graded"
    FAILED = "failed"  # nothing scored: no notebook could be read, or nbgrader failed on it
    TIMED_OUT = "timed out"
    GRADER_ERROR = "grader error"  # the grading failed, not the submission: no score; grade it again once fixed


GRADED, FAILED, TIMED_OUT, GRADER_ERROR = Status  # the names grading and the corpus use


class Key(NamedTuple):
    """Which submission: a student's work on one assignment, in the order of the folders (student/assignment)."""

    student: str
    assignment: str


@dataclass
class Entry:
    """One submission to grade: a student's notebooks for one assignment (name -> file)."""

    student: str
    assignment: str
    notebooks: dict[str, Path]
    notes: list[str] = field(default_factory=list)  # said to the student and put in the CSV
    extras: dict[str, Path] = field(default_factory=dict)  # EXCHANGE_FILES found beside the notebooks
    refused: str = ""  # why its upload cannot be graded (autograder/class_run.py): its row fails with this

    @property
    def key(self) -> Key:
        return Key(self.student, self.assignment)


@dataclass(kw_only=True)
class Result:
    """What grading one submission gave: the one score type of `make grade` and `make autograde`."""

    student: str
    assignment: str
    status: Status
    score: float = 0.0
    max_score: float = 0.0
    seconds: float = 0.0
    tampered: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # said to the student (the report page) and put in the CSV
    withheld: list[str] = field(default_factory=list)  # for the instructor only (the CSV): each hidden check's failure
    flagged: list[str] = field(default_factory=list)  # for an instructor to review (autograder/flags.py, not run)
    root: Path | None = None  # the worker's course root (removed once merged)
    tag: str = ""  # the tag of its processes (nbplumbing.processes)
    fingerprint: str = ""  # of the submission's files (a resumed run keeps the result while they are unchanged)

    @property
    def key(self) -> Key:
        return Key(self.student, self.assignment)


# ---- checking a submission before it runs --------------------------------------------------------------------


@dataclass
class Checked:
    """What reading a submission's notebooks found, before any of its code runs (check_notebooks)."""

    notebooks: dict[str, dict]  # expected name -> the submitted notebook, for those that could be read
    notes: list[str]  # said to the student
    tampered: list[str] = field(default_factory=list)  # autograder.tamper's findings
    untrusted: dict[str, list[str]] = field(default_factory=dict)  # notebook stem -> tests run after a helper changed
    flagged: list[str] = field(default_factory=list)  # for an instructor to review (autograder.flags)


def check_notebooks(entry: Entry, release: Path) -> Checked:
    """Read the submitted notebooks, and what they changed of the release's (`release`: its assignment folder).

    A lone notebook under another name is graded as the assignment's lone notebook (and said so). Each
    notebook is compared with the released one for tampering (autograder.tamper), and its own cells are read for
    what to flag for review (autograder.flags).
    """
    expected = sorted(p.name for p in release.glob("*.ipynb"))
    checked = Checked({}, list(entry.notes))
    files = dict(entry.notebooks)
    if len(expected) == 1 and len(files) == 1 and expected[0] not in files:
        [(name, path)] = files.items()
        checked.notes.append(f"your notebook was named {name}; it was graded as {expected[0]}")
        files = {expected[0]: path}
    for name in expected:
        if name not in files:
            checked.notes.append(f"{name} is missing from your submission: its exercises score 0")
            continue
        try:
            nb = read_notebook(files[name])
        except NotebookError as why:
            checked.notes.append(f"{name} is empty or is not a notebook ({why}): its exercises score 0")
            continue
        checked.notebooks[name] = nb
        given = json.loads((release / name).read_text())
        found, checked.untrusted[Path(name).stem] = find_tampering(nb, given, name)
        checked.tampered += found
        checked.flagged += find_flags(nb, given, name)
    for name in sorted(set(files) - set(expected)):
        checked.notes.append(f"{name} is not a notebook of {entry.assignment}; it was not graded")
    return checked


class NotebookError(ValueError):
    """A submitted file is not a notebook that can be graded (the message says why)."""


def read_notebook(path: Path) -> dict:
    """The notebook in a submitted file, read as nbgrader reads it: nbformat 4, valid against its schema, with
    cells; NotebookError saying why otherwise (not UTF-8, not JSON, another format, invalid, no cells).

    Format 4 only: nbgrader converts an older one (nbformat 3 keeps its cells in `worksheets`) into cells that no
    check read. What is graded is this very dict, written out again (grade_one): nothing else of the file.
    """
    import nbformat  # slow to import: only when reading submissions

    data = path.read_bytes()
    if not data.strip():
        raise NotebookError("the file is empty")
    try:
        nb = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise NotebookError("it is not UTF-8 text") from None
    except (ValueError, RecursionError) as exc:  # RecursionError: nested too deep
        raise NotebookError(f"it is not JSON ({type(exc).__name__}: {str(exc)[:200]})") from None
    if not isinstance(nb, dict):
        raise NotebookError("it is not a notebook (its JSON is not an object)")
    if nb.get("nbformat") != 4:
        raise NotebookError(f"it is of nbformat {nb.get('nbformat')!r}; only format 4 is graded (JupyterLab and "
                            "Jupyter Notebook write it: open the file there and save it)")
    nb = nbformat.from_dict(nb)  # what nbformat.reads gives for format 4
    try:
        nbformat.validate(nb)
    except nbformat.ValidationError as exc:
        raise NotebookError(f"it is not a valid notebook of format 4: {exc.message[:200]}") from None
    if not nb.cells:
        raise NotebookError("it has no cells")
    return nb


# ---- grading one submission ---------------------------------------------------------------------------------


def cell_limit(cell_timeout: float | None) -> float:
    """nbgrader's per-cell limit in seconds: `cell_timeout`, or the config's Execute.timeout where it is None."""
    return float(nbgrader_config().Execute.timeout) if cell_timeout is None else float(cell_timeout)


def check_limits(cell_timeout: float | None, timeout: float) -> None:
    """Raise PipelineError unless the cell limit (cell_limit) is below the submission's and both are positive."""
    try:
        check_grading_limits(cell_limit(cell_timeout), timeout)
    except ValueError as exc:
        raise PipelineError(str(exc)) from None


def prepare_template(assignments: list[str], work: Path, root: Path = REPO_ROOT) -> Path:
    """A course root with the assignments registered in its gradebook and released into release/."""
    template = work / "template"
    for assignment in assignments:
        shutil.copytree(course_dir(root, "source") / assignment, course_dir(template, "source") / assignment)
    run_nbgrader("generate_assignment", "*", "--force", f"--CourseDirectory.release_directory={template / 'release'}",
                 root=template)
    gradebook.canonical_ids(template / "gradebook.db")  # the same ids in every run: shards and resumes merge
    return template


@functools.cache
def template_answers(template: Path, assignment: str) -> frozenset[str]:
    """The answer lines of an assignment of a prepared template (autograder/scrub.py): read once per run, not once
    per submission (each reading parses every released notebook)."""
    return frozenset(assignment_answers(course_dir(template, "source"), template / "release", [assignment])[assignment])


def grade_one(entry: Entry, template: Path, work: Path, *, timeout: float, cell_timeout: float | None = None,
              env: Mapping[str, str] | None = None, sandbox: Limits | None = DEFAULT_LIMITS) -> Result:
    """Grade one submission in its own course root (a copy of the template's gradebook), and make its feedback page
    there (feedback/<student>/<assignment>/, without a line of the answers); never raises.

    Its kernel runs in the sandbox (autograder/sandbox/) within the limits `sandbox`; None: unconfined.
    """
    start = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix=f"grade-{entry.student}-", dir=work))
    result = Result(student=entry.student, assignment=entry.assignment, status=FAILED, root=root)
    lines: frozenset[str] = frozenset()  # the answer lines: kept out of the notes and the feedback page
    try:
        lines = template_answers(template, entry.assignment)
        shutil.copytree(course_dir(template, "source") / entry.assignment,
                        course_dir(root, "source") / entry.assignment)
        shutil.copy(template / "gradebook.db", root / "gradebook.db")
        released = template / "release" / entry.assignment
        checked = check_notebooks(entry, released)
        result.notes, result.tampered, result.flagged = checked.notes, checked.tampered, checked.flagged
        result.max_score = _max_score(template, entry.assignment)
        if not checked.notebooks:
            return result
        dest = course_dir(root, "submitted") / entry.student / entry.assignment
        dest.mkdir(parents=True)
        for name, nb in checked.notebooks.items():
            (dest / name).write_text(json.dumps(nb))
        for name, path in entry.extras.items():
            shutil.copy(path, dest / name)
        args = [entry.assignment, "--force", f"--student={entry.student}",
                "--OverwriteCells.add_missing_cells=True"]  # a deleted test cell is put back and run
        if cell_timeout is not None:
            args.append(f"--Execute.timeout={int(cell_timeout)}")
        box = Box.open(root, sandbox)
        # Both out of the kernel's reach, in the course root: GuardedExecute's verdicts (autograder/execution.py)
        # and the answer lines that the feedback page must not show (autograder/feedback.py).
        verdicts, answers = root / "verdicts.jsonl", root / "answers.json"
        answers.write_text(json.dumps({entry.assignment: sorted(lines)}))
        tag = new_tag()[TAG_VARIABLE]
        kernel_env = {**FIGURES_UNDRAWN, **(env or {}), **box.env()}
        try:
            box.serve(nbgrader_env(kernel_env, tag), course_dir(root, "autograded") / entry.student / entry.assignment,
                      len(checked.notebooks))
            run = run_nbgrader("autograde", *args, *box.args, root=root, check=False, tag=tag, wrap=confine(box),
                               env={**kernel_env, VERDICTS_VARIABLE: str(verdicts), ANSWERS_VARIABLE: str(answers)},
                               timeout=max(1.0, timeout - (time.monotonic() - start)))
        finally:
            result.notes += box.close()  # its scratch removed: nothing the kernel wrote is left to be read
        result.tag = run.tag
        (root / "nbgrader.log").write_text(run.log)
        said = read_verdicts(verdicts)
        if said[FAULT_KEY]:
            result.status = GRADER_ERROR
            result.notes += [f"grader error: {fault}; nbgrader's log says more" for [fault] in said[FAULT_KEY]]
            return result
        if run.returncode is None:
            result.status = TIMED_OUT
            result.notes.append(f"grading stopped after {timeout:g} s (the limit for a whole submission): "
                                "some cell never finished, so no cell could be scored")
            return result
        result.tampered += reported_by_nbgrader(run.log)
        if run.returncode != 0 and "CellTimeoutError" in run.log:  # nbclient gives up when a cell ignores SIGINT
            result.status = TIMED_OUT
            limit = cell_limit(cell_timeout)
            result.notes.append(f"a cell ran past the limit of {limit:g} s for one cell and did not stop when "
                                "interrupted, so grading stopped there: no cell could be scored")
            return result
        if run.returncode != 0:
            result.notes.append(f"nbgrader failed (exit {run.returncode}); see its log")
            return result
        graded = course_dir(root, "autograded") / entry.student / entry.assignment
        if fault := setup_failure(graded):
            result.status = GRADER_ERROR
            result.notes.append(fault)
            return result
        if any(checked.untrusted.values()):
            _zero_untrusted(root, entry, checked.untrusted, result)
        result.score, result.max_score = read_score(root, entry.student, entry.assignment)
        result.status = GRADED
        feedback = make_feedback(root, answers, entry.assignment, f"--student={entry.student}", check=False,
                                 timeout=max(1.0, timeout - (time.monotonic() - start)))
        (root / "nbgrader.log").write_text(run.log + feedback.log)
        told, result.withheld = failed_tests(graded)
        result.notes += told
        # failed_tests says each of these too: "NotRunAsWritten: ..."
        result.flagged += [f"{cell} did not run to its end as written ({why})" for cell, why in said[NOT_RUN_KEY]]
        result.flagged += [f"{cell} showed a result or a display ({what}): not counted, a test's verdict is its "
                           "assertions" for cell, what in said[RESULT_KEY]]
        result.notes += [f"{cell} printed more than {OUTPUT_WORDS}: its output was cut there (an output flood)"
                         for [cell] in said[CUT_KEY]]
        return result
    except Exception as exc:  # one broken submission must not stop the class
        result.notes.append(f"the grader failed on this submission: {type(exc).__name__}: {exc}")
        return result
    finally:
        result.seconds = time.monotonic() - start
        result.notes = [scrub(note, lines) for note in result.notes]
        result.withheld = [scrub(note, lines) for note in result.withheld]


def confine(box: Box) -> list[str]:
    """The argv prefix of a sandboxed autograde (confine.py; none unsandboxed): no capability, reading only the
    installed environment and the course root, writing only the course root (the autograded notebooks, the gradebook,
    the verdicts) and the kernel's socket folder (its connection file). Its kernel is started by the box's launch
    server (Box.serve), as root: the one part of grading that needs it."""
    if box.limits is None:
        return []
    root = box.jupyter.parent
    return confined([root], [root, box.connection_file.parent])


def make_feedback(root: Path, answers: Path, *args: str, timeout: float | None = None,
                  check: bool = True) -> NbgraderRun:
    """nbgrader generate_feedback `args` in the course root `root`, the answer lines in `answers` hidden from it.

    It reads notebooks whose every output a submission wrote, and renders them through templates: so it runs once
    the submission's sandbox is closed, with Jupyter paths that only the grader writes (jupyter_env), and, where
    Landlock is there, confined (autograder/sandbox/confine.py): no capability, reading only the installed
    environment, the course root and `answers`, writing only the root's feedback/.
    """
    folder = course_dir(root, "feedback")
    folder.mkdir(exist_ok=True)
    wrap = confined([root, answers], [folder]) if landlock.abi_version() >= MIN_LANDLOCK_ABI else []
    return run_nbgrader("generate_feedback", *args, "--force", root=root, check=check, timeout=timeout, wrap=wrap,
                        env={**jupyter_env(root / JUPYTER_FOLDER), ANSWERS_VARIABLE: str(answers)})


def read_verdicts(path: Path) -> dict[str, list[list[str]]]:
    """GuardedExecute's verdicts, by kind (FAULT_KEY, NOT_RUN_KEY, RESULT_KEY, CUT_KEY): the values of each, in
    order."""
    said: dict[str, list[list[str]]] = {FAULT_KEY: [], NOT_RUN_KEY: [], RESULT_KEY: [], CUT_KEY: []}
    if path.is_file():
        for line in path.read_text().splitlines():
            key, *values = json.loads(line)
            said[key].append(values)
    return said


def setup_failure(folder: Path) -> str | None:
    """A locked cell that failed before any of the submission's own code ran: the course's setup, and so the
    grader's fault (the kernel cannot import the course, the sandbox refused its files), not the submission's."""
    for path in sorted(folder.glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] != "code":
                continue
            if not meta(cell).get("locked"):
                break
            errors = [o for o in cell.get("outputs", []) if o["output_type"] == "error"]
            if errors:
                return (f"grader error: the locked cell {meta(cell).get('grade_id', '?')} of {path.name} failed "
                        f"before any of the submission's code ran: {errors[0]['ename']}: {errors[0]['evalue']}")
    return None


def _zero_untrusted(root: Path, entry: Entry, untrusted: dict[str, list[str]], result: Result) -> None:
    """Score 0 (as a manual grade) every test that ran after the submission replaced a helper.

    A test cell that calls `launch` or `torch.equal` after the student's cell redefined it tests nothing, and
    nbgrader cannot tell: so those points are withheld, for an instructor to review by hand.
    """
    from nbgrader.api import Gradebook  # slow to import: only when needed

    with Gradebook(gradebook_url(root), nbgrader_config().CourseDirectory.course_id) as gb:
        for notebook, cells in untrusted.items():
            for cell in cells:
                grade = gb.find_grade(cell, notebook, entry.assignment, entry.student)
                grade.manual_score = 0.0
            gb.db.commit()
    cells = ", ".join(c for v in untrusted.values() for c in v)
    result.notes.append(f"not counted, for review by an instructor: {cells} (they ran after your code replaced "
                        "a grading helper)")


STDERR = "wrote to stderr"  # a test cell that does scores 0 in nbgrader
WITHHELD_LINES = 40  # of a hidden check's message in the instructor's notes (a visible one's: 8 in the student's)


def cell_errors(cell: dict) -> list[str]:
    """What nbgrader scores as a failure in an executed cell: each error, then each stderr output."""
    outputs = cell.get("outputs", [])
    errors = [f"{o['ename']}: {o.get('evalue', '')}".strip() for o in outputs if o["output_type"] == "error"]
    return errors + [f"{STDERR}: " + "".join(o["text"]).strip() for o in outputs
                     if o["output_type"] == "stream" and o["name"] == "stderr"]


def failed_tests(folder: Path) -> tuple[list[str], list[str]]:
    """The test cells of the autograded notebooks in `folder` that failed: (one line each for the student: name,
    points, the error as autograder/scrub.py's as_told words it, as the feedback page does; one line each for the
    instructor of what a failure in a hidden region said, which the student's line replaces by "a hidden check of
    exercise N.k failed").
    """
    told, withheld = [], []
    for path in sorted(folder.glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            info = meta(cell)
            if not (info.get("grade") and cell["cell_type"] == "code" and (errors := cell_errors(cell))):
                continue
            line = f"{info['grade_id']} ({info.get('points', 0):g} points) failed: "
            if errors[0].startswith(STDERR):  # what it wrote stays in the instructor's copy, like all its output
                told.append(line + STDERR)
                continue
            error = next(o for o in cell["outputs"] if o["output_type"] == "error")
            ename, evalue = as_told(error, source(cell), info["grade_id"])
            if ename == HIDDEN_CHECK:  # the instructor's line keeps the whole message (a rank's runs past 8 lines)
                told.append(line + evalue)
                whole = "\n".join(errors[0].splitlines()[:WITHHELD_LINES])
                withheld.append(line + f"(a hidden check, not shown to the student) {whole}")
            else:
                told.append(line + "\n".join(f"{ename}: {evalue}".strip().splitlines()[:8]))
    return told, withheld


def _max_score(template: Path, assignment: str) -> float:
    total = 0.0
    for nb in (template / "release" / assignment).glob("*.ipynb"):
        total += sum(float(meta(c).get("points", 0)) for c in json.loads(nb.read_text())["cells"]
                     if meta(c).get("grade"))
    return total
