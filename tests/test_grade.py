"""The class grader's own behaviour, beyond the session's grading run (tests/test_grading.py reads that one).

- past its wall-clock limit a submission is stopped with its whole process tree (slow: about 35 s);
- a flat LMS folder through the command line, and `autograde` of a course root's submitted/ folder, both on an
  empty notebook, which fails without running nbgrader's autograde;
- a notebook outside an assignment folder is refused with a message that says where it belongs;
- the process helpers find and stop a tagged process and its children (on any system psutil supports);
- what a submission's code can reach: the constructs flagged for review (none in a solution or a release), the
  answers scrubbed from any text, a failing setup cell as a grader error.
"""

from __future__ import annotations

import csv
import functools
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import pytest
from sqlalchemy.exc import SAWarning

from autograder import class_run, flags, grade, gradebook, reports, scrub
from autograder.__main__ import main
from nbplumbing import adapter
from nbplumbing.adapter import PipelineError
from nbplumbing.cells import source
from nbplumbing.processes import RUN_VARIABLE, TAG_VARIABLE, kill_tagged, new_tag, tagged_processes
from tests import corpus
from tests.common import (
    ASSIGNMENTS,
    KILL_SLACK,
    ROOT,
    GradingRun,
    lab_params,
    meta,
    notebook,
    own_lines,
    page_text,
    secret_lines,
    text_lines,
)
from tests.corpus.common import HIDDEN, SOLUTION, write_case


@pytest.mark.slow
@pytest.mark.lab00
def test_submission_limit_kills_the_whole_tree(tmp_path: Path) -> None:
    """Past its wall-clock limit a submission is stopped: nbgrader, its kernel and the ranks the kernel forked."""
    [hang] = [c for c in corpus.cases("00_ranks_and_alpha_beta") if c.name == "hang_no_interrupt"]
    write_case(tmp_path / "submissions", "00_ranks_and_alpha_beta", hang)
    [entry] = class_run.collect(tmp_path / "submissions", tmp_path)
    template = grade.prepare_template([entry.assignment], tmp_path)
    limit = 30.0  # the course's cell limit (120 s) is longer: only the submission limit can stop it
    r = grade.grade_one(entry, template, tmp_path, timeout=limit, env={"COURSE_FAST": "1"})
    assert r.status == grade.TIMED_OUT and r.score == 0, (r.status, r.notes)
    assert any("grading stopped after 30 s" in n for n in r.notes), r.notes
    assert r.seconds < limit + KILL_SLACK, r.seconds
    assert not tagged_processes(r.tag), "processes of the stopped submission are still running"


def test_new_gradebooks_get_nbgraders_own_schema_revision(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """run_nbgrader stamps a gradebook it creates with adapter.ALEMBIC_HEAD rather than asking a new `alembic`
    process: that must be what alembic says for the installed nbgrader, and what a new gradebook then holds. (After
    an upgrade of nbgrader, set ALEMBIC_HEAD to the revision this test prints.)"""
    from nbgrader.api import get_alembic_version  # nbgrader's own, unchanged in this process

    monkeypatch.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
    assert get_alembic_version() == adapter.ALEMBIC_HEAD, get_alembic_version()
    adapter.run_nbgrader("db", "student", "add", "alyssa", root=tmp_path)
    with sqlite3.connect(tmp_path / "gradebook.db") as db:
        assert db.execute("SELECT version_num FROM alembic_version").fetchall() == [(adapter.ALEMBIC_HEAD,)]


def test_lms_folder_through_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A flat LMS folder (zip_collect's documented naming); an empty file fails fast, and says so."""
    folder = tmp_path / "download"
    folder.mkdir()
    (folder / "lab00_bitdiddle_attempt_2026-11-29-10-00-00_ranks_and_alpha_beta.ipynb").write_bytes(b"")
    assert main(["grade", str(folder), "--out", str(tmp_path / "out"), "--workers", "1"]) == 0
    printed = capsys.readouterr().out
    assert "bitdiddle" in printed and "0 graded, 1 failed, 0 timed out" in printed, printed


def test_autograde_grades_the_course_roots_submissions_into_it(tmp_path: Path) -> None:
    """`make autograde` is the class grader run on <root>/submitted, writing into <root>."""
    root = tmp_path / "course"
    root.mkdir()
    (root / "solutions").symlink_to(corpus.ROOT / "solutions")
    target = root / "submitted" / "alyssa" / "00_ranks_and_alpha_beta"
    target.mkdir(parents=True)
    (target / "ranks_and_alpha_beta.ipynb").write_text("")
    assert main(["autograde", "--root", str(root), "--workers", "1"]) == 0
    with (root / "grades.csv").open() as fh:
        [row] = list(csv.DictReader(fh))
    assert (row["student"], row["status"], row["score"]) == ("alyssa", grade.FAILED, "0")
    assert (root / "feedback" / "alyssa" / "00_ranks_and_alpha_beta" / "grading_report.html").is_file()


def test_a_notebook_outside_an_assignment_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "ben").mkdir()
    (tmp_path / "ben" / "ranks_and_alpha_beta.ipynb").write_text("{}")
    with pytest.raises(PipelineError, match=r"ben/<assignment>/<notebook>.ipynb"):
        class_run.collect(tmp_path, tmp_path)


def test_a_tagged_process_and_its_children_are_found_and_stopped() -> None:
    tag = new_tag()
    # A shell that starts a child and waits: the child inherits the tag through the environment.
    proc = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                             "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
                             "print('started', flush=True); time.sleep(60)"],
                            env={**os.environ, **tag}, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "started"
        found = tagged_processes(tag[TAG_VARIABLE])
        assert proc.pid in found and len(found) == 2, found
        assert sorted(kill_tagged(tag[TAG_VARIABLE])) == sorted(found)
        assert proc.wait(timeout=10) != 0
        assert not tagged_processes(tag[TAG_VARIABLE])
    finally:
        proc.kill()


# ---- feedback keeps the hidden tests hidden (reads the session's grading run) ------------------------------------


@pytest.mark.parametrize("assignment", lab_params(ASSIGNMENTS))
def test_feedback_shows_failures_but_no_hidden_test(grading: GradingRun, assignment: str) -> None:
    """Every submission's nbgrader feedback: no line of a hidden test, in the source or in a traceback; each
    failing test cell's error message (a hidden check's: "a hidden check of exercise N.k failed", autograder/scrub.py)
    and its score are there; the solution's pages show no error at all
    (lab 00's deliberate deadlock is caught and printed, not raised)."""
    hidden = secret_lines(assignment, HIDDEN)
    assert hidden, f"{assignment} has no hidden test lines to look for"
    # A solution line quoted in an error (a hang report's "blocked in ..., at <line>") is scrubbed on purpose.
    solution = secret_lines(assignment, SOLUTION)
    for (a, student), r in grading.results.items():
        if a != assignment or r.status != grade.GRADED:
            continue
        feedback = adapter.course_dir(grading.out, "feedback") / student / assignment
        for path in sorted((adapter.course_dir(grading.out, "autograded") / student / assignment).glob("*.ipynb")):
            nb, page = notebook(path), feedback / f"{path.stem}.html"
            raw, text = page.read_text(), page_text(page)
            lines = text_lines(text)
            leaked = sorted((hidden - own_lines(nb)) & lines)
            assert not leaked, f"{student}/{assignment}: the feedback shows hidden test lines: {leaked[:5]}"
            for cell in nb["cells"]:
                info = meta(cell)
                if info.get("grade") and not info.get("solution") and (errors := grade.cell_errors(cell)):
                    error = next((o for o in cell["outputs"] if o["output_type"] == "error"), None)
                    told = scrub.as_told(error, source(cell), info["grade_id"]) if error else None
                    if told and told != (error["ename"], error["evalue"]):  # a hidden check's, or the grader's
                        assert f"{told[0]}: {told[1]}" in lines, f"{student}/{assignment}: {info['grade_id']}"
                        continue
                    # the whole message: for a deadlock, every rank's "blocked in ..., at <line>" too
                    missing = sorted(line for line in text_lines(errors[0].removeprefix("wrote to stderr: ")) - lines
                                     if not any(secret in line for secret in solution))
                    assert not missing, f"{student}/{assignment}: {info['grade_id']}'s error is not shown: {missing}"
            assert re.search(r"Score: [\d.]+ / [\d.]+", text), f"{student}/{assignment}: no score in {page.name}"
            if student == "solution":
                assert "output_error" not in raw and "output_stderr" not in raw, \
                    f"the solution's feedback of {assignment} shows an error or stderr output"


# ---- shards, merging, resuming: the class machinery, with a stand-in for nbgrader ----------------------------------
# Grading itself is what the session's grading run checks. Here nbgrader's two commands are stood in for by the same
# gradebook writes through nbgrader's own API, so that three shards, a whole run and a resumed one cost no kernel:
# generate_assignment registers an assignment of two test cells (with its own random ids, as nbgrader would), and
# autograde scores a student's cells from the student's name. Everything else is the real grade_class and merge.

TINY, CELLS = "tiny", {"q1": 2.0, "q2": 3.0}


@functools.cache
def empty_gradebook() -> bytes:
    """An nbgrader gradebook with its tables and nothing else (nbgrader makes one in 3-8 s: it runs alembic)."""
    import sysconfig

    from nbgrader.api import Gradebook

    with tempfile.TemporaryDirectory() as tmp:
        path = os.environ["PATH"]
        os.environ["PATH"] = os.pathsep.join([sysconfig.get_path("scripts"), path])  # nbgrader runs `alembic`
        try:
            with Gradebook(f"sqlite:///{tmp}/gradebook.db", "course"):
                pass
        finally:
            os.environ["PATH"] = path
        return Path(tmp, "gradebook.db").read_bytes()


def fake_nbgrader(command: str, *args: str, root: Path, **kwargs) -> adapter.NbgraderRun:
    from nbgrader.api import Gradebook

    if command == "generate_assignment":
        (root / "gradebook.db").write_bytes(empty_gradebook())
    course_id = adapter.nbgrader_config().CourseDirectory.course_id
    with Gradebook(adapter.gradebook_url(root), course_id) as gb:
        if command == "generate_assignment":
            gb.add_assignment(TINY)
            gb.add_notebook(TINY, TINY)
            for cell, points in CELLS.items():
                gb.add_grade_cell(cell, TINY, TINY, max_score=points, cell_type="code")
        elif command == "autograde":
            student = next(a for a in args if a.startswith("--student=")).split("=", 1)[1]
            submitted = (root / "submitted" / student / TINY / f"{TINY}.ipynb").read_bytes()
            gb.add_student(student)
            gb.add_submission(TINY, student)
            for i, cell in enumerate(CELLS):  # a score that follows from the student and what was submitted
                grade_row = gb.find_grade(cell, TINY, TINY, student)
                grade_row.auto_score = CELLS[cell] * ((sum(map(ord, student)) + len(submitted) + i) % 2)
            gb.db.commit()
            shutil.copytree(root / "submitted" / student, root / "autograded" / student)
    return adapter.NbgraderRun(0, "", "")


@pytest.fixture
def tiny_class(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, list[str]]:
    """A course root with one tiny assignment and a class of nine students, nbgrader stood in for."""
    root, subs = tmp_path / "root", tmp_path / "submitted"
    nb = {"cells": [{"cell_type": "code", "source": "", "metadata": {}, "outputs": []}], "metadata": {},
          "nbformat": 4, "nbformat_minor": 5}
    (root / "solutions" / TINY).mkdir(parents=True)
    (root / "solutions" / TINY / f"{TINY}.ipynb").write_text(json.dumps(nb))
    students = [f"s{i:02d}" for i in range(9)]
    for student in students:
        (subs / student / TINY).mkdir(parents=True)
        (subs / student / TINY / f"{TINY}.ipynb").write_text(json.dumps(nb))
    monkeypatch.setattr(grade, "run_nbgrader", fake_nbgrader)
    # nbgrader's add_submission warns about its own session. Filtered here, for the whole test, and not inside
    # fake_nbgrader: the class runs it on worker threads, and warnings.catch_warnings is not thread-safe (one thread
    # leaving it restored the filters while another was still in add_submission, which then warned).
    warnings.filterwarnings("ignore", r"Object of type <\w+> not in session", SAWarning)
    monkeypatch.setattr(class_run, "write_feedback", lambda results, out: None)  # not the point here
    monkeypatch.setattr(grade, "check_notebooks", lambda entry, release: grade.Checked(
        {n: json.loads(p.read_text()) for n, p in entry.notebooks.items()}, []))
    monkeypatch.setattr(grade, "_max_score", lambda template, assignment: sum(CELLS.values()))
    return root, subs, students


def scores(out: Path) -> dict[tuple[str, str, str], float]:
    """(student, assignment, cell) -> score, from a gradebook, by names (ids may differ between gradebooks)."""
    with sqlite3.connect(out / "gradebook.db") as con:
        return {(s, a, c): score for s, a, c, score in con.execute(
            "SELECT sa.student_id, a.name, bc.name, g.auto_score FROM grade g "
            "JOIN submitted_notebook sn ON g.notebook_id = sn.id "
            "JOIN submitted_assignment sa ON sn.assignment_id = sa.id "
            "JOIN assignment a ON sa.assignment_id = a.id JOIN base_cell bc ON g.cell_id = bc.id")}


def without_times(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    return sorted(({k: v for k, v in r.items() if k != "seconds"} for r in rows), key=repr)


def test_three_shards_merged_equal_one_run(tiny_class: tuple[Path, Path, list[str]], tmp_path: Path) -> None:
    """Each student lands in exactly one shard; the merged gradebook and CSVs equal those of one unsharded run,
    although every run registered the assignment with its own random ids."""
    root, subs, students = tiny_class
    whole = class_run.grade_class(subs, tmp_path / "whole", root=root, workers=2, progress=lambda line: None)
    shards = [tmp_path / f"shard{i}" for i in (1, 2, 3)]
    for i, out in enumerate(shards, 1):
        class_run.grade_class(subs, out, root=root, workers=2, shard=(i, 3), progress=lambda line: None)
    graded = [sorted(r["student"] for r in gradebook.read_rows(out / gradebook.CSV_NAME)) for out in shards]
    assert sorted(sum(graded, [])) == students and all(graded), f"students per shard: {graded}"
    assert main(["merge", str(tmp_path / "merged"), *map(str, shards)]) == 0
    merged = tmp_path / "merged"
    assert scores(merged) == scores(tmp_path / "whole") and len(scores(merged)) == len(students) * len(CELLS)
    for name in (gradebook.CSV_NAME, gradebook.LMS_NAME):
        assert without_times(gradebook.read_rows(merged / name)) == \
            without_times(gradebook.read_rows(tmp_path / "whole" / name)), name
    lms = gradebook.read_rows(merged / gradebook.LMS_NAME)
    assert list(lms[0]) == list(gradebook.LMS_FIELDS)
    assert {(r["student_id"], float(r["score"])) for r in lms} == {(r.student, r.score) for r in whole}
    assert {r.score for r in whole} != {0.0}, "the stand-in scores must differ between students"


def test_merge_refuses_a_student_graded_twice(tiny_class: tuple[Path, Path, list[str]], tmp_path: Path) -> None:
    root, subs, _ = tiny_class
    class_run.grade_class(subs, tmp_path / "a", root=root, workers=1, shard=(1, 2), progress=lambda line: None)
    with pytest.raises(PipelineError, match="graded in two shards"):
        gradebook.merge_shards(tmp_path / "merged", [tmp_path / "a", tmp_path / "a"])


def test_a_second_run_grades_only_what_is_missing(tiny_class: tuple[Path, Path, list[str]], tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A run keeps what the folder holds for unchanged submissions, regrades a changed one and a missing one;
    --fresh regrades everything."""
    root, subs, students = tiny_class
    out = tmp_path / "out"
    first = class_run.grade_class(subs, out, root=root, workers=2, progress=lambda line: None)
    (out / gradebook.RECORDS / students[0] / f"{TINY}.json").unlink()  # as if stopped before the first
    changed = subs / students[1] / TINY / f"{TINY}.ipynb"
    changed.write_text(json.dumps({**json.loads(changed.read_text()), "metadata": {"x": 11}}))  # 7 bytes more
    graded: list[str] = []
    real = grade.grade_one
    monkeypatch.setattr(class_run, "grade_one",
                        lambda entry, *a, **k: graded.append(entry.student) or real(entry, *a, **k))
    again = class_run.grade_class(subs, out, root=root, workers=2, progress=lambda line: None)
    assert sorted(graded) == students[:2], graded
    assert [(r.student, r.score) for r in again if r.student != students[1]] == \
        [(r.student, r.score) for r in first if r.student != students[1]]
    totals = {s: sum(v for (who, _, _), v in scores(out).items() if who == s) for s in students}
    assert totals == {r.student: r.score for r in again}, "the class gradebook holds a stale submission"
    assert again[1].score != first[1].score, "the stand-in gives the changed submission the other score"
    with sqlite3.connect(out / "gradebook.db") as con:  # no row left over from the earlier grading of students[1]
        assert con.execute("SELECT COUNT(*) FROM grade").fetchone()[0] == len(students) * len(CELLS)
    graded.clear()
    class_run.grade_class(subs, out, root=root, workers=2, progress=lambda line: None, fresh=True)
    assert sorted(graded) == students


@pytest.mark.slow
@pytest.mark.lab00
def test_ctrl_c_stops_every_submission_and_keeps_the_graded(grading: GradingRun, tmp_path: Path) -> None:
    """Ctrl-C (SIGINT to the foreground process group, as a terminal sends it) while one submission hangs in its
    kernel and another is already graded: the grader exits with 130 at once, every process of the run is gone, and
    grades.csv holds the graded one only, for the next run to keep (test_a_second_run_grades_only_what_is_missing).

    It asks for `grading` only to run after the session's grading run: beside it, on CI's two cores, the grader did
    not exit within 40 s of Ctrl-C (three runs of three; alone, or beside a single grading, about 2 s). Where it
    waits then is not known yet (see the session note of issue #33's merge)."""
    import psutil

    lab = "00_ranks_and_alpha_beta"
    for case in (c for c in corpus.cases(lab) if c.name in ("empty", "hang_no_interrupt")):
        write_case(tmp_path / "submissions", lab, case)
    out = tmp_path / "out"
    log = (tmp_path / "grade.log").open("w+")
    proc = subprocess.Popen([sys.executable, "-m", "autograder", "grade", str(tmp_path / "submissions"), "--out",
                             str(out), "--workers", "2", "--fast"], cwd=adapter.REPO_ROOT, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline, kernel = time.monotonic() + 120, None
        while kernel is None or "empty" not in (out / gradebook.CSV_NAME).read_text(errors="replace"):
            assert proc.poll() is None and time.monotonic() < deadline, log_text(log)
            time.sleep(0.5)
            kernel = next((p for p in psutil.Process(proc.pid).children(recursive=True)
                           if "ipykernel" in " ".join(p.cmdline())), None) if kernel is None else kernel
        tag = kernel.environ()[RUN_VARIABLE]
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=KILL_SLACK) == 130, log_text(log)
    finally:
        proc.kill()
    assert "interrupted" in log_text(log)
    assert not tagged_processes(tag, RUN_VARIABLE), "processes of the interrupted run are still running"
    assert [r["student"] for r in gradebook.read_rows(out / gradebook.CSV_NAME)] == ["empty"]


def log_text(log) -> str:
    log.flush()
    log.seek(0)
    return log.read()[-3000:]


def test_command_line_defaults_and_bad_shards(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without --workers (one per core) the grader runs up to its first check; a bad --shard is a usage error."""
    assert main(["grade", str(tmp_path / "none")]) == 1
    assert "is not a folder of submissions" in capsys.readouterr().err
    for bad in ("0/3", "4/3", "3"):
        with pytest.raises(SystemExit):
            main(["grade", str(tmp_path), "--shard", bad])
        assert "expected i/n" in capsys.readouterr().err


def test_private_internals_are_found_in_code_not_in_prose() -> None:
    """The spellings that can get past utils.p2p_ledger are found however they are written; public names, comments and
    prose are not."""
    from autograder.tamper import private_internals

    assert private_internals("import torch.distributed._functional_collectives as f") == {"_functional_collectives"}
    assert private_internals("from torch.distributed import _functional_collectives") == {"_functional_collectives"}
    assert private_internals("dist.group.WORLD._get_backend(t.device).allreduce([t])") == {"_get_backend"}
    assert private_internals("op = getattr(torch.ops, 'c10d').allreduce_") == {"c10d"}
    assert private_internals("torch._C._jit_get_operation('c10d::allreduce_')") == {"_jit_get_operation", "c10d"}
    assert private_internals("from utils.p2p_ledger import unrestricted") == {"unrestricted"}
    assert private_internals("%time x = 1\n_calls = []  # torch.ops.c10d\nprint('c10d is torch\\'s layer')") == set()
    assert private_internals("dist.distributed_c10d.all_reduce(t)\nfrom torch.distributed import all_reduce") == set()


class _FakeGroup:
    """A cgroup stand-in that records its removal (Box.open's clean-up is checked without a real cgroup)."""

    folders: list[Path] = []
    removed = 0
    kills = reached = 0  # what oom_kills and limit_reached say

    def oom_kills(self) -> int:
        return self.kills

    def limit_reached(self) -> int:
        return self.reached

    def remove(self) -> None:
        _FakeGroup.removed += 1


@pytest.mark.parametrize(("kills", "reached", "note"), [
    (1, 1, "stopped (the memory of its kernel"), (0, 3, "stopped at its time limit, slowed at the memory bound"),
    (0, 0, None)])
def test_a_box_says_when_its_memory_bound_was_reached(kills: int, reached: int, note: str | None,
                                                      tmp_path: Path) -> None:
    """An out-of-memory kill, or the bound reached without one (ranks slowed at the bound until their time limit):
    the notes say that the submission used more than its memory, and nothing when it did not get there."""
    import autograder.sandbox as sandbox

    group = _FakeGroup()
    group.kills, group.reached = kills, reached
    notes = sandbox.Box(tmp_path, sandbox.Limits(memory_bytes=4 << 30), jupyter=tmp_path, group=group).close()
    assert [n for n in notes if "used more than 4 GB: stopped" in n] == ([] if note is None else notes)
    assert note is None or note in notes[0]


@pytest.mark.parametrize("failing", ["the cgroup", "the kernelspec"])
def test_a_box_that_fails_to_open_leaves_no_socket_folder_or_cgroup(failing: str, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import autograder.sandbox as sandbox

    def refuse(*_args: object) -> None:
        raise OSError(f"{failing} refused")

    sockets = tmp_path / "tmp"  # where tempfile.mkdtemp puts the ag- socket folder
    sockets.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(sockets))
    monkeypatch.setattr(_FakeGroup, "removed", 0)
    monkeypatch.setattr(sandbox.Group, "create", refuse if failing == "the cgroup" else lambda *_: _FakeGroup())
    monkeypatch.setattr(sandbox.json, "dumps", refuse)  # the kernelspec is written last
    (tmp_path / "root").mkdir()
    with pytest.raises(OSError, match=f"{failing} refused"):
        sandbox.Box.open(tmp_path / "root", sandbox.Limits())
    assert list(sockets.iterdir()) == []
    assert _FakeGroup.removed == (failing == "the kernelspec")


# ---- what a submission's code can reach: flags, answers kept out, grader errors -------------------------------------


@pytest.mark.parametrize("assignment", lab_params(ASSIGNMENTS))
def test_solutions_and_releases_are_not_flagged(assignment: str) -> None:
    """Every construct autograder/flags.py flags is one no exercise needs: neither the solution (as a student who
    solved everything submits it) nor the untouched release is flagged."""
    [path] = sorted((adapter.course_dir(ROOT, "release") / assignment).glob("*.ipynb"))
    release = notebook(path)
    solution = corpus.common.released(notebook(corpus.common.solution_notebook(assignment)))
    assert flags.find_flags(solution, release, path.name) == []
    assert flags.find_flags(release, release, path.name) == []


def test_each_construct_is_flagged_with_its_line() -> None:
    """One line per construct that reaches how the tests run; plain code and method names alike are not flagged."""
    cell = ("import builtins\nimport gc, ctypes\nfrom inspect import stack\nget_ipython()\nprint(_ih, Out)\n"
            "import sys as s\ns.modules['x'] = 1\ns.settrace(None)\nexec('1')\neval('1')\ncompile('', '', 'exec')\n"
            "__import__('os')\nimport numpy as n2\nn3 = n2\nn3.allclose = all\nsetattr(n2, 'isclose', all)\n"
            "x = model.modules()\nself.compile = 1\n")
    found = flags.flags_of(cell, "c")
    lines = {int(re.match(r"c: line (\d+) ", f)[1]) for f in found}
    assert lines == set(range(1, 17)) - {6, 13, 14}, found  # importing sys or numpy, naming a module: not flagged
    assert flags.flags_of("model.modules()\nnet.eval()\nx = [1]\nx.append(2)\n", "c") == []


@pytest.mark.parametrize("code, why", [
    ("shell = quit._ip", "uses ._ip"), ("sys.displayhook.shell.events.register('x', f)", "uses .displayhook"),
    ("ip.transform_ast = f", "uses .transform_ast"),
    ("ip.custom_exceptions = (BaseException,)", "uses .custom_exceptions"),
    ("ip.CustomTB = f", "uses .CustomTB"), ("import bdb", "imports bdb"), ("import tracemalloc", "imports tracemalloc"),
    ("print(t.linecache.cache)", "uses .linecache"), ("import threading", "imports threading"),
    ("import torch\nvars(torch).update(equal=f)", "reads the namespace of the module torch"),
    ("import torch\ntorch.__dict__['equal'] = f", "uses .__dict__"), ("globals()['x'] = 1", "calls globals"),
    ("class A:\n    def __reduce__(self):\n        return print, ()", "defines __reduce__"),
    ("class T:\n    @classmethod\n    def __torch_function__(cls, *a):\n        return True",
     "defines __torch_function__"),
    ("def __graded_cell_seal__(secret):\n    return secret", "defines __graded_cell_seal__"),
])
def test_what_reaches_the_kernel_is_flagged_by_what_it_does(code: str, why: str) -> None:
    """The routes of issue 43 (tests/corpus/hostile.py's shown_result and reached_shell): the shell reached without a
    flagged name, its hooks, the interpreter's, a module's namespace as a dict, and the methods that run when a
    result is unpickled or a tensor compared."""
    assert any(f.endswith(f"({why})") for f in flags.flags_of(code, "c")), flags.flags_of(code, "c")


def test_answer_lines_are_scrubbed_from_any_text() -> None:
    """A line that holds an answer line anywhere in it is hidden whole; short lines and the release's are kept."""
    instructor = {"cells": [{"cell_type": "code", "metadata": {}, "source":
                             "x = 1\n### BEGIN SOLUTION\nreturn sum(sorted(values)[1:-1])\nreturn x\n### END SOLUTION\n"
                             "### BEGIN HIDDEN TESTS\nassert trimmed_mean([1, 2, 3]) == 2\nprint('given in release')\n"
                             "### END HIDDEN TESTS\n"}]}
    release = {"cells": [{"cell_type": "code", "metadata": {}, "source": "print('given in release')\n"}]}
    lines = scrub.answer_lines(instructor, [release])
    assert lines == {"return sum(sorted(values)[1:-1])", "assert trimmed_mean([1, 2, 3]) == 2"}
    text = "ok\nValueError: >>> assert trimmed_mean([1, 2, 3]) == 2 <<<\nreturn x\nprint('given in release')"
    assert scrub.scrub(text, lines) == f"ok\n{scrub.HIDDEN}\nreturn x\nprint('given in release')"


# A test cell with a hidden region, and the tracebacks IPython writes for a failure at each of its lines (colours as
# the kernel sends them; line 2 is visible, line 5 hidden; In[6] the cell's own label, In[3] a cell of the student's).
TEST_CELL = ("# Exercise 0.4: the size for a share\nassert size(0.9) > 0, 'size(0.9) must be positive'\n"
             "### BEGIN HIDDEN TESTS\n_n = size(0.25)\n"
             "assert abs(_n - 33.3333) < 1e-3, f'size(0.25): expected 33.3333, got {_n}'\n### END HIDDEN TESTS\n")


def traceback_at(*frames: tuple[int, int]) -> list[str]:
    """IPython's traceback of an AssertionError through frames (cell label, line), the first the cell's own."""
    return ["\x1b[31m------\x1b[39m", "\x1b[31mAssertionError\x1b[39m    Traceback (most recent call last)",
            *(f"\x1b[36mCell\x1b[39m\x1b[36m \x1b[39m\x1b[32mIn[{label}]\x1b[39m\x1b[32m, line {line}\x1b[39m"
              "\n----> code" for label, line in frames), "\x1b[31mAssertionError\x1b[39m: the message"]


@pytest.mark.parametrize(("traceback", "shown"), [
    (traceback_at((6, 2)), True),  # the visible assertion
    (traceback_at((6, 2), (3, 9)), True),  # the visible line, in a student's function (another cell's label)
    (traceback_at((6, 5)), False),  # the hidden assertion
    (traceback_at((6, 4), (3, 9)), False),  # a hidden call, failing in the student's function
    (traceback_at((6, 2), (6, 5)), False),  # a function of the hidden region called from the visible part
    (traceback_at((6, 99)), False),  # past the cell's end
    (traceback_at((6, 2))[1:], False),  # cut: no header
    (["AssertionError: the message"], False),  # no frame (%xmode Minimal, or a kernel's own)
    ([], False),
])
def test_which_part_of_a_test_failed_is_read_from_its_traceback(traceback: list[str], shown: bool) -> None:
    """in_sight: a failure's message is the student's only when every frame of the test cell is in its visible part;
    anything it cannot read counts as hidden."""
    assert scrub.in_sight(traceback, TEST_CELL) is shown


def test_a_hidden_checks_message_is_the_instructors_only(tmp_path: Path) -> None:
    """A failing hidden check: the feedback page's cell and the student's report say "a hidden check of exercise 0.4
    failed", its message (the hidden case and its expected value) is only in the instructor's notes (grades.csv); a
    visible failure keeps its message in both; the grader's own NotRunAsWritten keeps the grader's words only."""
    from nbformat import from_dict

    from autograder.execution import NOT_RUN
    from autograder.feedback import TestErrorsOnly

    def test_cell(grade_id: str, *outputs: dict) -> dict:
        return {"cell_type": "code", "execution_count": 6, "source": TEST_CELL, "outputs": list(outputs),
                "metadata": {"nbgrader": {"grade": True, "grade_id": grade_id, "locked": True, "points": 1}}}

    hidden = {"output_type": "error", "ename": "AssertionError", "evalue": "size(0.25): expected 33.3333, got 25.0",
              "traceback": traceback_at((6, 5))}
    visible = {**hidden, "evalue": "size(0.9) must be positive", "traceback": traceback_at((6, 2))}
    forged = {**hidden, "ename": NOT_RUN, "evalue": "expected 33.3333", "traceback": ["expected 33.3333"]}
    printed = {"output_type": "stream", "name": "stdout", "text": "the hidden case: 0.25 -> 33.3333\n"}
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        test_cell("test_hidden", printed, hidden), test_cell("test_visible", visible),
        test_cell("test_forged", forged)]}
    (tmp_path / "nb.ipynb").write_text(json.dumps(nb))

    page, _ = TestErrorsOnly().preprocess(from_dict(json.loads(json.dumps(nb))), {})
    shown = [[o.traceback for o in cell.outputs] for cell in page.cells]
    assert shown == [[["HiddenCheckFailed: a hidden check of exercise 0.4 failed"]],
                     [["AssertionError: size(0.9) must be positive"]],
                     [[f"{NOT_RUN}: this test did not run to its end as written: it scores 0, for review"]]]
    told, withheld = grade.failed_tests(tmp_path)
    assert told == ["test_hidden (1 points) failed: a hidden check of exercise 0.4 failed",
                    "test_visible (1 points) failed: AssertionError: size(0.9) must be positive",
                    f"test_forged (1 points) failed: {NOT_RUN}: {scrub.NOT_RUN_TOLD}"]
    assert withheld == ["test_hidden (1 points) failed: (a hidden check, not shown to the student) AssertionError: "
                        "size(0.25): expected 33.3333, got 25.0"]
    result = grade.Result(student="s", assignment="a", status=grade.GRADED, notes=told, withheld=withheld)
    assert "expected 33.3333, got 25.0" in reports.row_of(result)["notes"]
    reports.write_feedback([result], tmp_path)
    report = (adapter.course_dir(tmp_path, "feedback") / "s" / "a" / reports.REPORT_PAGE).read_text()
    assert "a hidden check of exercise 0.4 failed" in report and "25.0" not in report


def test_a_failing_setup_cell_is_a_grader_error_with_no_score(tmp_path: Path) -> None:
    """A locked cell that failed before any of the submission's cells ran is the grader's fault: the status says so,
    the CSV row has no score, the summary names it to grade again, and a resumed run grades it again. A locked cell
    that fails after the submission's own code is the submission's."""
    error = {"output_type": "error", "ename": "ModuleNotFoundError", "evalue": "No module named 'utils'",
             "traceback": []}
    setup = {"cell_type": "code", "metadata": {"nbgrader": {"grade_id": "setup", "locked": True}}, "outputs": [error],
             "source": "from utils import launch"}
    own = {"cell_type": "code", "metadata": {}, "outputs": [], "source": "x = 1"}
    for cells, fault in (([setup, own], True), ([own, setup], False)):
        (tmp_path / "nb.ipynb").write_text(json.dumps({"cells": cells}))
        words = grade.setup_failure(tmp_path)
        assert bool(words) == fault and (not fault or "the locked cell setup of nb.ipynb failed before" in words)
    r = grade.Result(student="s", assignment="a", status=grade.GRADER_ERROR, max_score=11.0, seconds=3.0,
                     notes=[words or ""])
    row = reports.row_of(r)
    assert row["score"] == "" and row["status"] == "grader error"
    assert "GRADER ERROR in 1 (no score; grade them again once the grader is fixed): s/a" in reports.summary([r])
    assert reports.format_table([r]).splitlines()[1].split()[4] == "-"  # "grader error" is two words
    verdicts = tmp_path / "verdicts.jsonl"
    verdicts.write_text('["grader fault", "the grading kernel did not start (RuntimeError: Kernel died)"]\n'
                        '["not run as written", "test_x", "it stopped"]\n["output cut", "cell 3"]\n')
    assert grade.read_verdicts(verdicts) == {"grader fault": [["the grading kernel did not start (RuntimeError: "
                                                               "Kernel died)"]], "not run as written": [["test_x",
                                                               "it stopped"]], "output cut": [["cell 3"]],
                                             "test output": []}


def test_a_resumed_run_reads_back_what_it_wrote_and_grades_a_grader_error_again(tmp_path: Path) -> None:
    """A kept result is the one written, field by field: a note that holds "; " stays one note (grades.csv joins a
    result's notes with "; ", and a resume that read it split that note in two). Of the same fingerprint, a grader
    error and a changed submission are graded again; a record that is not a result is passed over."""
    written = grade.Result(student="s", assignment="a", status=grade.GRADED, score=1.5, max_score=2.0, seconds=3.0,
                           notes=["test_x failed: AssertionError: 1; 2"], tampered=["cell a; b"],
                           flagged=["x", "y"], fingerprint="f")
    others = [grade.Result(student=student, assignment="a", status=status, fingerprint="f")
              for student, status in (("t", grade.GRADER_ERROR), ("u", grade.GRADED))]
    (tmp_path / "gradebook.db").write_bytes(b"")
    reports.write_records([written, *others], tmp_path)
    gradebook.write_rows(map(reports.row_of, [written, *others]), tmp_path)
    (tmp_path / gradebook.RECORDS / "v").mkdir()
    (tmp_path / gradebook.RECORDS / "v" / "a.json").write_text('{"student": "v"}')
    fingerprints = {grade.Key(s, "a"): "f" for s in "stv"} | {grade.Key("u", "a"): "changed"}
    kept = class_run._kept_results(tmp_path, fingerprints)
    assert kept == {grade.Key("s", "a"): written}
    assert type(kept[grade.Key("s", "a")].status) is grade.Status


def test_a_file_that_is_no_notebook_scores_nothing_even_under_python_O(tmp_path: Path) -> None:
    """What a submitted file holds is checked by the code, not by `assert`, which `python -O` strips."""
    for name, text in (("list", "[1]"), ("no-cells", '{"cells": []}'), ("text-cells", '{"cells": "x"}'),
                       ("not-json", "{"), ("binary", "\udcff")):
        (tmp_path / f"{name}.ipynb").write_text(text, errors="surrogateescape")
    (tmp_path / "good.ipynb").write_text('{"cells": [{"cell_type": "code", "source": "", "metadata": {}, '
                                         '"outputs": [], "execution_count": null}], "metadata": {}, "nbformat": 4, '
                                         '"nbformat_minor": 4}')
    code = ("import sys; from pathlib import Path; from autograder.grade import NotebookError, read_notebook\n"
            "def read(p):\n    try:\n        return read_notebook(p)\n    except NotebookError:\n        return None\n"
            "print(sorted(p.stem for p in Path(sys.argv[1]).glob('*.ipynb') if read(p) is not None))")
    run = subprocess.run([sys.executable, "-O", "-c", code, str(tmp_path)], capture_output=True, text=True,
                         cwd=ROOT, check=True)
    assert run.stdout.split() == ["['good']"]


def test_a_feedback_page_that_fails_is_that_submissions_alone(tmp_path: Path) -> None:
    """Each grading makes its own page (grade_one): a submission whose page nbgrader could not make gets the note
    NO_PAGE in its report, the others keep their pages, and every report is written."""
    page = adapter.course_dir(tmp_path, "feedback") / "good" / "a" / "nb.html"
    page.parent.mkdir(parents=True)
    page.write_text("<html>feedback</html>")
    results = [grade.Result(student=s, assignment="a", status=grade.GRADED, score=1.0, max_score=2.0)
               for s in ("bad", "good")]
    reports.write_feedback(results, tmp_path)
    assert [r.notes for r in results] == [[reports.NO_PAGE], []]
    for student in ("bad", "good"):
        report = adapter.course_dir(tmp_path, "feedback") / student / "a" / reports.REPORT_PAGE
        assert report.is_file() and ("could be made" in report.read_text()) == (student == "bad")
    reports.write_feedback(results, tmp_path)  # again, as a resumed run does: the report is not a page
    assert [r.notes for r in results] == [[reports.NO_PAGE], []]


@pytest.mark.slow
@pytest.mark.lab00
@pytest.mark.skipif(not (sys.platform == "linux" and os.geteuid() == 0), reason="the sandbox needs Linux and root")
def test_a_sandbox_that_refuses_the_course_is_a_grader_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """The sandbox made without utils/ (it refuses the course's own files, as with a venv whose utils is not the
    graded repository's): lab 00's setup cell cannot import the course, before any of the submission's code. The
    run says "grader error", scores nothing, names the submission to grade again and exits non-zero."""
    from autograder import sandbox

    runtime = sandbox.readable_runtime
    monkeypatch.setattr(sandbox, "readable_runtime", lambda: [p for p in runtime() if p.name != "utils"])
    case = next(c for c in corpus.cases("00_ranks_and_alpha_beta") if c.name == "solution")
    write_case(tmp_path / "subs", "00_ranks_and_alpha_beta", case)
    assert main(["grade", str(tmp_path / "subs"), "--out", str(tmp_path / "out"), "--workers", "1", "--fast"]) == 1
    printed = capsys.readouterr()
    assert "GRADER ERROR in 1" in printed.out and "grader error in 1 submissions (solution/" in printed.err
    [row] = gradebook.read_rows(tmp_path / "out" / gradebook.CSV_NAME)
    assert (row["status"], row["score"]) == (grade.GRADER_ERROR, ""), row
    assert "the locked cell setup of ranks_and_alpha_beta.ipynb failed before any of the submission's code ran: " \
        "PermissionError" in row["notes"], row["notes"]


# ---- what the class folder takes from a worker's course root (its nbgrader read the submission) ---------------------

_TABLES = ("CREATE TABLE student (id PRIMARY KEY); CREATE TABLE assignment (id PRIMARY KEY, name);"
           "CREATE TABLE submitted_assignment (id PRIMARY KEY, assignment_id, student_id);"
           "CREATE TABLE submitted_notebook (id PRIMARY KEY, assignment_id);"
           "CREATE TABLE grade (id PRIMARY KEY, notebook_id, auto_score);"
           "CREATE TABLE comment (id PRIMARY KEY, notebook_id);"
           "INSERT INTO assignment VALUES ('a', 'lab'), ('b', 'other');")


def _worker_root(root: Path) -> Path:
    """A worker's course root whose gradebook holds ann's lab, and rows a taken-over nbgrader added: bob's lab and
    ann's other assignment; its autograded folder holds a page and two links out of the root."""
    root.mkdir()
    con = sqlite3.connect(root / "gradebook.db")
    con.executescript(_TABLES + "INSERT INTO student VALUES ('ann'), ('bob'); INSERT INTO submitted_assignment VALUES "
                      "('s1', 'a', 'ann'), ('s2', 'a', 'bob'), ('s3', 'b', 'ann'); INSERT INTO submitted_notebook "
                      "VALUES ('n1', 's1'), ('n2', 's2'), ('n3', 's3'); INSERT INTO grade VALUES ('g1', 'n1', 3.0),"
                      " ('g2', 'n2', 11.0), ('g3', 'n3', 11.0); INSERT INTO comment VALUES ('c2', 'n2');")
    con.commit()
    con.close()
    secret = root.parent / "secret.txt"
    secret.write_text("the instructors' notebook")
    made = adapter.course_dir(root, "autograded") / "ann" / "lab"
    made.mkdir(parents=True)
    (made / "lab.ipynb").write_text("{}")
    (made / "answers.txt").symlink_to(secret)
    (made / "folder").symlink_to(root.parent, target_is_directory=True)
    (root / "nbgrader.log").symlink_to(secret)
    return root


def test_the_class_folder_takes_only_the_submissions_own_rows_and_files_from_a_worker(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / gradebook.LOGS).mkdir(parents=True)
    con = sqlite3.connect(out / "gradebook.db")
    con.executescript(_TABLES)
    con.close()
    root = _worker_root(tmp_path / "worker")
    class_run._absorb(grade.Result(student="ann", assignment="lab", status=grade.GRADED, root=root), out)
    con = sqlite3.connect(out / "gradebook.db")
    assert con.execute("SELECT id FROM grade").fetchall() == [("g1",)]  # not bob's, not ann's other assignment
    assert con.execute("SELECT id FROM student").fetchall() == [("ann",)]
    assert con.execute("SELECT id FROM comment").fetchall() == []
    con.close()
    copied = adapter.course_dir(out, "autograded") / "ann" / "lab"
    assert sorted(p.name for p in copied.iterdir()) == ["lab.ipynb"]  # the links neither copied nor followed
    assert not list((out / gradebook.LOGS).iterdir())  # the log was a link
    assert not root.exists()
