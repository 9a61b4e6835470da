"""Lab 08 (FSDP): what its traffic tests rest on, utils.collective_calls under torch 2.13's names of the collectives.

The notebook's structure, grading and mutants (corpus.py here) are checked for every lab by the shared tests.
Here: CallRecorder writes down dist.all_gather_single and dist.reduce_scatter_single (what torch's fully_shard calls),
once each, and their deprecated names once too (they call the new ones inside torch, out of the recorder's sight);
ring_bytes counts them as a ring's; fully_shard's calls of one step are seen: two all-gathers and a
reduce-scatter per unit, each parameter padded on dim 0 (the notebook's section 3.2 counts it against the flat
layout); utils.slow_link.SlowLink, the overlap test's link, returns async calls at once, delays what it should and
serves the calls in order; and utils.memory.NewMemory, the backward memory test's meter, counts what a block
allocates and still holds, transients at their peak, and nothing that existed before. Seconds.
"""

from __future__ import annotations

import time

import pytest
import torch
import torch.distributed as dist
from torch import nn

from utils.collective_calls import Call, CallRecorder, ring_bytes
from utils.launch import launch
from utils.memory import NewMemory
from utils.slow_link import SlowLink


def _new_and_old_names() -> list[Call]:
    """Rank r: the calls of an all-gather and a reduce-scatter under each of their two names."""
    world = dist.get_world_size()
    shard, full = torch.ones(3), torch.empty(3 * world)
    with CallRecorder() as recorder:
        dist.all_gather_single(full, shard)
        dist.reduce_scatter_single(shard, full)
        dist.all_gather_into_tensor(full, shard)
        dist.reduce_scatter_tensor(shard, full)
    assert torch.equal(shard, torch.full((3,), float(world**2)))  # the calls ran: gathered ones, summed twice
    return recorder.calls


@pytest.mark.parametrize("world", [1, 2])
def test_both_names_are_recorded_once_each(world: int) -> None:
    for calls in launch(_new_and_old_names, world, timeout=30):
        nbytes = 12 * world
        assert calls == [Call("all_gather_single", nbytes, world), Call("reduce_scatter_single", nbytes, world),
                         Call("all_gather_into_tensor", nbytes, world), Call("reduce_scatter_tensor", nbytes, world)]
        assert ring_bytes(calls) == 4 * (world - 1) * 12


def _fully_shard_calls(widths: tuple[int, ...] = (4, 8, 2)) -> list[Call]:
    """Rank r: the calls of one forward and backward of linear units of `widths` under torch's fully_shard."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:], strict=True)])
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for unit in model:
        fully_shard(unit, mesh=mesh)
    fully_shard(model, mesh=mesh)
    with CallRecorder() as recorder:
        model(torch.ones(3, widths[0])).sum().backward()
    return recorder.calls


def test_fully_shard_makes_two_gathers_and_a_reduce_scatter_per_unit() -> None:
    for calls in launch(_fully_shard_calls, 2, timeout=60):
        units = [4 * (4 * 8 + 8), 4 * (8 * 2 + 2)]  # float32 bytes of each unit's parameters
        want = [Call(name, n, 2) for n in units
                for name in ("all_gather_single", "all_gather_single", "reduce_scatter_single")]
        assert sorted(calls, key=repr) == sorted(want, key=repr), calls


def _through_a_slow_link(seconds: float) -> tuple[float, float, list[str], bool]:
    """Rank r: (seconds until an async all-gather returned, until it was done), the trace's names, and whether a
    delayed gather finished after an undelayed reduce-scatter called later (it must not: calls run in order)."""
    world = dist.get_world_size()
    shard, full = torch.ones(2), torch.empty(2 * world)
    with SlowLink(seconds, names=("all_gather_single", "reduce_scatter_single"),
                  delayed=("all_gather_single",)) as link:
        start = time.perf_counter()
        work = dist.all_gather_single(full, shard, async_op=True)
        returned = time.perf_counter() - start
        dist.reduce_scatter_single(shard, full)  # queued behind the gather
        overtaken = not work.is_completed()
        work.wait()
        done = time.perf_counter() - start
    assert torch.equal(shard, torch.full((2,), float(world))), shard
    return returned, done, [name for name, _, _ in link.trace], overtaken


def test_the_slow_link_delays_in_order_and_returns_at_once() -> None:
    for returned, done, names, overtaken in launch(_through_a_slow_link, 2, 0.2, timeout=30):
        assert returned < 0.1 <= 0.2 <= done, (returned, done)
        assert names == ["all_gather_single", "reduce_scatter_single"] and not overtaken, (names, overtaken)
    with pytest.raises(ValueError, match="delayed names among"):
        SlowLink(0.1, names=("all_reduce",), delayed=("broadcast",))


def test_fully_shard_pads_each_parameter_on_dim_0() -> None:
    # Linear(8, 15) on 2 ranks: the weight's 15 rows and the bias padded to 16 each, 144 elements (576 bytes); the
    # flat layout of FullyShardedDP pads the unit's 135 elements to 136 (544 bytes)
    for calls in launch(_fully_shard_calls, 2, (8, 15), timeout=60):
        assert sorted(calls, key=repr) == sorted([Call("all_gather_single", 576, 2)] * 2
                                                 + [Call("reduce_scatter_single", 576, 2)], key=repr), calls


def test_new_memory_counts_what_the_block_allocates_and_holds() -> None:
    before = torch.zeros(1000)  # 4000 bytes that existed before: never counted, even when written or resized
    with NewMemory() as new:
        kept = before + 1  # 4000 bytes, kept
        transient = kept * 2  # 4000 more, freed at once: the peak is 8000 here
        del transient
        before.add_(1)
        view = kept[:10]  # a view: no new memory
        grown = torch.zeros(2000)  # 8000 bytes beside kept's 4000: the peak, 12000; then resized to nothing
        grown.untyped_storage().resize_(0)
    assert new.peak == 12000 and new.resident() == 4000, (new.peak, new.resident())
    assert view.untyped_storage().data_ptr() == kept.untyped_storage().data_ptr()


def test_new_memory_sees_backward() -> None:
    # Two linear layers of 64 x 64 + 64: backward leaves their gradients (33280 bytes) and at its peak held more
    model = nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 64))
    loss = model(torch.ones(1, 64)).sum()
    with NewMemory() as new:
        loss.backward()
    assert new.resident() == 2 * 4 * (64 * 64 + 64) < new.peak, (new.resident(), new.peak)
