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
(nbplumbing/processes.py). One submission is graded by autograder/grade.py, and the reports are written by
autograder/reports.py.

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
import os
import re
import shutil
import tempfile
import threading
import time
import zipfile
import zlib
from collections.abc import Callable, Mapping
from pathlib import Path

from autograder import gradebook
from autograder.grade import (
    EXCHANGE_FILES,
    FAILED,
    GRADED,
    GRADER_ERROR,
    Entry,
    Key,
    Result,
    check_limits,
    grade_one,
    prepare_template,
)
from autograder.gradebook import LOGS, RECORDS
from autograder.reports import read_records, row_of, write_feedback, write_records
from autograder.sandbox import DEFAULT_LIMITS, Limits, describe, require
from nbplumbing.adapter import (
    REPO_ROOT,
    PipelineError,
    assignment_names,
    course_dir,
    gradebook_url,
    nbgrader_config,
    notebook_names,
)
from nbplumbing.processes import RUN_VARIABLE, kill_tagged, new_tag
from utils.timeouts import SUBMISSION_S

# nbgrader's documented example of FileNameCollectorPlugin.named_regexp (it has no default), matched
# against the file name; a .zip's name gives the student and the notebooks inside it are taken as they are.
LMS_PATTERN = r".*_(?P<student_id>\w+)_attempt_(?P<timestamp>[0-9\-]+)_(?P<file_id>\w+)"
ATTEMPT = "_attempt_"  # once in an LMS name: a student's own file name must not name another student's attempt
UPLOAD_BYTES = 64 << 20  # the most one notebook may hold, uploaded or in a zip (a lab's with its outputs: a few MB)
ZIP_NOTEBOOKS = 16  # the most notebooks one zip may hold (an assignment has one)
UNREADABLE = "upload unreadable"  # how a refused upload's row begins (its status is "failed")
UNKNOWN = "?"  # the assignment of a refused upload that does not say it


class Unreadable(ValueError):
    """An upload that cannot be graded (the message says why): its student's row fails, the others are graded."""


# ---- finding the submissions ---------------------------------------------------------------------------------


def collect(submissions: Path, work: Path, root: Path = REPO_ROOT,
            roster: frozenset[str] | None = None) -> list[Entry]:
    """Every submission in `submissions` (nbgrader layout or a flat LMS folder); zips are extracted into work.

    Only regular files are read (a link, in any layout, is refused), each of at most UPLOAD_BYTES. An upload that
    cannot be graded (a link, too big, a broken zip, a name that is not one LMS name, or whose student is not on
    `roster` when one is given) becomes an Entry with `refused` set: its row fails with the reason, and every other
    submission is graded.
    """
    submissions = Path(submissions)
    known = assignment_names(root)
    if not submissions.is_dir():
        raise PipelineError(f"{submissions} is not a folder of submissions")
    entries: dict[Key, Entry] = {}
    stamps: dict[Key, str] = {}
    for student_dir in sorted(p for p in submissions.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if student_dir.is_symlink():
            _refuse(entries, Key(_shown(student_dir.name), UNKNOWN), f"{student_dir.name} is a link, not a folder")
            continue
        if strays := sorted(p.name for p in student_dir.glob("*.ipynb")):
            raise PipelineError(f"{student_dir}: {', '.join(strays)} not in an assignment folder: expected "
                                f"{student_dir.name}/<assignment>/<notebook>.ipynb")
        for folder in sorted(p for p in student_dir.iterdir() if p.is_dir() and not p.name.startswith(".")):
            if folder.name not in known:
                raise PipelineError(f"{folder}: no assignment '{folder.name}' (assignments: {', '.join(known)})")
            key = Key(_shown(student_dir.name), folder.name)
            try:
                _check_name(student_dir.name, roster)
                if folder.is_symlink():
                    raise Unreadable(f"{folder.name} is a link, not a folder")
                nbs = {p.name: _regular(p) for p in sorted(folder.glob("*.ipynb"))}
                extras = {name: _regular(folder / name) for name in EXCHANGE_FILES
                          if (folder / name).is_file() or (folder / name).is_symlink()}
            except Unreadable as why:
                _refuse(entries, key, str(why))
                continue
            entries[key] = Entry(key.student, key.assignment, nbs, extras=extras)
    unread: dict[str, list[str]] = {}  # student (or the file's name) -> why each of their uploads was refused
    for path in sorted(p for p in submissions.iterdir()
                       if p.suffix in (".ipynb", ".zip") and (p.is_file() or p.is_symlink())):
        student = _shown(path.name)  # until its name says whose it is
        try:
            student, stamp, file_id = _lms_name(path)
            _check_name(student, roster)
            files = _lms_files(path, work / "extracted" / path.stem)
            names = [Path(file_id).stem] if path.suffix == ".ipynb" else [f.stem for f in files]
            assignment = _assignment_of(names, known, root) or (known[0] if len(known) == 1 else None)
            if assignment is None:
                raise Unreadable(f"no assignment has a notebook named {', '.join(names)}")
        except Unreadable as why:
            unread.setdefault(student, []).append(f"{path.name}: {why}")
            continue
        key = Key(student, assignment)
        if key in stamps and stamps[key] > stamp:
            continue  # an older attempt: the newest one counts (zip_collect keeps the newest too)
        stamps[key] = stamp
        entry = entries.setdefault(key, Entry(student, assignment, {}))
        if path.suffix == ".ipynb":
            entry.notebooks[f"{names[0]}.ipynb"] = path
        else:
            entry.notebooks.update({f.name: f for f in files})
    for student, whys in unread.items():  # said beside a student's graded upload, or as their row
        if graded := [e for e in entries.values() if e.student == student]:
            graded[0].notes += [f"{UNREADABLE}: {why}" for why in whys]
        else:
            _refuse(entries, Key(student, UNKNOWN), "; ".join(whys))
    if not entries:
        raise PipelineError(f"no submissions in {submissions}: expected <student>/<assignment>/<notebook>.ipynb "
                            "or <anything>_<student>_attempt_<timestamp>_<notebook>.ipynb|.zip")
    return sorted(entries.values(), key=lambda e: (e.assignment, e.student))


def _refuse(entries: dict[Key, Entry], key: Key, why: str) -> None:
    entries[key] = Entry(key.student, key.assignment, {}, refused=why)


def _shown(name: str) -> str:
    """A file name as the CSV and the reports can write it: undecodable bytes (surrogates) escaped."""
    return name.encode("utf-8", "backslashreplace").decode("utf-8")


def _check_name(student: str, roster: frozenset[str] | None) -> None:
    """Unreadable unless `student` is a UTF-8 name, and on `roster` when one is given."""
    if _shown(student) != student:
        raise Unreadable("its name is not UTF-8 text")
    if roster is not None and student not in roster:
        raise Unreadable(f"{student} is not on the roster")


def _regular(path: Path) -> Path:
    """`path`, if it is a regular file (not a link) of at most UPLOAD_BYTES; Unreadable otherwise."""
    if path.is_symlink() or not path.is_file():
        raise Unreadable(f"{path.name} is a link or a special file, not a regular file")
    if (size := path.stat().st_size) > UPLOAD_BYTES:
        raise Unreadable(f"{path.name} holds {size} bytes, more than {UPLOAD_BYTES} (the bound of one notebook)")
    return path


def _lms_name(path: Path) -> tuple[str, str, str]:
    """(student, timestamp, file id) of an LMS upload's name; Unreadable unless it holds ATTEMPT exactly once."""
    _check_name(path.name, None)
    if (count := path.stem.count(ATTEMPT)) != 1:
        raise Unreadable(f"its name holds {ATTEMPT!r} {count} times, an LMS name once: "
                         f"<anything>_<student>{ATTEMPT}<timestamp>_<notebook>{path.suffix}")
    if not (match := re.fullmatch(LMS_PATTERN, path.stem)):
        raise Unreadable(f"not named like <anything>_<student>{ATTEMPT}<timestamp>_<notebook>{path.suffix} "
                         "(nbgrader zip_collect's documented pattern)")
    return match["student_id"], match["timestamp"], match["file_id"]


def _lms_files(path: Path, dest: Path) -> list[Path]:
    """The notebooks of an LMS upload: itself, or a zip's .ipynb members (and nothing else of it) extracted flat
    into `dest`, each within UPLOAD_BYTES as declared and as read; Unreadable when there is none or it is bad."""
    _regular(path)
    if path.suffix == ".ipynb":
        return [path]
    try:
        with zipfile.ZipFile(path) as zf:
            members = [m for m in zf.infolist() if not m.is_dir() and m.filename.endswith(".ipynb")
                       and "__MACOSX" not in m.filename.split("/")]
            if not members:
                raise Unreadable("the zip holds no .ipynb file")
            if len(members) > ZIP_NOTEBOOKS or len({Path(m.filename).name for m in members}) < len(members):
                raise Unreadable(f"the zip holds {len(members)} notebooks, more than {ZIP_NOTEBOOKS} or two of "
                                 "one name")
            dest.mkdir(parents=True)
            for member in members:
                if member.file_size > UPLOAD_BYTES:
                    raise Unreadable(f"{member.filename} in the zip declares {member.file_size} bytes, more than "
                                     f"{UPLOAD_BYTES}")
                with zf.open(member) as source:
                    data = source.read(UPLOAD_BYTES + 1)  # what it holds, whatever it declares
                if len(data) > UPLOAD_BYTES:
                    raise Unreadable(f"{member.filename} in the zip holds more than {UPLOAD_BYTES} bytes")
                (dest / Path(member.filename).name).write_bytes(data)
    except Unreadable:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, RuntimeError, NotImplementedError, OSError, EOFError,
            ValueError, zlib.error) as exc:  # broken, encrypted, an unknown compression, a bad CRC
        raise Unreadable(f"the zip cannot be read: {type(exc).__name__}: {exc}") from None
    return sorted(dest.iterdir())


def _assignment_of(names: list[str], known: list[str], root: Path) -> str | None:
    for assignment in known:
        if set(names) & set(notebook_names(root, assignment)):
            return assignment
    return None


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


def grade_class(submissions: Path, out: Path, *, workers: int | None = None, timeout: float = SUBMISSION_S,
                cell_timeout: float | None = None, env: Mapping[str, str] | None = None,
                root: Path = REPO_ROOT, progress: Callable[[str], None] = print,
                shard: tuple[int, int] | None = None, fresh: bool = False,
                sandbox: Limits | None = DEFAULT_LIMITS, roster: frozenset[str] | None = None) -> list[Result]:
    """Grade every submission; write out/gradebook.db, grades.csv, lms-grades.csv, autograded/ and feedback/.

    `workers` submissions are graded at once (default: one per core), each within `timeout` seconds;
    `cell_timeout` overrides nbgrader's per-cell limit; `env` reaches the grading kernels (e.g.
    {"COURSE_FAST": "1"}); `progress` gets one line per finished submission. `shard` (i, n) grades only the
    students of shard i of n (shard_of); `python -m autograder merge` joins the shards' out folders. Every
    kernel runs sandboxed within the limits `sandbox` (PipelineError if no sandbox can be made here); None grades
    unconfined, and every result then says "not sandboxed". An upload that cannot be graded (collect; a student not
    on `roster`, when given) is a failed row that says why ("upload unreadable: ..."); the others are graded.

    A run resumes: what `out` holds from an earlier run of the same submissions is kept, and only the rest is
    graded (a submission whose files changed is graded again); `fresh` grades everything anew. The CSVs are
    rewritten after every submission, so Ctrl-C (KeyboardInterrupt) keeps everything graded so far: every running
    submission is stopped with all its processes, and the KeyboardInterrupt goes on to the caller.

    Raises PipelineError, before anything is graded, when the cell limit (`cell_timeout`, or the config's) is not
    below `timeout` (utils.timeouts.check_grading_limits).
    """
    check_limits(cell_timeout, timeout)
    workers = workers or default_workers()
    if sandbox is not None:
        require()
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="grade-class-"))
    try:
        entries = collect(Path(submissions), work, root, roster)
        if shard is not None:
            entries = [e for e in entries if shard_of(e.student, shard[1]) == shard[0]]
        fingerprints = {e.key: fingerprint(e) for e in entries if not e.refused}
        results = {} if fresh else _kept_results(out, fingerprints)
        _forget_all_but(out, set(results))
        results |= {e.key: refused(e) for e in entries if e.refused}
        todo = [e for e in entries if e.key not in results]
        where = f"shard {shard[0]}/{shard[1]}: " if shard else ""
        progress(f"{where}grading {len(todo)} submissions ({len(results)} kept from an earlier run) with "
                 f"{workers} workers, at most {timeout:g} s each, {describe(sandbox)}")
        if todo:
            template = prepare_template(sorted({e.assignment for e in todo}), work, root)
            # The class gradebook starts from the template, or gains the template's new assignments.
            gradebook.add_gradebook(out / "gradebook.db", template / "gradebook.db", "this run")
            _grade_all(todo, fingerprints, template, work, out, results, workers=workers, timeout=timeout,
                       cell_timeout=cell_timeout, env=env, progress=progress, sandbox=sandbox)
        ordered = sorted(results.values(), key=lambda r: (r.assignment, r.student))
        write_feedback(ordered, out)
        _copy_exchange_files(entries, out)
        gradebook.write_rows(map(row_of, ordered), out)
        write_records(ordered, out)  # with what the feedback added to the notes
        return ordered
    finally:
        shutil.rmtree(work, ignore_errors=True)


def refused(entry: Entry) -> Result:
    """The row of an upload that cannot be graded: failed, with why (UNREADABLE)."""
    return Result(student=entry.student, assignment=entry.assignment, status=FAILED,
                  notes=[f"{UNREADABLE}: {entry.refused}"])


def _grade_all(todo: list[Entry], fingerprints: dict[Key, str], template: Path, work: Path, out: Path,
               results: dict[Key, Result], *, workers: int, timeout: float, cell_timeout: float | None,
               env: Mapping[str, str] | None, progress: Callable[[str], None], sandbox: Limits | None) -> None:
    """Grade `todo` on `workers` threads into out, adding to `results`; on Ctrl-C stop everything, then re-raise.

    Every process of the run carries the run's tag (nbplumbing.processes), so that an interrupt finds and stops
    the nbgrader, the kernel and the ranks of every submission being graded, wherever they are.
    """
    tag_env = new_tag(RUN_VARIABLE)  # {RUN_VARIABLE: this run's tag}: every process of every submission inherits it
    stop = threading.Event()
    start = time.monotonic()

    def one(entry: Entry) -> Result | None:
        if stop.is_set():  # interrupted before this one started
            return None
        return grade_one(entry, template, work, timeout=timeout, cell_timeout=cell_timeout,
                         env={**(env or {}), **tag_env}, sandbox=sandbox)

    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(one, e) for e in todo]
        try:
            for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
                r = future.result()
                r.fingerprint = fingerprints[r.key]
                _absorb(r, out)
                results[r.key] = r
                gradebook.write_rows(map(row_of, results.values()), out)
                write_records([r], out)
                flag = ("  TAMPERED" if r.tampered else "") + (f"  FLAGGED ({len(r.flagged)})" if r.flagged else "")
                progress(f"[{done}/{len(todo)}] {r.student}/{r.assignment}: {r.status}, {r.score:g}/{r.max_score:g} "
                         f"in {r.seconds:.0f} s{flag}  ({time.monotonic() - start:.0f} s)")
        except KeyboardInterrupt:
            stop.set()
            for future in futures:
                future.cancel()
            while not all(f.done() for f in futures):  # a worker may start nbgrader just after a kill: again
                kill_tagged(tag_env[RUN_VARIABLE], variable=RUN_VARIABLE, wait=1.0)
                time.sleep(0.1)
            raise


def _kept_results(out: Path, fingerprints: dict[Key, str]) -> dict[Key, Result]:
    """The results of an earlier run in `out` (its records) whose submission is still there, unchanged (not a grader
    error: that one is graded again)."""
    if not (out / "gradebook.db").is_file():
        return {}
    return {r.key: r for r in read_records(out)
            if fingerprints.get(r.key) and fingerprints[r.key] == r.fingerprint and r.status != GRADER_ERROR}


def _forget_all_but(out: Path, keep: set[Key]) -> None:
    """Remove from `out` every submission's gradebook rows, autograded and feedback folders and records, except
    `keep`'s."""
    if not keep:  # nothing to keep: start from an empty folder
        for stale in ("gradebook.db", gradebook.CSV_NAME, gradebook.LMS_NAME, "autograded", "feedback", LOGS,
                      RECORDS):
            path = out / stale
            shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
    else:
        from nbgrader.api import Gradebook  # slow to import: only when needed

        with Gradebook(gradebook_url(out), nbgrader_config().CourseDirectory.course_id) as gb:
            for sub in [s for a in gb.assignments for s in a.submissions]:
                if Key(sub.student.id, sub.assignment.name) not in keep:
                    gb.remove_submission(sub.assignment.name, sub.student.id)
        for step in ("autograded", "feedback"):
            for folder in course_dir(out, step).glob("*/*"):
                if folder.is_dir() and Key(folder.parent.name, folder.name) not in keep:
                    shutil.rmtree(folder)
        for record in (out / RECORDS).glob("*/*.json"):
            if Key(record.parent.name, record.stem) not in keep:
                record.unlink()
    (out / LOGS).mkdir(exist_ok=True)


def _absorb(r: Result, out: Path) -> None:
    """Move one worker's results into the class folder (called by the parent only, one at a time)."""
    if r.root is None:
        return
    if _within(log := r.root / "nbgrader.log", r.root) and log.is_file():
        shutil.copy(log, out / LOGS / f"{r.student}-{r.assignment}.log")
    if r.status == GRADED:
        gradebook.merge_submission(out / "gradebook.db", r.root / "gradebook.db", r.student, r.assignment)
        for step in ("autograded", "feedback"):  # feedback/: its page(s), if nbgrader could make them
            made = course_dir(r.root, step) / r.student / r.assignment
            if _within(made, r.root) and made.is_dir():
                shutil.copytree(made, course_dir(out, step) / r.student / r.assignment, dirs_exist_ok=True,
                                ignore=_links)
    shutil.rmtree(r.root, ignore_errors=True)


def _within(path: Path, root: Path) -> bool:
    """Whether `path` is no link and lies in `root` once every link on the way is followed: what a worker's nbgrader
    wrote (it read the submission) is copied only from its own course root, never through a link it made."""
    return not path.is_symlink() and path.resolve().is_relative_to(root.resolve())


def _links(folder: str, names: list[str]) -> list[str]:
    """copytree's `ignore`: the names in `folder` that are links (or neither file nor folder), copied never."""
    paths = {name: Path(folder) / name for name in names}
    return [name for name, path in paths.items() if path.is_symlink() or not (path.is_file() or path.is_dir())]


def _copy_exchange_files(entries: list[Entry], out: Path) -> None:
    """Put EXCHANGE_FILES beside every submission's feedback: nbgrader's release_feedback needs them for every page,
    also the report of a submission that nbgrader never graded (its autograded/ folder would have brought them)."""
    for entry in entries:
        folder = course_dir(out, "feedback") / entry.student / entry.assignment
        for name, path in entry.extras.items():
            if folder.is_dir() and not (folder / name).exists():
                shutil.copy(path, folder / name)
