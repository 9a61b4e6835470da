"""Lab 00 (ranks, alpha-beta): broken, noisy, renamed and tampered submissions, and what each must score.

Besides wrong answers, lab 00's corpus holds what a class grader meets: a deadlock, an exchange that only NCCL's
rules refuse, a rank that raises or is
killed, an infinite loop, stderr noise (which costs nothing), a tampered or deleted test cell, a replaced grading
helper, a renamed notebook with extra cells, an empty file, and a cell that ignores the interrupt.
"""

from __future__ import annotations

from tests.corpus.common import (
    FAILED,
    TIMED_OUT,
    Case,
    Notebook,
    append,
    body,
    chain,
    delete_cell,
    edit_cell,
    own_cell,
    prepend,
    released,
    replace,
)
from utils.nccl_rules import FIX

ASSIGNMENT = "00_ranks_and_alpha_beta"


def add_cells(nb: Notebook) -> Notebook:
    """A student's own notes and scratch cell, after the ping_pong test."""
    nb = released(nb)
    extra = [own_cell("markdown", "My notes: ring_shift posts irecv first."),
             own_cell("code", "my_scratch = [n * 2 for n in range(4)]\nmy_scratch")]
    nb["cells"][12:12] = extra
    return nb


WRONG_FIT = "return 30e-6, 2 / 2e9  # beta twice too large\n"
SEND_FIRST = """rank, world = dist.get_rank(), dist.get_world_size()
received = torch.empty_like(tensor)
dist.send(tensor, dst=(rank + 1) % world)  # every rank sends first: Gloo waits for the matching recv
dist.recv(received, src=(rank - 1) % world)
return received
"""
HANG = """import signal


def _busy_rank():
    while True:
        print("still working", flush=True)
        time.sleep(1)


signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C does nothing
launch(_busy_rank, 2, timeout=10**6)
"""
# Wrong in exercise 0.2, and transcribing n_1/2 for every share in exercise 0.4 instead of deriving the size for a
# share: each costs exactly its exercise (tests/corpus/hostile.py's memory_hog carries them).
WRONG_RESULTS = chain(body("fit_alpha_beta", WRONG_FIT), body("size_for_share", "return alpha / beta\n"))
WRONG_RESULTS_LOSE = {"test_fit_alpha_beta", "test_size_for_share"}
WRONG_RESULTS_SAY = ("test_fit_alpha_beta (3 points) failed: AssertionError",
                     "expected both back, got alpha = 3e-05 (1 times) and beta = 1e-09 (2 times)",
                     "test_size_for_share (1 points) failed",
                     "bytes: expected a share of 0.9 there, got 0.5 (that is n_1/2, the size for a share of 1/2 only)")
WRONG_SHIFT = "return tensor.clone()  # forgets to communicate\n"
# Right on Gloo, but on NCCL the pair's irecv heads both queues and each isend waits behind it (nccl_rules).
UNGROUPED_SHIFT = """rank, world = dist.get_rank(), dist.get_world_size()
if world == 1:
    return tensor.clone()
received = torch.empty_like(tensor)
requests = [dist.irecv(received, src=(rank - 1) % world), dist.isend(tensor, dst=(rank + 1) % world)]
for request in requests:
    request.wait()
return received
"""
EVERY_TEST = {"test_ping_pong", "test_fit_alpha_beta", "test_ring_shift", "test_size_for_share"}

# Faults whose lost cells are disjoint share a submission (each grading costs CI its time): three pairs below.
CASES = [
    # A deadlock in ring_shift, and an infinite loop in exercise 0.2's cell. The loop runs once, in the exercise's
    # cell, before the def: one cell timeout, then every use of the function fails at once (a loop inside the
    # function would cost a timeout in each of the four cells calling it). It sleeps rather than spins: the grader
    # stops both alike, and a spinning loop would take one of CI's two cores for the whole cell limit.
    Case("deadlock_and_infinite_loop", chain(
        body("ring_shift", SEND_FIRST),
        replace("fit_alpha_beta", "def fit_alpha_beta(",
                "while True:  # never ends\n    time.sleep(1)\n\n\ndef fit_alpha_beta(")),
         loses={"test_ring_shift", "test_fit_alpha_beta"},
         # "20 s" and the comment: lab 00's own deadlock demo (5 s) prints a report in every submission.
         says=("test_ring_shift (4 points) failed", "did not finish within 20 s", "blocked in torch.distributed.send",
               "dist.send(tensor, dst=(rank + 1) % world)  # every rank sends first: Gloo waits",
               "test_fit_alpha_beta (3 points) failed", "NameError: name 'fit_alpha_beta' is not defined")),
    # Two failing ranks in one submission: rank 1 raises in ping_pong, and is killed in ring_shift. Renamed, with
    # the student's own cells, and noisy on stderr (warnings, prints of the ranks), which costs nothing.
    Case("renamed_noisy_extra_cells_rank_raises_then_killed", chain(
        add_cells,
        prepend("fit_alpha_beta", 'import warnings\nwarnings.warn("fit_alpha_beta: using relative residuals")\n'),
        prepend("ring_shift", 'import sys\nimport warnings\n'
                'print(f"rank {dist.get_rank()}: shifting", file=sys.stderr)\n'
                'warnings.warn("ring_shift: a warning from a rank")\n'),
        prepend("ping_pong", 'if dist.get_rank() == 1:\n    raise RuntimeError("rank 1 lost its buffer")\n'),
        prepend("ring_shift", "if dist.get_rank() == 1:\n    import os, signal\n"
                "    os.kill(os.getpid(), signal.SIGKILL)\n")),
         loses={"test_ping_pong", "test_ring_shift"}, file_name="lab00_final(1).ipynb",
         says=("graded as", "test_ping_pong (3 points) failed", "rank 1 failed", "RuntimeError: rank 1 lost its buffer",
               "test_ring_shift (4 points) failed", "killed by SIGKILL")),
    # What the contract allows costs nothing: a barrier of every rank (rank 2 too) before the exchange. What it
    # rules out costs exactly its exercise: weights 1/t_i^2 from the measured times, pass 1 alone (biased low), and
    # a ring_shift that completes on Gloo but would hang on NCCL (the test's run under NCCL's rules refuses it).
    Case("barrier_measured_weights_ungrouped", chain(
        replace("ping_pong", "    if rank > 1:\n",
                "    dist.barrier()  # every rank: start together\n    if rank > 1:\n"),
        replace("fit_alpha_beta", "for _ in range(3):", "for _ in range(1):  # pass 1 alone: weights from t_i"),
        body("ring_shift", UNGROUPED_SHIFT)),
         loses={"test_fit_alpha_beta", "test_ring_shift"},
         says=("test_fit_alpha_beta (3 points) failed",
               "mean relative error of (alpha, beta) over 200 noisy sweeps: expected under 5% for both, got -",
               "weights 1/t_i^2 from the measured times (pass 1 alone)? The noise biases them",
               "test_ring_shift (4 points) failed", "NCCL would hang here: ranks 0 and 1 wait for each other",
               FIX)),
    # One test cell edited (exercise 0.2's) and one deleted (exercise 0.3's), each over a wrong answer.
    Case("tampered_and_deleted_tests", chain(
        body("fit_alpha_beta", WRONG_FIT), edit_cell("test_fit_alpha_beta", "assert True\n"),
        body("ring_shift", WRONG_SHIFT), delete_cell("test_ring_shift")),
         loses={"test_fit_alpha_beta", "test_ring_shift"}, tampered=True,
         says=("edited the locked cell test_fit_alpha_beta", "expected both back, got alpha = 3e-05 (1 times) and "
               "beta = 1e-09 (2 times)", "deleted the test cell test_ring_shift",
               "nbgrader put back the deleted test cell test_ring_shift",
               "N = 3, rank 0, ring_shift of a tensor of 0s: element [0, 0]: expected 2, got 0",
               "got is this rank's own tensor: nothing came from its left neighbour")),
    # nbgrader alone gives this one full marks: the restored tests call the replaced torch.equal. The grader
    # withholds the points of every test that ran after the replacing cell: exercise 0.4's too, which comes later.
    Case("patched_helper", chain(
        body("ring_shift", WRONG_SHIFT),
        append("ring_shift", "import torch as _tt\n_tt.equal = lambda *args, **kwargs: True  # under an alias\n"),
    ), loses={"test_ring_shift", "test_size_for_share"}, tampered=True, flagged=True,
         says=("ring_shift replaces _tt.equal (a grading helper)", "not counted, for review by an instructor: "
               "test_ring_shift, test_size_for_share (they ran after your code replaced a grading helper)")),
    Case("empty", lambda nb: b"", loses=EVERY_TEST, status=FAILED, says=("empty or is not a notebook",)),
    # Ignores the interrupt nbgrader sends on a cell timeout: nbclient then gives up on the whole notebook
    # (CellTimeoutError), so nothing is scored; under a shorter per-submission limit the grader kills it first.
    Case("hang_no_interrupt", append("fit_alpha_beta", HANG), loses=EVERY_TEST, status=TIMED_OUT,
         says=("did not stop when interrupted",)),
]
