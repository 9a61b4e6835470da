"""Lab 07 (ZeRO): utils.collective_calls, which the lab's traffic figures and memory measurements rest on.

The notebook's structure, grading and mutants (corpus.py here) are checked for every lab by the shared tests.
Here: CallRecorder writes down every communicating call (name, bytes of the full tensor, group size) while the
calls still run, records other functions too, restores torch.distributed afterwards and refuses to nest; ring_bytes
gives a ring's per-rank bytes and refuses what it cannot count; tensor_bytes counts an optimizer's state. Seconds.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from utils.collective_calls import COMMUNICATING, Call, CallRecorder, ring_bytes
from utils.launch import launch
from utils.memory import tensor_bytes


def _recorded() -> tuple[list[Call], torch.Tensor, torch.Tensor, bool]:
    """Rank r: the calls of a reduce-scatter, an all-gather (keyword arguments) and an all-reduce, with results."""
    rank, world = dist.get_rank(), dist.get_world_size()
    full = torch.arange(3.0 * world) + rank  # 3 float32 elements per rank
    shard = torch.empty(3)
    gathered = torch.empty(3 * world, dtype=torch.float64)
    originals = {name: getattr(dist, name) for name in COMMUNICATING if hasattr(dist, name)}
    with CallRecorder() as recorder:
        dist.reduce_scatter_tensor(shard, full)
        dist.all_gather_into_tensor(output_tensor=gathered, input_tensor=shard.double())
        dist.all_reduce(full)
        dist.broadcast(torch.zeros(5, dtype=torch.int64), src=0)
    restored = all(getattr(dist, name) is original for name, original in originals.items())
    return recorder.calls, shard, gathered, restored


@pytest.mark.parametrize("world", [1, 3])
def test_the_recorder_writes_down_each_call_and_lets_it_run(world: int) -> None:
    sums = torch.arange(3.0 * world) * world + sum(range(world))
    for rank, (calls, shard, gathered, restored) in enumerate(launch(_recorded, world, timeout=30)):
        assert calls == [Call("reduce_scatter_tensor", 12 * world, world), Call("all_gather_into_tensor", 24 * world,
                         world), Call("all_reduce", 12 * world, world), Call("broadcast", 40, world)], calls
        assert torch.equal(shard, sums[3 * rank:3 * rank + 3]) and torch.equal(gathered, sums.double())
        assert restored, "torch.distributed's functions are the originals again after the recorder"


def test_recorders_do_not_nest() -> None:
    with CallRecorder(), pytest.raises(RuntimeError, match="do not nest"), CallRecorder():
        pass
    with CallRecorder() as again:  # the failed one left nothing behind
        pass
    assert again.calls == []


def test_ring_bytes_are_the_rings_per_rank_traffic_and_an_all_reduce_is_a_reduce_scatter_and_an_all_gather() -> None:
    world, nbytes = 4, 4 * 4 * 10  # 10 float32 elements per chunk
    halves = [Call("reduce_scatter_tensor", nbytes, world), Call("all_gather_into_tensor", nbytes, world)]
    assert ring_bytes(halves[:1]) == ring_bytes(halves[1:]) == 3 * 40
    assert ring_bytes([Call("all_reduce", nbytes, world)]) == ring_bytes(halves) == 2 * 3 * 40
    assert ring_bytes([Call("all_reduce", nbytes, 1)]) == 0 and ring_bytes([]) == 0
    with pytest.raises(ValueError, match="not broadcast"):
        ring_bytes([Call("broadcast", nbytes, world)])
    with pytest.raises(ValueError, match="pad the tensor"):
        ring_bytes([Call("all_reduce", 4 * 7, 3)])  # 7 elements on 3 ranks


def test_tensor_bytes_counts_an_optimizers_state() -> None:
    weight = torch.nn.Parameter(torch.zeros(10))
    optimizer = torch.optim.Adam([weight], lr=0.1)
    weight.grad = torch.ones(10)
    optimizer.step()
    assert tensor_bytes(optimizer.state) == 10 * 4 * 2 + 4  # m, v and the step counter, float32
    assert tensor_bytes({"a": [torch.zeros(3, dtype=torch.float64), None, "text"], "b": (torch.zeros(2),)}) == 32
