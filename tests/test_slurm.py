"""Slurm, for real: a one-node cluster of the test's own (tests/slurm_cluster.py: munged, slurmctld and slurmd on
localhost, every file in a temporary folder) runs what docs/instructors.md and docs/gpus-and-clusters.md tell people
to run on Slurm, as they give it (DOCUMENTED; tests/test_docs.py checks that the documents give no other).

- A class graded as a job array (`make slurm-grade`): six submissions of labs 03 and 05 (CLASS) in three shards,
  sandboxed, then the merge job that waits for them. Its grades.csv and lms-grades.csv (but the `seconds` each
  submission took) and every test cell's score in its gradebook equal those of the session's grading run
  (tests/grading_run.py, one machine, `grade_class`) for the same notebooks: the same cases of tests/corpus, written
  by the same code, graded with the same limits and settings (GRADE_ARGS, from the grading run's own constants).
  Then a shard that never ended: the merge names it and the command that reruns it, and that command, run as printed,
  grades nothing again (the shard's folder holds everything) and merges the same grades.
- A lab's function as the tasks of `srun` (one per rank, the rendezvous from Slurm's environment), and lab 09's
  restart under `srun torchrun` (classroom/slurm/torchrun.sbatch): the restarted run ends bit for bit as an
  uninterrupted one.

After them no job is left in the queue and no process of the cluster's is left running (the daemons, the steps
that slurmd left and what the jobs started all carry the variable TAG). Needs root and Slurm and munge
(`make slurm-install`); without them the tests are skipped with a line that says so, unless SLURM_TEST_REQUIRED=1
(.ci/run sets it), where that is a failure. `pytest -m slurm` runs them alone (and grades labs 03 and 05 once).
"""

from __future__ import annotations

import csv
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
import torch

from nbplumbing.adapter import gradebook_url, nbgrader_config
from nbplumbing.processes import kill_tagged
from tests import corpus, slurm_cluster
from tests.common import ROOT, GradingRun
from tests.corpus.common import write_case
from tests.corpus.hostile import SANDBOX_LIMITS
from tests.grading_run import GRADING_CELL_TIMEOUT, GRADING_TIMEOUT

pytestmark = [pytest.mark.slurm, pytest.mark.slow]  # a cluster and a class graded on it: not in `make test-fast`

HOW_TO_ENABLE = "run as root after `make slurm-install`"
TAG = "COURSE_SLURM_TEST"  # in the environment of the daemons and of every job: what is left of the cluster has it
START_S = 60.0  # the daemons up and the node idle
COMPLETING_S = 30.0  # a job that has ended leaves the queue (slurmd tells slurmctld its steps are gone)
JOBS_S = 600.0  # a class of six on a busy 2-core machine (about 25 s each, two at a time, beside the grading run)
# The class: cases of tests/corpus that grade quickly (a solution, two untouched releases, three broken), two in each
# shard of three (class_run.shard_of hashes the student's name, here the case's)
CLASS = {"05_large_batch": ("solution", "release", "late_warmup_biased_g2_average_of_ratios",
                            "tracking_refuses_late_and_batch_zero_accepted"),
         "03_data_parallel_math": ("release", "equal_weights")}
# The grading run's limits and settings (tests/grading_run.py) as `autograder grade` options. Its process bound and
# hang budget (tighter there) only matter to a submission that forks or hangs: none of CLASS does.
GRADE_ARGS = (f"--fast --timeout {GRADING_TIMEOUT:g} --cell-timeout {GRADING_CELL_TIMEOUT:g} "
              f"--memory {SANDBOX_LIMITS.memory_bytes / (1 << 30):g}")
SLURM_ARGS = "--cpus-per-task=1 --time=00:20:00"  # this machine's cores are fewer than the script's default 8

# The documents' Slurm commands, word for word; each test runs its own with the placeholders below replaced
DOCUMENTED = {
    "grade": "make slurm-grade SUBMISSIONS=submitted OUT=graded SHARDS=3",
    "status": "make slurm-status OUT=graded",
    "rerun": "make slurm-grade SUBMISSIONS=submitted OUT=graded SHARDS=3 ONLY=2",  # the merge prints it, with the args
    "srun": "srun --ntasks=2 .venv/bin/python -m utils.notebook_script NOTEBOOK FUNCTION [ARG ...]",
    "torchrun": "sbatch --nodes=1 classroom/slurm/torchrun.sbatch --nproc-per-node=2 --max-restarts=1 -m "
                "utils.notebook_script course/09_fault_tolerance/fault_tolerance.ipynb torchrun_restart torchrun-job",
}
LAB09 = ROOT / "solutions" / "09_fault_tolerance" / "fault_tolerance.ipynb"


def documented(name: str, replace: dict[str, str], *extra: str) -> list[str]:
    """DOCUMENTED[name] as words, each placeholder of `replace` replaced, "[ARG ...]" dropped, `extra` appended."""
    words = [replace.get(w, w) for w in shlex.split(DOCUMENTED[name].replace("[ARG ...]", ""))]
    return words + list(extra)


@dataclass
class Cluster:
    folder: Path
    env: dict[str, str]  # the test's environment with SLURM_CONF and TAG: Slurm's commands reach the cluster

    def run(self, words: list[str], timeout: float = 120.0, check: bool = True) -> subprocess.CompletedProcess:
        done = subprocess.run(words, cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=timeout)
        assert not check or done.returncode == 0, f"{shlex.join(words)} exited with {done.returncode}:\n" \
                                                  f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        return done

    def queue(self) -> list[str]:
        """The jobs in the queue, a line each: id, state, reason."""
        return self.run(["squeue", "--noheader", "--format=%i %T %R"]).stdout.split("\n")[:-1]

    def wait_for_empty_queue(self, timeout: float = JOBS_S) -> None:
        deadline = time.monotonic() + timeout
        while (jobs := self.queue()) and time.monotonic() < deadline:
            time.sleep(1.0)
        assert not jobs, f"jobs still in the queue after {timeout:g} s: {jobs}\n{self.logs()}"

    def leftover_jobs(self) -> list[str]:
        """The jobs still in the queue once those that were ending have ended (a job stays COMPLETING a moment
        after its last step returned)."""
        deadline = time.monotonic() + COMPLETING_S
        while (jobs := self.queue()) and all(" COMPLETING " in job for job in jobs) and time.monotonic() < deadline:
            time.sleep(0.2)
        return jobs

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}:\n{p.read_text(errors='replace')[-2000:]}"
                         for p in sorted(self.folder.glob("*.log")))


def skip_or_fail(reason: str) -> None:
    if os.environ.get("SLURM_TEST_REQUIRED") == "1":
        pytest.fail(f"the Slurm tests are required here (SLURM_TEST_REQUIRED=1) but {reason}")
    pytest.skip(f"{reason}: {HOW_TO_ENABLE}")


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The one-node cluster, up with its node idle; at the end, no job left, then stopped, and nothing of it left."""
    if lacks := slurm_cluster.missing():
        skip_or_fail(f"the Slurm tests need {'; '.join(lacks)}")
    folder = tmp_path_factory.mktemp("slurm")
    zombies_before = _step_zombies()
    tag = uuid.uuid4().hex
    env = {**os.environ, **slurm_cluster.client_environment(folder), TAG: tag}
    with (folder / "cluster.out").open("wb") as out:
        supervisor = subprocess.Popen([sys.executable, "-m", "tests.slurm_cluster", str(folder)], cwd=ROOT, env=env,
                                      stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    cluster = Cluster(folder, env)
    try:
        _wait_until_idle(cluster, supervisor)
        yield cluster
    finally:
        left_jobs = cluster.leftover_jobs() if supervisor.poll() is None else []
        if left_jobs:
            cluster.run(["scancel", "--full", *[line.split()[0] for line in left_jobs]], check=False)
        supervisor.send_signal(signal.SIGTERM)
        try:
            stopped = supervisor.wait(timeout=2 * slurm_cluster.STOP_S + 10)
        except subprocess.TimeoutExpired:
            stopped = None
        left = kill_tagged(tag, variable=TAG)
        supervisor.wait()
    assert not left_jobs, f"jobs left in the queue after the tests: {left_jobs}"
    assert stopped == 0, (f"the cluster did not stop cleanly (exit status {stopped}: a daemon or a step was "
                          f"killed):\n{(folder / 'cluster.out').read_text(errors='replace')[-3000:]}")
    assert not left, f"processes {left} of the cluster still ran after it stopped"
    zombies = _step_zombies() - zombies_before
    assert not zombies, f"job steps {sorted(zombies)} ended but nobody collected them (zombies): no subreaper?"


def _step_zombies() -> set[int]:
    """The ended slurmstepd processes whose exit status nobody collected (a tag cannot find them: a zombie's
    environment is gone)."""
    return {p.pid for p in psutil.process_iter(["name", "status"])
            if p.info["name"] == "slurmstepd" and p.info["status"] == psutil.STATUS_ZOMBIE}


def _wait_until_idle(cluster: Cluster, supervisor: subprocess.Popen) -> None:
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline and supervisor.poll() is None:
        state = cluster.run(["sinfo", "--noheader", "--format=%T"], check=False)
        if state.returncode == 0 and state.stdout.strip() == "idle":
            return
        time.sleep(0.5)
    output = (cluster.folder / "cluster.out").read_text(errors="replace")
    skip_or_fail(f"the one-node cluster did not come up within {START_S:g} s (exit status {supervisor.poll()}): "
                 f"{output[-1500:]}\n{cluster.logs()}")


def test_a_function_of_a_notebook_runs_as_the_tasks_of_srun(cluster: Cluster, tmp_path: Path) -> None:
    """One rank per task of `srun`: each finds its rank, the world and the rendezvous in Slurm's variables, and an
    all-reduce across the tasks adds up."""
    notebook = tmp_path / "ranks.ipynb"
    notebook.write_text(_notebook_of(
        "import os\nimport torch\nimport torch.distributed as dist\n\n"
        "def ranks(scale: str) -> list:\n"
        "    total = torch.tensor([float(dist.get_rank() + 1)])\n"
        "    dist.all_reduce(total)\n"
        "    return [dist.get_rank(), dist.get_world_size(), os.environ['MASTER_ADDR'],\n"
        "            float(scale) * total.item()]\n"))
    results = tmp_path / "results.pt"
    cluster.run(documented("srun", {".venv/bin/python": sys.executable, "NOTEBOOK": str(notebook),
                                    "FUNCTION": "ranks"}, "10", "--save", str(results)), timeout=180)
    head = slurm_cluster.node_name()
    assert torch.load(results, weights_only=True) == [[0, 2, head, 30.0], [1, 2, head, 30.0]]


def _notebook_of(source: str) -> str:
    """A notebook of one given cell (nbgrader metadata, no points): what utils.notebook_script reads."""
    cell = {"cell_type": "code", "metadata": {"nbgrader": {"grade_id": "given", "locked": True, "grade": False,
                                                           "solution": False}},
            "source": source, "outputs": [], "execution_count": None}
    return json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


def test_lab09_restarts_under_srun_torchrun_bit_for_bit(cluster: Cluster, tmp_path: Path) -> None:
    """Lab 09's `torchrun_restart` (its section 5) as a Slurm job: srun starts torchrun's agent on the node, rank 1
    dies in step 6 of the first attempt, the agent restarts both, and they resume from step 3's checkpoint to end
    as an uninterrupted run, bit for bit."""
    results, log = tmp_path / "results.pt", tmp_path / "torchrun.out"
    words = documented("torchrun", {"course/09_fault_tolerance/fault_tolerance.ipynb": str(LAB09),
                                    "torchrun-job": str(tmp_path / "job")}, "--save", str(results))
    words[1:1] = ["--wait", f"--output={log}", f"--export=ALL,OMP_NUM_THREADS=1,TORCHRUN_PYTHON={sys.executable}"]
    cluster.run(words, timeout=JOBS_S)
    said = log.read_text()
    assert f"rendezvous at {slurm_cluster.node_name()}:" in said, said[-3000:]
    found = torch.load(results, weights_only=True)
    assert [r["attempt"] for r in found] == [1, 1], said[-3000:]
    assert [r["resumed_from"] for r in found] == [["step-000000003"]] * 2
    for rank, r in enumerate(found):
        assert torch.equal(r["resumed"]["params"], r["whole"]["params"]), f"rank {rank}: the parameters differ"
        assert (r["resumed"]["sampler"], r["resumed"]["draws"]) == (r["whole"]["sampler"], r["whole"]["draws"]), rank


@dataclass
class ClassOnSlurm:
    cluster: Cluster
    submissions: Path
    out: Path
    submitted: str  # what `make slurm-grade` printed
    queued: list[str]  # its jobs in the queue right after: "id state reason", a line per array task

    def wait(self) -> str:
        """Wait until every job of it has ended; what `make slurm-status` then says."""
        self.cluster.wait_for_empty_queue()
        places = {"OUT=graded": f"OUT={self.out}"}
        return self.cluster.run(documented("status", places)).stdout


@pytest.fixture(scope="session")
def class_on_slurm(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> ClassOnSlurm:
    """CLASS submitted by `make slurm-grade` as the documents give it. It grades on the cluster while the session
    goes on: the tests that need its grades read the grading run, so they come last (tests/conftest.py)."""
    base = tmp_path_factory.mktemp("slurm-class")
    submissions, out = base / "submitted", base / "graded"
    for assignment, students in CLASS.items():
        for case in corpus.cases(assignment):
            if case.name in students:
                write_case(submissions, assignment, case)
    places = {"SUBMISSIONS=submitted": f"SUBMISSIONS={submissions}", "OUT=graded": f"OUT={out}"}
    submitted = cluster.run(documented("grade", places, f"SLURM_ARGS={SLURM_ARGS}", f"GRADE_ARGS={GRADE_ARGS}"))
    jobs = (out / "slurm" / "jobs").read_text().split()
    queued = cluster.run(["squeue", "--array", "--noheader", "--format=%i %T %r", f"--jobs={','.join(jobs)}"])
    return ClassOnSlurm(cluster, submissions, out, submitted.stdout, queued.stdout.splitlines())


def test_make_slurm_grade_submits_three_shards_and_a_merge_that_waits_for_them(class_on_slurm: ClassOnSlurm) -> None:
    array, merge = (class_on_slurm.out / "slurm" / "jobs").read_text().split()
    said = class_on_slurm.submitted
    assert f"as job array {array}, and their merge as job {merge}" in said and "make slurm-status" in said, said
    tasks = sorted(line.split()[0] for line in class_on_slurm.queued if line.startswith(f"{array}_"))
    assert tasks == [f"{array}_{i}" for i in (1, 2, 3)], class_on_slurm.queued
    assert f"{merge} PENDING Dependency" in class_on_slurm.queued, class_on_slurm.queued


@pytest.mark.lab03
@pytest.mark.lab05
def test_the_array_of_three_shards_grades_as_one_machine_does(class_on_slurm: ClassOnSlurm,
                                                              grading: GradingRun) -> None:
    status, out = class_on_slurm.wait(), class_on_slurm.out
    merged = (out / "slurm" / "merge.out").read_text()
    assert "joined 3 shards, 6 submissions" in merged, merged
    for shard in (1, 2, 3):
        log = (out / "slurm" / f"shard-{shard}.out").read_text()
        assert f"shard {shard}/3: grading 2 submissions" in log and "sandboxed" in log, log
        # a progress line per graded submission, as it comes; make slurm-status shows each shard's last
        assert f"shard-{shard}: exit status 0; [2/2] " in status, status
    _assert_same_grades(out, grading.out)


@pytest.mark.lab03
@pytest.mark.lab05
def test_a_shard_that_never_ended_is_named_and_its_rerun_grades_only_what_is_missing(
        class_on_slurm: ClassOnSlurm, grading: GradingRun) -> None:
    cluster, out = class_on_slurm.cluster, class_on_slurm.out
    class_on_slurm.wait()
    (out / "slurm" / "shard-2.status").unlink()  # as when Slurm killed the task (time limit, node lost)
    merge = cluster.run(["sbatch", "--wait", f"--output={out}/slurm/merge.out", "classroom/slurm/merge.sbatch",
                         str(out), "3"], check=False)
    said = (out / "slurm" / "merge.out").read_text()
    assert merge.returncode != 0 and "shard 2/3 failed" in said and "nothing merged" in said, said
    rerun = shlex.split(said.splitlines()[-1])
    places = {"SUBMISSIONS=submitted": f"SUBMISSIONS={class_on_slurm.submissions}", "OUT=graded": f"OUT={out}"}
    assert [w for w in rerun if not w.startswith(("SLURM_ARGS=", "GRADE_ARGS="))] == documented("rerun", places), said
    cluster.run(rerun)
    class_on_slurm.wait()
    shard = (out / "slurm" / "shard-2.out").read_text()
    assert "shard 2/3: grading 0 submissions (2 kept from an earlier run)" in shard, shard
    assert "joined 3 shards, 6 submissions" in (out / "slurm" / "merge.out").read_text()
    _assert_same_grades(out, grading.out)


# ---- the comparison --------------------------------------------------------------------------------------------


# A grading's own temporary course root, which a rank's traceback in the notes names (the kernel's cell files live in
# its scratch folder): a new name in every run, on Slurm or not
TEMPORARY_ROOT = re.compile(r"/\S*/grade-class-[^/\s]+/grade-[^/\s]+/")
# Which ranks a launch's RankFailedError names: those that had failed when the launch gave up, up to
# utils.launch._FAILURE_GRACE_S after the first. Where every rank raises the same error (an unsolved exercise),
# a slow one under load can miss that second: "ranks 0, 1 failed." in one run, "rank 0 failed." in another.
FAILED_RANKS = re.compile(r"\branks? \d+(?:, \d+)*(?= failed[.;]| still running and stopped|: raised an exception)")


def _comparable(text: str) -> str:
    """A note with the grading's temporary folder written as <root>/ and a failure report's rank lists as <ranks>."""
    return FAILED_RANKS.sub("<ranks>", TEMPORARY_ROOT.sub("<root>/", text))


def _rows(path: Path) -> dict[tuple[str, str], dict[str, str]]:
    """A grades CSV's rows by (assignment, student), without the seconds each submission took, their notes
    _comparable."""
    with path.open(newline="") as f:
        return {(r["assignment"], r.get("student") or r["student_id"]):
                {k: _comparable(v) for k, v in r.items() if k != "seconds"}
                for r in csv.DictReader(f)}


def _cell_scores(out: Path, keys: set[tuple[str, str]]) -> dict[tuple[str, str, str, str], tuple[float, float]]:
    """Every graded cell's (score, max score) in out's gradebook, of the submissions `keys` (assignment, student)."""
    from nbgrader.api import Gradebook

    scores = {}
    with Gradebook(gradebook_url(out), nbgrader_config().CourseDirectory.course_id) as gb:
        for assignment, student in keys:
            for nb in gb.find_submission(assignment, student).notebooks:
                for grade in nb.grades:
                    scores[(assignment, student, nb.name, grade.name)] = (grade.score, grade.max_score)
    return scores


def _assert_same_grades(slurm_out: Path, one_machine_out: Path) -> None:
    """slurm_out's grades.csv, lms-grades.csv and cell scores equal one_machine_out's for the same submissions."""
    for name in ("grades.csv", "lms-grades.csv"):
        mine = _rows(slurm_out / name)
        theirs = {key: row for key, row in _rows(one_machine_out / name).items() if key in mine}
        assert set(mine) == {(a, s) for a, students in CLASS.items() for s in students}, sorted(mine)
        assert mine == theirs, f"{name}: on Slurm {mine}, on one machine {theirs}"
    keys = set(_rows(slurm_out / "grades.csv"))
    mine, theirs = _cell_scores(slurm_out, keys), _cell_scores(one_machine_out, keys)
    assert mine and mine == theirs, f"cell scores: on Slurm {mine}, on one machine {theirs}"
