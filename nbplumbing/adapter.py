"""The course's nbgrader: its config, the course folders, the one way to run an nbgrader command, the release and
the scores of a gradebook.

Every nbgrader command runs as a subprocess with the course's config, autograder/nbgrader_config.py (run_nbgrader),
quiet on success and with nbgrader's whole log in the exception on failure. Every function takes the course root
(the folder that holds solutions/, submitted/, autograded/, feedback/ and gradebook.db), so the tests can grade in a
temporary folder without touching the repository's gradebook. Grading (autograder/) and the class's logistics
(classroom/) both run nbgrader through this module; it imports neither.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from traitlets.config import Config, PyFileConfigLoader

from nbplumbing.processes import TAG_VARIABLE, kill_tagged, new_tag

log = logging.getLogger("nbplumbing")

REPO_ROOT = Path(__file__).resolve().parents[1]
# The course's nbgrader config is grading's (it wires in autograder/'s preprocessors); nbgrader loads it by its path.
CONFIG_FILE = REPO_ROOT / "autograder" / "nbgrader_config.py"
# The course's Jupyter kernel, which the Makefile installs into the venv (`ipykernel install --sys-prefix --name
# ddp-course`). Every notebook asks for it: JupyterLab then opens each lab on the venv's Python without a kernel
# picker, and nbgrader (which grades on the kernelspec of solutions/) runs the same interpreter.
COURSE_KERNELSPEC = {"display_name": "Python (DDP course)", "language": "python", "name": "ddp-course"}


# `python -m nbgrader`, less a grammar it never uses: jsonschema (through nbformat) imports rfc3987-syntax when it is
# installed (jupyter-events pulls it in) to check "iri" formats, and that import builds a lark grammar: 1.4-2.6 s of
# CPU (quiet to busy 2 cores), more than half of nbgrader's start, in every command (once per graded submission).
# No schema nbgrader validates has an "iri" format; with the module marked missing, jsonschema skips that checker.
# A command that creates a gradebook (generate_assignment, once per grading run) asks a new `alembic` process for the
# newest revision of nbgrader's schema (nbgrader.api.get_alembic_version): about 2.8 s of CPU each time, and the same
# answer for one nbgrader version. ALEMBIC_HEAD is that answer for the pinned one; tests/test_grade.py asks alembic.
ALEMBIC_HEAD = "e43177bfe90b"
NBGRADER_MAIN = f"""
import sys
sys.modules['rfc3987_syntax'] = None
import nbgrader.api
nbgrader.api.get_alembic_version = lambda: "{ALEMBIC_HEAD}"
from jupyter_core.application import NoStart
from nbgrader.apps.nbgraderapp import NbGraderApp


def run(argv):
    app = NbGraderApp.instance()
    try:
        app.initialize(argv)
        app.start()
    except NoStart:  # what a subcommand's app raises once it is done (launch_instance catches it too)
        pass
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else int(stop.code is not None)
    finally:
        app.reset()
    return 0


sys.exit(run(sys.argv[1:]))
"""


class PipelineError(RuntimeError):
    """Something in the course folders is not what the pipeline expects (the message says what)."""


class NbgraderError(PipelineError):
    """An nbgrader command exited non-zero; the message holds the command and nbgrader's whole log."""


@dataclass(frozen=True)
class NbgraderRun:
    """How an nbgrader command ended: its exit status (None when stopped at its time limit) and its log."""

    returncode: int | None
    log: str
    tag: str  # TAG_VARIABLE of every process it started (nbplumbing.processes finds them by it)


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


def run_nbgrader(command: str, *args: str, root: Path, env: Mapping[str, str] | None = None,
                 timeout: float | None = None, check: bool = True, wrap: Sequence[str] = (),
                 tag: str | None = None) -> NbgraderRun:
    """Run `nbgrader <command> <args>` on the course root with the course config; return how it ended.

    `wrap` is an argv prefix that runs nbgrader (confined: autograder/sandbox/confine.py).

    `env` is added to the environment of nbgrader and so of every kernel it starts (e.g. COURSE_FAST=1). Past
    `timeout` seconds the command is stopped; when it ends, every process it started is gone (the kernel, and
    any rank the kernel forked, are found by a tag in their environment: `tag`, or a fresh one). With `check`, a
    non-zero exit or the time limit raises NbgraderError with the command line and nbgrader's whole log.
    """
    root = Path(root).resolve()
    # JupyterApp.config_file, without ".py": nbgrader's own "is there a config?" check appends it. The command line
    # beats the root computed in the config.
    common = [f"--NbGrader.config_file={CONFIG_FILE.with_suffix('')}", f"--CourseDirectory.root={root}"]
    argv = [*wrap, sys.executable, "-c", NBGRADER_MAIN, command, *args, *common]
    tag = tag or new_tag()[TAG_VARIABLE]
    full_env = nbgrader_env(env, tag)
    start = time.perf_counter()
    # The log goes to a file, not a pipe: a rank that outlived its kernel could hold a pipe open forever.
    with tempfile.TemporaryFile("w+", errors="replace") as output:
        proc = subprocess.Popen(argv, cwd=root, env=full_env, stdout=output, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            returncode: int | None = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_tagged(tag, group=proc.pid)
            proc.wait()
            returncode = None
        finally:
            kill_tagged(tag)  # whatever outlived nbgrader (a rank that ignored its kernel's death)
        output.seek(0)
        run = NbgraderRun(returncode, output.read(), tag)
    log.debug("nbgrader %s took %.1f s", command, time.perf_counter() - start)
    if check and run.returncode != 0:
        how = f"was stopped after {timeout:g} s" if run.returncode is None else f"failed (exit {run.returncode})"
        raise NbgraderError(f"nbgrader {command} {how}:\n  {' '.join(['nbgrader', *argv[len(wrap) + 3:]])}\n"
                            f"----- nbgrader's log -----\n{run.log}")
    return run


def nbgrader_env(env: Mapping[str, str] | None, tag: str) -> dict[str, str]:
    """The environment of an nbgrader command run with `env` and the tag `tag` (TAG_VARIABLE: nbplumbing.processes),
    which every process it starts inherits: the sandboxed kernel, started by the grader, is given the same."""
    full_env = {**os.environ, **(env or {}), TAG_VARIABLE: tag}
    # nbgrader creates a gradebook by running the `alembic` executable found on PATH
    # (nbgrader/api.py:37, get_alembic_version), so without an activated venv it fails: put ours first.
    full_env["PATH"] = os.pathsep.join([sysconfig.get_path("scripts"), full_env.get("PATH", "")])
    return full_env


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


# ---- the release -------------------------------------------------------------------------------------------------


def release(root: Path = REPO_ROOT, *, release_dir: Path | None = None) -> list[Path]:
    """Regenerate the student release (course/ by default) from solutions/; return the notebooks written.

    nbgrader generate_assignment --force --no-db for every assignment: solutions and hidden tests are
    removed, outputs and execution counts cleared, and each course/<assignment>/ is rebuilt from scratch,
    so a second run is byte-identical. A folder of the release whose assignment has left solutions/ is
    removed. No gradebook is touched (grading registers the assignments in a gradebook of its own). A notebook
    that asks for another kernel than COURSE_KERNELSPEC stops the release before anything is written. Each
    notebook carries the course kernel's language_info, as JupyterLab saves it (stamp_language_info).
    """
    names = assignment_names(root)
    if not names:
        raise PipelineError(f"no assignments in {course_dir(root, 'source')}: expected <assignment>/*.ipynb")
    check_course_kernel(root)
    dest = Path(release_dir).resolve() if release_dir is not None else course_dir(root, "release")
    run_nbgrader("generate_assignment", "*", "--force", "--no-db", f"--CourseDirectory.release_directory={dest}",
                 root=root)
    for stale in sorted(p for p in dest.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if stale.name not in names:
            log.info("removing %s: its assignment is no longer in solutions/", stale)
            shutil.rmtree(stale)
    written = sorted(dest.glob("*/*.ipynb"))
    for path in written:
        stamp_language_info(path)
    missing = [f"{a}/{n}.ipynb" for a in names for n in notebook_names(root, a)
               if not (dest / a / f"{n}.ipynb").is_file()]
    if missing:
        raise PipelineError(f"nbgrader did not write {', '.join(missing)} into {dest}")
    return written


def stamp_language_info(path: Path) -> None:
    """Set the notebook's metadata.language_info to what the course kernel reports, in place.

    JupyterLab writes the kernel's language_info into a notebook as it opens it, and marks the notebook modified
    unless the file already holds that very value (a deep comparison): so a release without it opens with the
    "modified" dot, asks to be saved on closing, and is rewritten by Validate. The course kernel is ipykernel on
    this interpreter (COURSE_KERNELSPEC, installed into the venv), whose language_info names its Python version.
    """
    from ipykernel.ipkernel import IPythonKernel  # slow to import: only when releasing

    notebook = json.loads(path.read_text())
    notebook["metadata"]["language_info"] = IPythonKernel.language_info
    path.write_text(json.dumps(notebook, indent=1, sort_keys=True, ensure_ascii=False) + "\n")  # as nbformat writes


def check_course_kernel(root: Path = REPO_ROOT) -> None:
    """Raise PipelineError naming every notebook of solutions/ whose kernelspec is not COURSE_KERNELSPEC."""
    source = course_dir(root, "source")
    wrong = {}
    for assignment in assignment_names(root):
        for name in notebook_names(root, assignment):
            path = source / assignment / f"{name}.ipynb"
            kernelspec = json.loads(path.read_text()).get("metadata", {}).get("kernelspec")
            if kernelspec != COURSE_KERNELSPEC:
                wrong[path.relative_to(root).as_posix()] = (kernelspec or {}).get("name", "no kernel")
    if wrong:
        listed = ", ".join(f"{path} ({kernel})" for path, kernel in wrong.items())
        raise PipelineError(
            f"every notebook must ask for the course kernel {COURSE_KERNELSPEC['name']!r}; these ask for another: "
            f"{listed}. "
            f"Open each one in `make lab`, choose Kernel > Change Kernel > {COURSE_KERNELSPEC['display_name']} and "
            f"save (or set its metadata.kernelspec to {json.dumps(COURSE_KERNELSPEC)}).")


def read_score(root: Path, student: str, assignment: str) -> tuple[float, float]:
    """(score, max score) of a student's submission of an assignment, as the gradebook of `root` has it."""
    from nbgrader.api import Gradebook, MissingEntry  # slow to import: only when needed

    db = Path(root) / "gradebook.db"
    if not db.is_file():  # Gradebook() would create an empty one, and needs `alembic` on PATH to do so
        raise PipelineError(f"no gradebook at {db}: run the autograde first")
    with Gradebook(gradebook_url(root), nbgrader_config().CourseDirectory.course_id) as gb:
        try:
            sub = gb.find_submission(assignment, student)
        except MissingEntry as exc:
            raise PipelineError(f"the gradebook has no grades for {student}/{assignment}") from exc
        return float(sub.score), float(sub.max_score)
