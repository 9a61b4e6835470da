"""Lab 09 (fault tolerance): its restart as a script under `torchrun --max-restarts`, the command its section 5 gives;
its DCP round trips, which the grading run's COURSE_FAST=1 skips.

The notebook's structure, grading and mutants (corpus.py here) are checked for every lab by the shared tests. Here:
torchrun's elastic agent runs the solution's `torchrun_restart` on 2 workers (utils.notebook_script); on the first
attempt rank 1 kills itself with SIGKILL in the middle of step 6, the agent stops rank 0 and starts both again, and
the second attempt resumes from the checkpoint of step 3 and ends with the parameters, sampler position and RNG draws
of an uninterrupted run, bit for bit; no process is left. About 16 s of CPU: five Python processes that each import
torch (and torch._dynamo, which torch's optimizers import), the agent and two workers per attempt; 11 s of
wall-clock time on an idle 2-core machine, 20-30 s with both cores busy (five runs of five passed so).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import torch

from nbplumbing.processes import kill_tagged
from utils.notebook_script import definitions

ROOT = Path(__file__).resolve().parents[3]
NOTEBOOK = ROOT / "solutions" / "09_fault_tolerance" / "fault_tolerance.ipynb"
JOB_S = 150  # the whole job, both attempts: about 11 s on an idle machine, 30 s with both cores busy
MARK = "LAB09_TORCHRUN_JOB"  # an environment variable that torchrun's agent and its workers inherit


def _torchrun_job(folder: Path, tag: str) -> subprocess.CompletedProcess:
    """The command of the notebook's section 5, with rank 0's results saved to folder/results.pt."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
               "--max-restarts=1", "-m", "utils.notebook_script", "--save", str(folder / "results.pt"),
               str(NOTEBOOK), "torchrun_restart", str(folder / "job")]
    env = {**os.environ, MARK: tag, "OMP_NUM_THREADS": "1"}
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=JOB_S)


def test_torchrun_restarts_the_killed_rank_from_its_checkpoint(tmp_path: Path) -> None:
    tag = uuid.uuid4().hex
    try:
        job = _torchrun_job(tmp_path, tag)
    except subprocess.TimeoutExpired as error:
        raise AssertionError(f"the torchrun job did not end within {JOB_S} s (a worker hung after the kill, or the "
                             f"restart never joined); the end of its output:\n{str(error.stdout)[-3000:]}\n"
                             f"{str(error.stderr)[-3000:]}") from None
    finally:
        left = kill_tagged(tag, variable=MARK)  # the job's agent and workers, wherever they are
    assert not left, f"processes {left} of the torchrun job were still running after it ended"
    output = job.stdout[-4000:] + job.stderr[-4000:]
    assert job.returncode == 0, f"torchrun exited with {job.returncode}; the end of its output:\n{output}"
    results = torch.load(tmp_path / "results.pt", weights_only=True)
    attempts = [r["attempt"] for r in results]
    assert attempts == [1, 1], f"the job ended in attempts {attempts} (TORCHELASTIC_RESTART_COUNT): expected 1, 1"
    assert [r["resumed_from"] for r in results] == [["step-000000003"]] * 2, [r["resumed_from"] for r in results]
    for rank, result in enumerate(results):
        resumed, whole = result["resumed"], result["whole"]
        gap = (resumed["params"] - whole["params"]).abs().max().item()
        assert torch.equal(resumed["params"], whole["params"]), (f"rank {rank}: the restarted run's parameters end "
                                                                 f"{gap:.3g} away from the uninterrupted run's")
        assert (resumed["sampler"], resumed["draws"]) == (whole["sampler"], whole["draws"]), f"rank {rank}: {result}"


def test_dcp_and_the_labs_format_hold_the_same_state_every_way(tmp_path: Path) -> None:
    # The notebook's "DCP for real" cell, which COURSE_FAST=1 skips: torch's FSDP2 saved with get_state_dict and DCP
    # on 2 ranks and loaded on 3; its state converted to section 3's format and back; section 3's format converted to
    # DCP and loaded by FSDP2 on 2 ranks. Every tensor equal, every way.
    problems = definitions(NOTEBOOK)["dcp_interop_problems"](tmp_path)
    assert not problems, "\n".join(problems)
