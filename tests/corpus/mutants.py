"""Broken submissions of lab 00, generated from the solution notebook, each with its expected grade.

    python -m tests.corpus.mutants OUT      # writes OUT/<case>/00_ranks_and_alpha_beta/<notebook>.ipynb

Each case is the solution with one thing broken (or noisy, renamed, tampered with); `expected` is the score
it must get: full marks (10) minus exactly the points of the broken exercise (ping_pong 3, fit_alpha_beta 3,
ring_shift 4). Nothing is committed: the cases are built from solutions/ every time, so they follow it.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ASSIGNMENT = "00_ranks_and_alpha_beta"
NOTEBOOK = ROOT / "solutions" / ASSIGNMENT / "ranks_and_alpha_beta.ipynb"
FULL = 10
SOLUTION = re.compile(r"(?P<indent>[ \t]*)### BEGIN SOLUTION\n.*?### END SOLUTION\n", re.DOTALL)
HIDDEN = re.compile(r"^### BEGIN HIDDEN TESTS$.*?^### END HIDDEN TESTS$\n?", re.DOTALL | re.MULTILINE)


@dataclass(frozen=True)
class Case:
    name: str  # the student id
    expected: float  # the score it must get
    status: str  # "graded", "failed" or "timed out"
    make: Callable[[dict], dict | bytes]  # solution notebook -> submitted notebook (or raw bytes)
    file_name: str = NOTEBOOK.name
    tampered: bool = False  # whether the grader must flag it
    says: tuple[str, ...] = ()  # words the feedback must contain


def _cells(nb: dict) -> dict[str, dict]:
    return {c["metadata"]["nbgrader"]["grade_id"]: c for c in nb["cells"]
            if c.get("metadata", {}).get("nbgrader", {}).get("grade_id")}


def _released(nb: dict) -> dict:
    """What a student starts from: hidden tests removed (solutions stay: the student "solved" them)."""
    nb = json.loads(json.dumps(nb))
    for cell in nb["cells"]:
        src = "".join(cell["source"])
        cell["source"] = HIDDEN.sub("", src)
    return nb


def _into_solution(grade_id: str, code: str, keep_solution: bool) -> Callable[[dict], dict]:
    """Put `code` (indented like the region) at the top of the solution region of `grade_id`, in its place
    unless `keep_solution`."""
    def make(nb: dict) -> dict:
        nb = _released(nb)
        cell = _cells(nb)[grade_id]
        src = "".join(cell["source"])
        m = SOLUTION.search(src)
        assert m, grade_id
        new_src = "".join(m["indent"] + line for line in code.splitlines(keepends=True))
        cell["source"] = src[: m.start()] + new_src + src[m.start() if keep_solution else m.end():]
        return nb
    return make


def body(grade_id: str, new: str) -> Callable[[dict], dict]:
    """Replace the solution region of cell `grade_id` by `new` (indented like the region)."""
    return _into_solution(grade_id, new, keep_solution=False)


def prepend(grade_id: str, code: str) -> Callable[[dict], dict]:
    """Insert `code` at the top of the solution region of `grade_id` (the solution then runs as before)."""
    return _into_solution(grade_id, code, keep_solution=True)


def append(grade_id: str, code: str) -> Callable[[dict], dict]:
    """Add `code` at the end of cell `grade_id`, at top level."""
    def make(nb: dict) -> dict:
        nb = _released(nb)
        cell = _cells(nb)[grade_id]
        cell["source"] = "".join(cell["source"]).rstrip("\n") + "\n\n\n" + code
        return nb
    return make


def chain(*makers: Callable[[dict], dict]) -> Callable[[dict], dict]:
    def make(nb: dict) -> dict:
        for maker in makers:
            nb = maker(nb)
        return nb
    return make


def edit_cell(grade_id: str, source: str) -> Callable[[dict], dict]:
    def make(nb: dict) -> dict:
        _cells(nb)[grade_id]["source"] = source
        return nb
    return make


def delete_cell(grade_id: str) -> Callable[[dict], dict]:
    def make(nb: dict) -> dict:
        nb["cells"] = [c for c in nb["cells"] if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") != grade_id]
        return nb
    return make


def add_cells(nb: dict) -> dict:
    nb = _released(nb)
    extra = [{"cell_type": "markdown", "metadata": {}, "source": "My notes: ring_shift posts irecv first."},
             {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
              "source": "my_scratch = [n * 2 for n in range(4)]\nmy_scratch"}]
    nb["cells"][12:12] = extra  # after the ping_pong test
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
WRONG_SHIFT = "return tensor.clone()  # forgets to communicate\n"

CASES = [
    Case("solution", FULL, "graded", _released),
    Case("deadlock", FULL - 4, "graded", body("ring_shift", SEND_FIRST),
         # "20 s" and the comment: lab 00's own deadlock demo (5 s) prints a report in every submission.
         says=("test_ring_shift (4 points) failed", "did not finish within 20 s", "blocked in torch.distributed.send",
               "dist.send(tensor, dst=(rank + 1) % world)  # every rank sends first: Gloo waits")),
    Case("rank_raises", FULL - 3, "graded",
         prepend("ping_pong", 'if dist.get_rank() == 1:\n    raise RuntimeError("rank 1 lost its buffer")\n'),
         says=("test_ping_pong (3 points) failed", "rank 1 failed", "RuntimeError: rank 1 lost its buffer")),
    Case("rank_killed", FULL - 4, "graded",
         prepend("ring_shift", "if dist.get_rank() == 1:\n    import os, signal\n"
                 "    os.kill(os.getpid(), signal.SIGKILL)\n"),
         says=("test_ring_shift (4 points) failed", "rank 1 failed", "killed by SIGKILL")),
    Case("infinite_loop", FULL - 3, "graded", body("fit_alpha_beta", "i = 0\nwhile True:  # never ends\n    i += 1\n"),
         says=("test_fit_alpha_beta (3 points) failed",)),
    Case("stderr_noise", FULL, "graded", chain(
        prepend("fit_alpha_beta", 'import warnings\nwarnings.warn("fit_alpha_beta: using relative residuals")\n'),
        prepend("ring_shift", 'import sys\nimport warnings\n'
                'print(f"rank {dist.get_rank()}: shifting", file=sys.stderr)\n'
                'warnings.warn("ring_shift: a warning from a rank")\n'))),
    Case("wrong_result", FULL - 3, "graded", body("fit_alpha_beta", WRONG_FIT),
         says=("test_fit_alpha_beta (3 points) failed: AssertionError",)),
    Case("tampered_test", FULL - 3, "graded", chain(
        body("fit_alpha_beta", WRONG_FIT), edit_cell("test_fit_alpha_beta", "assert True\n")),
        tampered=True, says=("test_fit_alpha_beta",)),
    Case("deleted_test", FULL - 4, "graded", chain(body("ring_shift", WRONG_SHIFT), delete_cell("test_ring_shift")),
         tampered=True, says=("test_ring_shift",)),
    # nbgrader alone gives this one 10: the restored tests call the replaced torch.equal. The grader withholds
    # the points of every test that ran after the replacing cell.
    Case("patched_helper", FULL - 4, "graded", chain(
        body("ring_shift", WRONG_SHIFT),
        append("ring_shift", "torch.equal = lambda *args, **kwargs: True  # every check passes\n"),
    ), tampered=True, says=("torch.equal",)),
    Case("renamed_extra_cells", FULL, "graded", add_cells, file_name="lab00_final(1).ipynb", says=("graded as",)),
    Case("empty", 0, "failed", lambda nb: b"", says=("empty or is not a notebook",)),
    # Ignores the interrupt nbgrader sends on a cell timeout: nbclient then gives up on the whole notebook
    # (CellTimeoutError), so nothing is scored; under a shorter per-submission limit the grader kills it first.
    Case("hang_no_interrupt", 0, "timed out", append("fit_alpha_beta", HANG), says=("did not stop when interrupted",)),
]


def write(out: Path, cases: list[Case] = CASES) -> dict[str, Case]:
    """Write every case as out/<case>/<assignment>/<file>; return the cases by student id."""
    solution = json.loads(NOTEBOOK.read_text())
    for case in cases:
        folder = Path(out) / case.name / ASSIGNMENT
        folder.mkdir(parents=True, exist_ok=True)
        made = case.make(json.loads(json.dumps(solution)))
        data = made if isinstance(made, bytes) else json.dumps(made, indent=1).encode()
        (folder / case.file_name).write_bytes(data)
    return {c.name: c for c in cases}


if __name__ == "__main__":
    write(Path(sys.argv[1]))
