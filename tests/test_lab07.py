"""Lab 07 (ZeRO): the collectives of utils.sharding, which the lab's optimizers and its traffic figures rest on.

The notebook's structure, grading and mutants (tests/corpus/lab07.py) are checked for every lab by the shared tests.
Here: reduce_scatter_tensor and all_gather_into_tensor agree with torch.distributed's all_reduce for N = 1 to 4,
several dtypes and shard sizes (0 included), move exactly (N-1) s elements per rank and direction, refuse tensors
that do not fit, and tensor_bytes counts an optimizer's state. A few seconds.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from utils.launch import launch
from utils.ledger import Ledger, Totals
from utils.sharding import all_gather_into_tensor, all_reduce, reduce_scatter_tensor, tensor_bytes

DTYPES = [torch.float32, torch.float64, torch.int64]


def _against_builtin(shard_sizes: list[int]) -> list[str]:
    """Rank r: every dtype and shard size, compared with dist.all_reduce; the problems found."""
    rank, world = dist.get_rank(), dist.get_world_size()
    problems = []
    for dtype in DTYPES:
        for s in shard_sizes:
            full = (torch.arange(world * s) * (rank + 1) + rank).to(dtype)  # different on every rank
            expected = full.clone()
            dist.all_reduce(expected)
            shard = torch.empty(s, dtype=dtype)
            with Ledger(forbid_collectives=True) as ledger:
                reduce_scatter_tensor(shard, full)
                gathered = torch.empty(world * s, dtype=dtype)
                all_gather_into_tensor(gathered, shard)
            moved = (world - 1) * s * full.element_size()
            if not torch.equal(shard, expected[rank * s:(rank + 1) * s]):
                problems.append(f"{dtype}, s={s}: reduce-scatter gave {shard}")
            if not torch.equal(gathered, expected):
                problems.append(f"{dtype}, s={s}: all-gather gave {gathered}")
            if s and ledger.totals() != Totals(2 * (world - 1), 2 * moved, 2 * (world - 1), 2 * moved):
                problems.append(f"{dtype}, s={s}: traffic {ledger.totals()}, expected 2 x {moved} bytes each way")
    return problems


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_the_collectives_equal_the_builtin_all_reduce_and_move_n_minus_1_shards(world: int) -> None:
    for rank, problems in enumerate(launch(_against_builtin, world, [0, 1, 5], timeout=60)):
        assert not problems, f"rank {rank}: {problems}"


def _gather_in_place_and_all_reduce() -> tuple[torch.Tensor, torch.Tensor]:
    rank, world = dist.get_rank(), dist.get_world_size()
    full = torch.zeros(world * 2)
    full[2 * rank:2 * rank + 2] = rank + 1.0
    all_gather_into_tensor(full, full[2 * rank:2 * rank + 2])  # the input is a view into the output
    summed = torch.ones(world * 3)
    all_reduce(summed)
    return full, summed


def test_all_gather_takes_its_own_chunk_of_the_output_and_all_reduce_sums() -> None:
    for full, summed in launch(_gather_in_place_and_all_reduce, 3, timeout=30):
        assert full.tolist() == [1.0, 1.0, 2.0, 2.0, 3.0, 3.0]
        assert summed.tolist() == [3.0] * 9


def _misfit(kind: str) -> str:
    """Rank r: the error a collective raises on tensors that do not fit (caught here, so that no rank fails)."""
    world = dist.get_world_size()
    try:
        if kind == "size":
            reduce_scatter_tensor(torch.empty(2), torch.zeros(2 * world + 1))
        elif kind == "dtype":
            all_gather_into_tensor(torch.empty(2 * world), torch.zeros(2, dtype=torch.float64))
        else:
            all_reduce(torch.zeros(2 * world + 1))
    except ValueError as error:
        return str(error)
    return "no error"


@pytest.mark.parametrize(("kind", "says"), [("size", "pad it to a multiple of N"), ("dtype", "one dtype and device"),
                                            ("all_reduce", "whose length N = 2 divides")])
def test_tensors_that_do_not_fit_raise_a_clear_error_on_every_rank(kind: str, says: str) -> None:
    for message in launch(_misfit, 2, kind, timeout=30):
        assert says in message, message


def test_tensor_bytes_counts_an_optimizers_state() -> None:
    weight = torch.nn.Parameter(torch.zeros(10))
    optimizer = torch.optim.Adam([weight], lr=0.1)
    weight.grad = torch.ones(10)
    optimizer.step()
    assert tensor_bytes(optimizer.state) == 10 * 4 * 2 + 4  # m, v and the step counter, float32
    assert tensor_bytes({"a": [torch.zeros(3, dtype=torch.float64), None, "text"], "b": (torch.zeros(2),)}) == 32
