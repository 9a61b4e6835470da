"""The nbgrader pipeline: solutions/ -> course/ (release), submitted/ -> gradebook (autograde) -> feedback/.

Every step runs nbgrader as a subprocess with autograder/nbgrader_config.py, quiet on success and with
nbgrader's whole log in the exception on failure. Every function takes the course root (the folder that
holds solutions/, submitted/, autograded/, feedback/ and gradebook.db), so the tests can grade in a
temporary folder without touching the repository's gradebook:

    scores = autograde(tmp_root, env={"COURSE_FAST": "1"})
"""

from __future__ import annotations

import csv
import logging
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import astuple, dataclass, fields
from functools import cache
from pathlib import Path

from traitlets.config import Config, PyFileConfigLoader

log = logging.getLogger("autograder")

REPO_ROOT = Path(__file__).resolve().parents[1]
CONFIG_FILE = Path(__file__).resolve().with_name("nbgrader_config.py")


class PipelineError(RuntimeError):
    """Something in the course folders is not what the pipeline expects (the message says what)."""


class NbgraderError(PipelineError):
    """An nbgrader command exited non-zero; the message holds the command and nbgrader's whole log."""


@dataclass(frozen=True)
class Submission:
    """One student's submission of one assignment: submitted/<student>/<assignment>/*.ipynb."""

    student: str
    assignment: str
    notebooks: tuple[Path, ...]


@dataclass(frozen=True)
class Score:
    """A submission's total as the gradebook has it (manually graded cells count once someone grades them)."""

    student: str
    assignment: str
    score: float
    max_score: float
    needs_manual_grade: bool


# ---- configuration -----------------------------------------------------------------------------------------


@cache
def nbgrader_config() -> Config:
    """The traitlets Config of autograder/nbgrader_config.py, loaded the way nbgrader loads it."""
    return PyFileConfigLoader(CONFIG_FILE.name, path=str(CONFIG_FILE.parent)).load_config()


def course_dir(root: Path, step: str) -> Path:
    """The folder of an nbgrader step ("source", "release", "submitted", "autograded", "feedback") in root."""
    return Path(root) / nbgrader_config().CourseDirectory[f"{step}_directory"]


def gradebook_url(root: Path) -> str:
    """The SQLAlchemy URL of the gradebook of a course root (nbgrader's default: <root>/gradebook.db)."""
    return f"sqlite:///{Path(root).resolve() / 'gradebook.db'}"


# ---- running nbgrader ---------------------------------------------------------------------------------------


def run_nbgrader(command: str, *args: str, root: Path, env: Mapping[str, str] | None = None) -> str:
    """Run `nbgrader <command> <args>` on the course root with the course config; return its log.

    Raises NbgraderError, with the command line and nbgrader's whole output, when it exits non-zero.
    `env` is added to the environment of nbgrader and so of every kernel it starts (e.g. COURSE_FAST=1).
    """
    root = Path(root).resolve()
    argv = [
        sys.executable, "-m", "nbgrader", command, *args,
        # JupyterApp.config_file, without ".py": nbgrader's own "is there a config?" check appends it.
        f"--NbGrader.config_file={CONFIG_FILE.with_suffix('')}",
        f"--CourseDirectory.root={root}",  # the command line beats the root computed in the config
    ]
    # nbgrader creates a gradebook by running the `alembic` executable found on PATH
    # (nbgrader/api.py:37, get_alembic_version), so without an activated venv it fails: put ours first.
    scripts = sysconfig.get_path("scripts")
    full_env = {**os.environ, **(env or {})}
    full_env["PATH"] = os.pathsep.join([scripts, full_env.get("PATH", "")])
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=root, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, check=False)
    log.debug("nbgrader %s took %.1f s", command, time.perf_counter() - start)
    if proc.returncode != 0:
        cmdline = " ".join(argv)
        raise NbgraderError(f"nbgrader {command} failed (exit {proc.returncode}):\n  {cmdline}\n"
                            f"----- nbgrader's log -----\n{proc.stdout}")
    return proc.stdout


# ---- finding things ----------------------------------------------------------------------------------------


def assignment_names(root: Path = REPO_ROOT) -> list[str]:
    """The assignments of a course root: every non-hidden folder of solutions/ that holds a notebook.

    This is what nbgrader's "*" matches (glob skips dot-folders; a folder without notebooks is skipped).
    """
    source = course_dir(root, "source")
    if not source.is_dir():
        return []
    return sorted(p.name for p in source.iterdir()
                  if p.is_dir() and not p.name.startswith(".") and any(p.glob("*.ipynb")))


def notebook_names(root: Path, assignment: str) -> list[str]:
    """The notebook names (stems) of an assignment in solutions/."""
    return sorted(p.stem for p in (course_dir(root, "source") / assignment).glob("*.ipynb"))


def find_submissions(root: Path = REPO_ROOT) -> list[Submission]:
    """Every submission under submitted/<student>/<assignment>/<notebook>.ipynb, checked before grading.

    Raises PipelineError listing every problem at once: no submissions at all, a notebook at the wrong
    depth, an assignment that solutions/ does not have, a notebook whose name is not one of the
    assignment's (nbgrader would skip it with a warning and give zero), a submission without notebooks.
    """
    submitted = course_dir(root, "submitted")
    layout = f"{submitted.name}/<student>/<assignment>/<notebook>.ipynb"
    known = set(assignment_names(root))
    problems: list[str] = []
    found: list[Submission] = []
    students = sorted(p for p in submitted.iterdir()
                      if p.is_dir() and not p.name.startswith(".")) if submitted.is_dir() else []
    for stray in sorted(submitted.glob("*.ipynb")) + sorted(submitted.glob("*/*.ipynb")):
        problems.append(f"{stray.relative_to(root)}: not where nbgrader looks, expected {layout}")
    for student_dir in students:
        for folder in sorted(p for p in student_dir.iterdir() if p.is_dir() and not p.name.startswith(".")):
            where = folder.relative_to(root)
            notebooks = tuple(sorted(folder.glob("*.ipynb")))
            if folder.name not in known:
                problems.append(f"{where}: no assignment '{folder.name}' in {course_dir(root, 'source').name}/"
                                f" (assignments: {', '.join(sorted(known)) or 'none'})")
                continue
            if not notebooks:
                problems.append(f"{where}: no notebook submitted")
                continue
            expected = notebook_names(root, folder.name)
            for nb in notebooks:
                if nb.stem not in expected:
                    problems.append(f"{nb.relative_to(root)}: '{nb.name}' is not a notebook of "
                                    f"{folder.name} (expected: {', '.join(n + '.ipynb' for n in expected)})")
            found.append(Submission(student_dir.name, folder.name, notebooks))
    if problems:
        raise PipelineError("cannot grade these submissions:\n  " + "\n  ".join(problems))
    if not found:
        raise PipelineError(f"no submissions to grade in {submitted}: expected {layout}")
    return found


# ---- the three steps ---------------------------------------------------------------------------------------


def release(root: Path = REPO_ROOT, *, release_dir: Path | None = None) -> list[Path]:
    """Regenerate the student release (course/ by default) from solutions/; return the notebooks written.

    nbgrader generate_assignment --force --no-db for every assignment: solutions and hidden tests are
    removed, outputs and execution counts cleared, and each course/<assignment>/ is rebuilt from scratch,
    so a second run is byte-identical. A folder of the release whose assignment has left solutions/ is
    removed. The gradebook is not touched (autograde registers assignments itself).
    """
    names = assignment_names(root)
    if not names:
        raise PipelineError(f"no assignments in {course_dir(root, 'source')}: expected <assignment>/*.ipynb")
    dest = Path(release_dir).resolve() if release_dir is not None else course_dir(root, "release")
    run_nbgrader("generate_assignment", "*", "--force", "--no-db", f"--CourseDirectory.release_directory={dest}",
                 root=root)
    for stale in sorted(p for p in dest.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if stale.name not in names:
            log.info("removing %s: its assignment is no longer in solutions/", stale)
            shutil.rmtree(stale)
    written = sorted(dest.glob("*/*.ipynb"))
    missing = [f"{a}/{n}.ipynb" for a in names for n in notebook_names(root, a)
               if not (dest / a / f"{n}.ipynb").is_file()]
    if missing:
        raise PipelineError(f"nbgrader did not write {', '.join(missing)} into {dest}")
    return written


def register_assignments(root: Path = REPO_ROOT) -> None:
    """Create or update every assignment of solutions/ in the gradebook (generate_assignment with the db).

    Autograde pastes the gradebook's copy of every test cell over the student's (nbgrader's OverwriteCells),
    so the gradebook must hold the current tests, not those of whenever it was first created: this runs
    before every autograde. The generated notebooks go to a scratch folder; course/ is left alone.
    """
    with tempfile.TemporaryDirectory(prefix="nbgrader-release-") as scratch:
        run_nbgrader("generate_assignment", "*", "--force", f"--CourseDirectory.release_directory={scratch}",
                     root=root)


def autograde(root: Path = REPO_ROOT, *, students: Iterable[str] | None = None,
              env: Mapping[str, str] | None = None, register: bool = True) -> list[Score]:
    """Grade the submissions under submitted/ and return their scores, read back from the gradebook.

    Checks the submitted layout first (find_submissions), registers the assignments (unless
    register=False) and creates the students in the gradebook as needed, then runs nbgrader autograde
    --force: once per assignment for every student, or once per (assignment, student) when `students`
    picks some. `env` reaches the grading kernels, e.g. {"COURSE_FAST": "1"}. nbgrader's exit code says
    nothing about the grades (a failing test is not an error), so the scores come from the gradebook.
    """
    submissions = find_submissions(root)
    if students is not None:
        wanted = set(students)
        submissions = [s for s in submissions if s.student in wanted]
        if missing := wanted - {s.student for s in submissions}:
            raise PipelineError(f"no submissions from {', '.join(sorted(missing))} in "
                                f"{course_dir(root, 'submitted')}")
    if register:
        register_assignments(root)
    for assignment in sorted({s.assignment for s in submissions}):
        start = time.perf_counter()
        if students is None:
            run_nbgrader("autograde", assignment, "--force", root=root, env=env)
        else:
            for student in sorted({s.student for s in submissions if s.assignment == assignment}):
                run_nbgrader("autograde", assignment, "--force", f"--student={student}", root=root, env=env)
        log.info("graded %s in %.0f s", assignment, time.perf_counter() - start)
    return read_scores(root, [(s.student, s.assignment) for s in submissions])


def read_scores(root: Path = REPO_ROOT, which: Iterable[tuple[str, str]] | None = None) -> list[Score]:
    """The scores of (student, assignment) pairs from the gradebook; all of its submissions by default."""
    from nbgrader.api import Gradebook, MissingEntry  # slow to import: only when needed

    db = Path(root) / "gradebook.db"
    if not db.is_file():  # Gradebook() would create an empty one, and needs `alembic` on PATH to do so
        raise PipelineError(f"no gradebook at {db}: run the autograde first")
    course_id = nbgrader_config().CourseDirectory.course_id
    scores = []
    with Gradebook(gradebook_url(root), course_id) as gb:
        if which is None:
            which = [(s.student.id, s.assignment.name) for a in gb.assignments for s in a.submissions]
        for student, assignment in sorted(set(which)):
            try:
                sub = gb.find_submission(assignment, student)
            except MissingEntry as exc:
                raise PipelineError(f"the gradebook has no grades for {student}/{assignment}") from exc
            scores.append(Score(student, assignment, float(sub.score), float(sub.max_score),
                                bool(sub.needs_manual_grade)))
    return scores


def feedback(root: Path = REPO_ROOT) -> list[Path]:
    """Write HTML feedback for everything in autograded/ into feedback/; return the files written."""
    autograded = course_dir(root, "autograded")
    if not any(autograded.glob("*/*/*.ipynb")):
        raise PipelineError(f"nothing autograded in {autograded}: run the autograde first")
    run_nbgrader("generate_feedback", "*", "--force", root=root)
    return sorted(course_dir(root, "feedback").glob("*/*/*.html"))


# ---- reporting ---------------------------------------------------------------------------------------------


def format_table(scores: Iterable[Score]) -> str:
    """A plain-text table: student, assignment, score, max score (and a mark where manual grading is due)."""
    rows = [("student", "assignment", "score", "max score")]
    for s in scores:
        mark = "  (+ manual grading)" if s.needs_manual_grade else ""
        rows.append((s.student, s.assignment, f"{s.score:g}", f"{s.max_score:g}{mark}"))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = [f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:>{widths[2]}}  {r[3]}" for r in rows]
    return "\n".join(lines)


def write_csv(scores: Iterable[Score], path: Path) -> Path:
    """Write the scores to a CSV file with the Score field names as header; return its path."""
    path = Path(path)
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow([f.name for f in fields(Score)])
        writer.writerows(astuple(s) for s in scores)
    return path
