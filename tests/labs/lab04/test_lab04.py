"""Lab 04 (bucketed DDP): what is particular to this lab, beyond the shared structure and grading tests.

The reference BucketedDDP that `make bench` times is the solution notebook's own class (read by
benchmark.reference.bucketed_ddp, never copied), and the student release keeps only its contract: no cell of
course/ registers a hook or launches an all-reduce the way the solution does. Takes about a second.
"""

from __future__ import annotations

import json

import torch

from benchmark.reference import bucketed_ddp
from tests.common import COURSE, source

RELEASED = COURSE / "04_bucketed_ddp" / "bucketed_ddp.ipynb"


def test_the_bench_reads_the_solutions_class() -> None:
    cls = bucketed_ddp()
    assert issubclass(cls, torch.nn.Module) and cls.__name__ == "BucketedDDP"
    for method in ("forward", "no_sync", "finish_gradient_synchronization"):
        assert getattr(cls, method).__doc__, method


def test_the_release_keeps_the_contract_only() -> None:
    code = "\n".join(source(c) for c in json.loads(RELEASED.read_text())["cells"] if c["cell_type"] == "code")
    assert "class BucketedDDP(nn.Module)" in code and "def finish_gradient_synchronization" in code
    assert "register_post_accumulate_grad_hook(self." not in code  # only the solution registers the bucket hooks
    assert "async_op=True))" not in code  # the solution's launch
