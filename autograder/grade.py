"""Batch grading of a whole class: a folder of submissions in, a gradebook, a CSV and HTML feedback out.

    python -m autograder grade SUBMISSIONS [--workers K] [--timeout S] [--out DIR]

SUBMISSIONS is nbgrader's submitted layout (<student>/<assignment>/<notebook>.ipynb) or a flat folder of
.ipynb / .zip files downloaded from a learning management system, named the way nbgrader's zip_collect
documents it (FileNameCollectorPlugin.named_regexp has no default; its documented example is ours):

    <anything>_<student>_attempt_<timestamp>_<notebook>.ipynb     (or .zip holding the notebook)

Each submission is graded by its own `nbgrader autograde` in its own temporary course root (its own copy
of the registered gradebook), so K workers never share an sqlite file; the parent merges every worker's
gradebook into DIR/gradebook.db as results arrive, one at a time. A submission that runs past its wall-clock
limit is stopped with its whole process tree: nbgrader, its kernel and every rank the kernel forked
(autograder/processes.py). Tampering is looked for before a submission runs (autograder/tamper.py).

Out (DIR, default ./graded): gradebook.db, grades.csv, lms-grades.csv, autograded/,
feedback/<student>/<assignment>/*.html and grading-logs/ (nbgrader's log of every submission). `make autograde`
is this same grading, of the course root's submitted/ folder, into the course root itself.

A run resumes where an interrupted one stopped (Ctrl-C stops every running submission and keeps the graded
ones); `--fresh` grades everything again. `--shard i/n` grades one shard of the students, for a batch system
to spread a class over machines; `python -m autograder merge OUT SHARD...` joins the shards (gradebook.py).
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import html
import json
import os
import re
import shutil
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from autograder import gradebook
from autograder.gradebook import LOGS
from autograder.pipeline import (
    REPO_ROOT,
    PipelineError,
    assignment_names,
    course_dir,
    gradebook_url,
    nbgrader_config,
    notebook_names,
    read_score,
    run_nbgrader,
)
from autograder.processes import RUN_VARIABLE, kill_tagged, new_tag
from autograder.sandbox import DEFAULT_LIMITS, NOT_SANDBOXED, Box, Limits, describe, require
from autograder.tamper import find_tampering, meta, reported_by_nbgrader

# nbgrader's documented example of FileNameCollectorPlugin.named_regexp (it has no default), matched
# against the file name; a .zip's name gives the student and the notebooks inside it are taken as they are.
LMS_PATTERN = r".*_(?P<student_id>\w+)_attempt_(?P<timestamp>[0-9\-]+)_(?P<file_id>\w+)"
# What nbgrader's exchange puts beside a submitted notebook: when it was submitted (late penalties) and the secret
# that release_feedback and fetch_feedback match the feedback with. They go along into autograded/ and feedback/.
EXCHANGE_FILES = ("timestamp.txt", "submission_secret.txt")

GRADED, FAILED, TIMED_OUT = "graded", "failed", "timed out"


@dataclass
class Entry:
    """One submission to grade: a student's notebooks for one assignment (name -> file)."""

    student: str
    assignment: str
    notebooks: dict[str, Path]
    notes: list[str] = field(default_factory=list)  # said to the student and put in the CSV
    extras: dict[str, Path] = field(default_factory=dict)  # EXCHANGE_FILES found beside the notebooks


@dataclass
class Result:
    """What grading one submission gave: the one score type of `make grade` and `make autograde`."""

    student: str
    assignment: str
    status: str  # GRADED, FAILED or TIMED_OUT
    score: float
    max_score: float
    seconds: float
    tampered: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    root: Path | None = None  # the worker's course root (removed once merged)
    tag: str = ""  # the tag of its processes (autograder.processes)
    fingerprint: str = ""  # of the submission's files (a resumed run keeps the result while they are unchanged)


# ---- finding the submissions ---------------------------------------------------------------------------------


def collect(submissions: Path, work: Path, root: Path = REPO_ROOT) -> list[Entry]:
    """Every submission in `submissions` (nbgrader layout or a flat LMS folder); zips are extracted into work."""
    submissions = Path(submissions)
    known = assignment_names(root)
    if not submissions.is_dir():
        raise PipelineError(f"{submissions} is not a folder of submissions")
    entries: dict[tuple[str, str], Entry] = {}
    stamps: dict[tuple[str, str], str] = {}
    for student_dir in sorted(p for p in submissions.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if strays := sorted(p.name for p in student_dir.glob("*.ipynb")):
            raise PipelineError(f"{student_dir}: {', '.join(strays)} not in an assignment folder: expected "
                                f"{student_dir.name}/<assignment>/<notebook>.ipynb")
        for folder in sorted(p for p in student_dir.iterdir() if p.is_dir() and not p.name.startswith(".")):
            if folder.name not in known:
                raise PipelineError(f"{folder}: no assignment '{folder.name}' (assignments: {', '.join(known)})")
            nbs = {p.name: p for p in sorted(folder.glob("*.ipynb"))}
            extras = {name: folder / name for name in EXCHANGE_FILES if (folder / name).is_file()}
            entries[(student_dir.name, folder.name)] = Entry(student_dir.name, folder.name, nbs, extras=extras)
    for path in sorted(p for p in submissions.iterdir() if p.is_file() and p.suffix in (".ipynb", ".zip")):
        match = re.match(LMS_PATTERN, path.stem)
        if not match:
            raise PipelineError(f"{path.name}: not named like <anything>_<student>_attempt_<timestamp>_<notebook>"
                                f"{path.suffix} (nbgrader zip_collect's documented pattern)")
        student, stamp = match["student_id"], match["timestamp"]
        if path.suffix == ".zip":
            dest = work / "extracted" / path.stem
            with zipfile.ZipFile(path) as zf:
                zf.extractall(dest)
            files = sorted(p for p in dest.rglob("*.ipynb") if "__MACOSX" not in p.parts)
        else:
            files = [path]
        names = [Path(match["file_id"]).stem] if path.suffix == ".ipynb" else [f.stem for f in files]
        assignment = _assignment_of(names, known, root) or (known[0] if len(known) == 1 else None)
        if assignment is None:
            raise PipelineError(f"{path.name}: no assignment has a notebook named {', '.join(names)}")
        key = (student, assignment)
        if key in stamps and stamps[key] > stamp:
            continue  # an older attempt: the newest one counts (zip_collect keeps the newest too)
        stamps[key] = stamp
        entry = entries.setdefault(key, Entry(student, assignment, {}))
        if path.suffix == ".ipynb":
            entry.notebooks[f"{names[0]}.ipynb"] = path
        else:
            entry.notebooks.update({f.name: f for f in files})
    if not entries:
        raise PipelineError(f"no submissions in {submissions}: expected <student>/<assignment>/<notebook>.ipynb "
                            "or <anything>_<student>_attempt_<timestamp>_<notebook>.ipynb|.zip")
    return sorted(entries.values(), key=lambda e: (e.assignment, e.student))


def _assignment_of(names: list[str], known: list[str], root: Path) -> str | None:
    for assignment in known:
        if set(names) & set(notebook_names(root, assignment)):
            return assignment
    return None


# ---- checking a submission before it runs --------------------------------------------------------------------


def check_notebooks(entry: Entry, release: Path) -> tuple[dict[str, dict], list[str], list[str], dict]:
    """Read the submitted notebooks; return ({expected name: notebook}, notes, tampering, untrusted tests).

    A lone notebook under another name is graded as the assignment's lone notebook (and said so). Each
    notebook is compared with the released one for tampering (autograder.tamper).
    """
    expected = sorted(p.name for p in release.glob("*.ipynb"))
    notes, tampered = list(entry.notes), []
    untrusted: dict[str, list[str]] = {}  # notebook stem -> test cells that ran after a helper was replaced
    files = dict(entry.notebooks)
    if len(expected) == 1 and len(files) == 1 and expected[0] not in files:
        [(name, path)] = files.items()
        notes.append(f"your notebook was named {name}; it was graded as {expected[0]}")
        files = {expected[0]: path}
    notebooks = {}
    for name in expected:
        if name not in files:
            notes.append(f"{name} is missing from your submission: its exercises score 0")
            continue
        try:
            nb = json.loads(files[name].read_text())
            assert isinstance(nb.get("cells"), list) and nb["cells"]
        except (ValueError, AssertionError, AttributeError, UnicodeDecodeError):
            notes.append(f"{name} is empty or is not a notebook (it could not be read): its exercises score 0")
            continue
        notebooks[name] = nb
        found, untrusted[Path(name).stem] = find_tampering(nb, json.loads((release / name).read_text()), name)
        tampered += found
    for name in sorted(set(files) - set(expected)):
        notes.append(f"{name} is not a notebook of {entry.assignment}; it was not graded")
    return notebooks, notes, tampered, untrusted


# ---- grading one submission ---------------------------------------------------------------------------------


def prepare_template(assignments: list[str], work: Path, root: Path = REPO_ROOT) -> Path:
    """A course root with the assignments registered in its gradebook and released into release/."""
    template = work / "template"
    for assignment in assignments:
        shutil.copytree(course_dir(root, "source") / assignment, course_dir(template, "source") / assignment)
    run_nbgrader("generate_assignment", "*", "--force", f"--CourseDirectory.release_directory={template / 'release'}",
                 root=template)
    gradebook.canonical_ids(template / "gradebook.db")  # the same ids in every run: shards and resumes merge
    return template


def grade_one(entry: Entry, template: Path, work: Path, *, timeout: float, cell_timeout: float | None = None,
              env: Mapping[str, str] | None = None, sandbox: Limits | None = DEFAULT_LIMITS) -> Result:
    """Grade one submission in its own course root (a copy of the template's gradebook); never raises.

    Its kernel runs in the sandbox (autograder/sandbox/) within the limits `sandbox`; None: unconfined.
    """
    start = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix=f"grade-{entry.student}-", dir=work))
    result = Result(entry.student, entry.assignment, FAILED, 0.0, 0.0, 0.0, root=root)
    try:
        shutil.copytree(course_dir(template, "source") / entry.assignment,
                        course_dir(root, "source") / entry.assignment)
        shutil.copy(template / "gradebook.db", root / "gradebook.db")
        released = template / "release" / entry.assignment
        notebooks, result.notes, result.tampered, untrusted = check_notebooks(entry, released)
        result.max_score = _max_score(template, entry.assignment)
        if not notebooks:
            return result
        dest = course_dir(root, "submitted") / entry.student / entry.assignment
        dest.mkdir(parents=True)
        for name, nb in notebooks.items():
            (dest / name).write_text(json.dumps(nb))
        for name, path in entry.extras.items():
            shutil.copy(path, dest / name)
        args = [entry.assignment, "--force", f"--student={entry.student}",
                "--OverwriteCells.add_missing_cells=True"]  # a deleted test cell is put back and run
        if cell_timeout is not None:
            args.append(f"--Execute.timeout={int(cell_timeout)}")
        box = Box.open(root, sandbox)
        try:
            run = run_nbgrader("autograde", *args, *box.args, root=root, check=False,
                               env={**(env or {}), **box.env(course_dir(root, "autograded") / entry.student /
                                                             entry.assignment)},
                               timeout=max(1.0, timeout - (time.monotonic() - start)))
        finally:
            result.notes += box.close()
        result.tag = run.tag
        (root / "nbgrader.log").write_text(run.log)
        if run.returncode is None:
            result.status = TIMED_OUT
            result.notes.append(f"grading stopped after {timeout:g} s (the limit for a whole submission): "
                                "some cell never finished, so no cell could be scored")
            return result
        result.tampered += reported_by_nbgrader(run.log)
        if run.returncode != 0 and "CellTimeoutError" in run.log:  # nbclient gives up when a cell ignores SIGINT
            result.status = TIMED_OUT
            limit = cell_timeout or float(nbgrader_config().Execute.timeout)
            result.notes.append(f"a cell ran past the limit of {limit:g} s for one cell and did not stop when "
                                "interrupted, so grading stopped there: no cell could be scored")
            return result
        if run.returncode != 0:
            result.notes.append(f"nbgrader failed (exit {run.returncode}); see its log")
            return result
        if any(untrusted.values()):
            _zero_untrusted(root, entry, untrusted, result)
        result.score, result.max_score = read_score(root, entry.student, entry.assignment)
        result.status = GRADED
        result.notes += failed_tests(course_dir(root, "autograded") / entry.student / entry.assignment)
        return result
    except Exception as exc:  # one broken submission must not stop the class
        result.notes.append(f"the grader failed on this submission: {type(exc).__name__}: {exc}")
        return result
    finally:
        result.seconds = time.monotonic() - start


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


def cell_errors(cell: dict) -> list[str]:
    """What nbgrader scores as a failure in an executed cell: each error, then each stderr output."""
    outputs = cell.get("outputs", [])
    errors = [f"{o['ename']}: {o.get('evalue', '')}".strip() for o in outputs if o["output_type"] == "error"]
    return errors + ["wrote to stderr: " + "".join(o["text"]).strip() for o in outputs
                     if o["output_type"] == "stream" and o["name"] == "stderr"]


def failed_tests(folder: Path) -> list[str]:
    """One line per test cell of the autograded notebooks in `folder` that failed: name, points, the error."""
    lines = []
    for path in sorted(folder.glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            info = meta(cell)
            if info.get("grade") and cell["cell_type"] == "code" and (errors := cell_errors(cell)):
                text = "\n".join(errors[0].splitlines()[:8])
                lines.append(f"{info['grade_id']} ({info.get('points', 0):g} points) failed: {text}")
    return lines


def _max_score(template: Path, assignment: str) -> float:
    total = 0.0
    for nb in (template / "release" / assignment).glob("*.ipynb"):
        total += sum(float(meta(c).get("points", 0)) for c in json.loads(nb.read_text())["cells"]
                     if meta(c).get("grade"))
    return total


# ---- the whole class ------------------------------------------------------------------------------------------


def default_workers() -> int:
    """One worker per core: the labs measure time, and an oversubscribed machine slows every measurement."""
    return os.cpu_count() or 1


def parse_shard(text: str) -> tuple[int, int]:
    """"2/3" -> (2, 3): the second of three shards (1 <= i <= n, as Slurm's --array=1-n numbers its tasks)."""
    match = re.fullmatch(r"(\d+)/(\d+)", text.strip())
    if not match or not 1 <= int(match[1]) <= int(match[2]):
        raise PipelineError(f"--shard {text!r}: expected i/n with 1 <= i <= n, e.g. 2/3")
    return int(match[1]), int(match[2])


def shard_of(student: str, count: int) -> int:
    """The shard (1..count) of a student: from a hash of the id, so every machine splits a class the same way."""
    return int(hashlib.sha256(student.encode()).hexdigest(), 16) % count + 1


def fingerprint(entry: Entry) -> str:
    """A hash of a submission's files: a resumed run keeps a result only if the submission is unchanged."""
    digest = hashlib.sha256()
    for name, path in sorted({**entry.notebooks, **entry.extras}.items()):
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def grade_class(submissions: Path, out: Path, *, workers: int | None = None, timeout: float = 600.0,
                cell_timeout: float | None = None, env: Mapping[str, str] | None = None,
                root: Path = REPO_ROOT, progress: Callable[[str], None] = print,
                shard: tuple[int, int] | None = None, fresh: bool = False,
                sandbox: Limits | None = DEFAULT_LIMITS) -> list[Result]:
    """Grade every submission; write out/gradebook.db, grades.csv, lms-grades.csv, autograded/ and feedback/.

    `workers` submissions are graded at once (default: one per core), each within `timeout` seconds;
    `cell_timeout` overrides nbgrader's per-cell limit; `env` reaches the grading kernels (e.g.
    {"COURSE_FAST": "1"}); `progress` gets one line per finished submission. `shard` (i, n) grades only the
    students of shard i of n (shard_of); `python -m autograder merge` joins the shards' out folders. Every
    kernel runs sandboxed within the limits `sandbox` (PipelineError if no sandbox can be made here); None grades
    unconfined, and every result then says "not sandboxed".

    A run resumes: what `out` holds from an earlier run of the same submissions is kept, and only the rest is
    graded (a submission whose files changed is graded again); `fresh` grades everything anew. The CSVs are
    rewritten after every submission, so Ctrl-C (KeyboardInterrupt) keeps everything graded so far: every running
    submission is stopped with all its processes, and the KeyboardInterrupt goes on to the caller.
    """
    workers = workers or default_workers()
    if sandbox is not None:
        require()
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="grade-class-"))
    try:
        entries = collect(Path(submissions), work, root)
        if shard is not None:
            entries = [e for e in entries if shard_of(e.student, shard[1]) == shard[0]]
        prints = {(e.assignment, e.student): fingerprint(e) for e in entries}
        results = {} if fresh else _kept_results(out, prints)
        _forget_all_but(out, set(results))
        todo = [e for e in entries if (e.assignment, e.student) not in results]
        where = f"shard {shard[0]}/{shard[1]}: " if shard else ""
        progress(f"{where}grading {len(todo)} submissions ({len(results)} kept from an earlier run) with "
                 f"{workers} workers, at most {timeout:g} s each, {describe(sandbox)}")
        if todo:
            template = prepare_template(sorted({e.assignment for e in todo}), work, root)
            # The class gradebook starts from the template, or gains the template's new assignments.
            gradebook.add_gradebook(out / "gradebook.db", template / "gradebook.db", "this run")
            _grade_all(todo, prints, template, work, out, results, workers=workers, timeout=timeout,
                       cell_timeout=cell_timeout, env=env, progress=progress, sandbox=sandbox)
        ordered = sorted(results.values(), key=lambda r: (r.assignment, r.student))
        write_feedback(ordered, out)
        _copy_exchange_files(entries, out)
        gradebook.write_rows(map(row_of, ordered), out)
        return ordered
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _grade_all(todo: list[Entry], prints: dict[tuple[str, str], str], template: Path, work: Path, out: Path,
               results: dict[tuple[str, str], Result], *, workers: int, timeout: float, cell_timeout: float | None,
               env: Mapping[str, str] | None, progress: Callable[[str], None], sandbox: Limits | None) -> None:
    """Grade `todo` on `workers` threads into out, adding to `results`; on Ctrl-C stop everything, then re-raise.

    Every process of the run carries the run's tag (autograder.processes), so that an interrupt finds and stops
    the nbgrader, the kernel and the ranks of every submission being graded, wherever they are.
    """
    tag = new_tag(RUN_VARIABLE)
    stop = threading.Event()
    start = time.monotonic()

    def one(entry: Entry) -> Result | None:
        if stop.is_set():  # interrupted before this one started
            return None
        return grade_one(entry, template, work, timeout=timeout, cell_timeout=cell_timeout, env={**(env or {}), **tag},
                         sandbox=sandbox)

    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(one, e) for e in todo]
        try:
            for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
                r = future.result()
                r.fingerprint = prints[(r.assignment, r.student)]
                _absorb(r, out)
                results[(r.assignment, r.student)] = r
                gradebook.write_rows(map(row_of, results.values()), out)
                flag = "  TAMPERED" if r.tampered else ""
                progress(f"[{done}/{len(todo)}] {r.student}/{r.assignment}: {r.status}, {r.score:g}/{r.max_score:g} "
                         f"in {r.seconds:.0f} s{flag}  ({time.monotonic() - start:.0f} s)")
        except KeyboardInterrupt:
            stop.set()
            for future in futures:
                future.cancel()
            while not all(f.done() for f in futures):  # a worker may start nbgrader just after a kill: again
                kill_tagged(tag[RUN_VARIABLE], variable=RUN_VARIABLE, wait=1.0)
                time.sleep(0.1)
            raise


def _kept_results(out: Path, prints: dict[tuple[str, str], str]) -> dict[tuple[str, str], Result]:
    """The results of an earlier run in `out` whose submission is still there, unchanged."""
    if not (out / "gradebook.db").is_file():
        return {}
    kept = {}
    for row in gradebook.read_rows(out / gradebook.CSV_NAME):
        key = (row["assignment"], row["student"])
        if prints.get(key) and prints[key] == row.get("fingerprint"):
            kept[key] = result_of(row)
    return kept


def _forget_all_but(out: Path, keep: set[tuple[str, str]]) -> None:
    """Remove from `out` every submission's gradebook rows, autograded and feedback folders, except `keep`'s."""
    if not keep:  # nothing to keep: start from an empty folder
        for stale in ("gradebook.db", gradebook.CSV_NAME, gradebook.LMS_NAME, "autograded", "feedback", LOGS):
            path = out / stale
            shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
    else:
        from nbgrader.api import Gradebook  # slow to import: only when needed

        with Gradebook(gradebook_url(out), nbgrader_config().CourseDirectory.course_id) as gb:
            for sub in [s for a in gb.assignments for s in a.submissions]:
                if (sub.assignment.name, sub.student.id) not in keep:
                    gb.remove_submission(sub.assignment.name, sub.student.id)
        for step in ("autograded", "feedback"):
            for folder in course_dir(out, step).glob("*/*"):
                if folder.is_dir() and (folder.name, folder.parent.name) not in keep:
                    shutil.rmtree(folder)
    (out / LOGS).mkdir(exist_ok=True)


def _absorb(r: Result, out: Path) -> None:
    """Move one worker's results into the class folder (called by the parent only, one at a time)."""
    if r.root is None:
        return
    log = r.root / "nbgrader.log"
    if log.is_file():
        shutil.copy(log, out / LOGS / f"{r.student}-{r.assignment}.log")
    if r.status == GRADED:
        gradebook.merge_gradebook(out / "gradebook.db", r.root / "gradebook.db")
        shutil.copytree(course_dir(r.root, "autograded") / r.student / r.assignment,
                        course_dir(out, "autograded") / r.student / r.assignment)
    shutil.rmtree(r.root, ignore_errors=True)


def _copy_exchange_files(entries: list[Entry], out: Path) -> None:
    """Put EXCHANGE_FILES beside every submission's feedback: nbgrader's release_feedback needs them for every page,
    also the report of a submission that nbgrader never graded (its autograded/ folder would have brought them)."""
    for entry in entries:
        folder = course_dir(out, "feedback") / entry.student / entry.assignment
        for name, path in entry.extras.items():
            if folder.is_dir() and not (folder / name).exists():
                shutil.copy(path, folder / name)


def write_feedback(results: list[Result], out: Path) -> None:
    """nbgrader's HTML feedback for the graded ones, and a short report page for every submission."""
    if any(r.status == GRADED for r in results):
        run_nbgrader("generate_feedback", "*", "--force", f"--CourseDirectory.source_directory={work_source(out)}",
                     root=out)
    for r in results:
        folder = course_dir(out, "feedback") / r.student / r.assignment
        folder.mkdir(parents=True, exist_ok=True)
        items = [*r.notes, *(f"tampering: {t}" for t in r.tampered)]
        body = "".join(f"<li><pre>{html.escape(i)}</pre></li>" for i in items) or "<li>nothing to report</li>"
        (folder / "grading_report.html").write_text(
            f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{html.escape(r.assignment)}</title></head>"
            f"<body><h1>{html.escape(r.assignment)}: {r.score:g} / {r.max_score:g} ({r.status})</h1>"
            f"<ul>{body}</ul></body></html>\n")


def work_source(out: Path) -> str:
    """generate_feedback wants a source folder to exist: the course root's own, or an empty one in a class folder."""
    source = course_dir(out, "source")
    if not source.is_dir():
        source = out / ".source"
        source.mkdir(exist_ok=True)
    return str(source)


def row_of(r: Result) -> dict[str, str]:
    """A result as a row of grades.csv (gradebook.CSV_FIELDS); tampering and notes joined with "; "."""
    return {"student": r.student, "assignment": r.assignment, "status": r.status, "score": f"{r.score:g}",
            "max_score": f"{r.max_score:g}", "seconds": f"{r.seconds:.0f}", "tampered": "; ".join(r.tampered),
            "notes": "; ".join(r.notes), "fingerprint": r.fingerprint}


def result_of(row: dict[str, str]) -> Result:
    """A row of grades.csv as a result again (for a resumed run)."""
    split = lambda text: text.split("; ") if text else []  # noqa: E731
    return Result(row["student"], row["assignment"], row["status"], float(row["score"]), float(row["max_score"]),
                  float(row["seconds"]), tampered=split(row["tampered"]), notes=split(row["notes"]),
                  fingerprint=row.get("fingerprint", ""))


def format_table(results: list[Result]) -> str:
    """The score table: student, assignment, status, score, tampering."""
    rows = [("student", "assignment", "status", "score", "tampered")]
    rows += [(r.student, r.assignment, r.status, f"{r.score:g}/{r.max_score:g}", "yes" if r.tampered else "")
             for r in results]
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    return "\n".join("  ".join(f"{v:<{w}}" for v, w in zip(row, widths, strict=True)).rstrip() for row in rows)


def summary(results: list[Result]) -> str:
    """One line: how many were graded, failed, timed out, and which were tampered with."""
    count = {s: sum(r.status == s for r in results) for s in (GRADED, FAILED, TIMED_OUT)}
    tampered = [f"{r.student}/{r.assignment}" for r in results if r.tampered]
    line = f"{count[GRADED]} graded, {count[FAILED]} failed, {count[TIMED_OUT]} timed out"
    line += f"; tampering found in {len(tampered)}: {', '.join(tampered)}" if tampered else ""
    return line + (f"; {NOT_SANDBOXED}" if any(NOT_SANDBOXED in r.notes for r in results) else "")
