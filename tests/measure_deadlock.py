"""A submission that deadlocks in every launch, for each lab: how long its grading takes and what it keeps.

    python -m tests.measure_deadlock [ASSIGNMENT,ASSIGNMENT,...]     (default: every lab)

For each lab, its released solution with one line at the top of every solution region: on a rank of two or more,
it receives from the next rank, which is itself waiting to receive, so every launch that runs a student's code
deadlocks, while the code that runs in the kernel itself (no process group there) answers as the solution does.
The submissions are graded in one grade_class run, sandboxed, with 2 workers and the grading run's settings
(tests/grading_run.py). Printed: each lab's grading time (the issue's bound: 3 minutes), its points against the
lab's full marks (which the solution gets: tests/test_grading.py), and how many of its failed test cells say that
their launch hung or was refused once the hang budget was spent (utils.launch_report.hang_budget).
"""

from __future__ import annotations

import re
import sys
import tempfile
import time
from pathlib import Path

from tests.common import ASSIGNMENTS
from tests.corpus.common import Case, Notebook, released, source, write_case
from tests.grading_run import grade_corpus

BOUND_S = 180.0  # issue #23: such a submission is graded within 3 minutes
# Both ranks of a pair wait to receive first: Gloo blocks each in recv until the launcher's watchdog ends the launch.
BLOCK = ("import torch as _t, torch.distributed as _d  # measure_deadlock: every launch of this code hangs\n"
         "if _d.is_initialized() and _d.get_world_size() > 1:\n"
         "    _d.recv(_t.zeros(1), src=(_d.get_rank() + 1) % _d.get_world_size())\n")
REGION = re.compile(r"^(?P<indent>[ \t]*)### BEGIN SOLUTION\n", re.MULTILINE)


def deadlocking(nb: Notebook) -> Notebook:
    """The released solution with BLOCK at the top of every solution region (indented like the region)."""
    nb = released(nb)
    for cell in nb["cells"]:
        cell["source"] = REGION.sub(lambda m: m[0] + "".join(m["indent"] + line
                                                             for line in BLOCK.splitlines(keepends=True)),
                                    source(cell))
    return nb


def main(assignments: list[str]) -> None:
    with tempfile.TemporaryDirectory(prefix="deadlock-subs-") as subs, \
            tempfile.TemporaryDirectory(prefix="deadlock-out-") as out:
        for assignment in assignments:
            write_case(Path(subs), assignment, Case("deadlock_everywhere", deadlocking))
        start = time.monotonic()
        results = grade_corpus(Path(subs), Path(out), workers=2, progress=lambda line: print(line, flush=True))
        print(f"graded in {time.monotonic() - start:.0f} s with 2 workers")
    print("lab                       status      time   points   within 3 min   failed test cells (of them hung)")
    for r in results:
        failed = [n for n in r.notes if " points) failed: " in n]
        hung = [n for n in failed if "already hung" in n or "did not finish within" in n]
        print(f"{r.assignment:25} {r.status:10} {r.seconds:5.0f} s {r.score:3g}/{r.max_score:<3g}   "
              f"{'yes' if r.seconds <= BOUND_S else 'NO':12}   {len(failed)} ({len(hung)})")
        for note in r.notes:
            print(f"    {note.splitlines()[0][:150]}")


if __name__ == "__main__":
    main(sys.argv[1].split(",") if len(sys.argv) > 1 else ASSIGNMENTS)
