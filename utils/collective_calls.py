"""What sharded training holds and moves: the bytes of state, and the collective calls a rank makes.

    import torch.distributed as dist
    from utils.collective_calls import CallRecorder, ring_bytes

    def body():                                   # on every rank, e.g. through utils.launch.launch
        flat = torch.zeros(4 * dist.get_world_size())
        with CallRecorder() as recorder:
            dist.all_reduce(flat)                 # runs as usual, and is written down
        return recorder.calls, ring_bytes(recorder.calls)  # [Call("all_reduce", 16 N, N)], 2 (N-1)/N * 16 N

`CallRecorder` swaps every communicating function of torch.distributed (the collectives and the point-to-point
calls) for one that writes down a `Call` (its name, the bytes of its full tensor, the group's size) and then runs
the real one. A group of point-to-point operations (`dist.batch_isend_irecv`) is written down as its isend and
irecv calls, one Call each (utils.recording). It counts calls, not packets: `ring_bytes` turns the calls into the
bytes a rank sends with the ring algorithms (what Gloo's and NCCL's rings move), and a ring reduce-scatter plus a
ring all-gather is a ring all-reduce, byte for byte. Code must call the functions through the module
(`dist.all_reduce(...)`): a name imported with `from torch.distributed import all_reduce` keeps pointing at the
original, unrecorded.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch.distributed as dist

from utils.memory import tensor_bytes
from utils.recording import COMMUNICATING, P2P, Recorder, Swaps, p2p_kind, swap_grouped, swap_p2p, torch_ops

__all__ = ["COMMUNICATING", "Call", "CallRecorder", "ring_bytes"]

# The argument that holds the full tensor (N chunks) of the collectives that ring_bytes knows.
_FULL_TENSOR = {"all_reduce": "tensor", "reduce_scatter_tensor": "input", "all_gather_into_tensor": "output_tensor",
                "reduce_scatter_single": "input", "all_gather_single": "output_tensor"}  # torch 2.13's new names
# A ring sends (N-1)/N of the full tensor per rank for each pass: one for a reduce-scatter or an all-gather, two
# for an all-reduce (its reduce-scatter, then its all-gather).
_RING_PASSES = {"reduce_scatter_tensor": 1, "all_gather_into_tensor": 1, "reduce_scatter_single": 1,
                "all_gather_single": 1, "all_reduce": 2}


@dataclass(frozen=True)
class Call:
    """One call to a communicating function, as made on this rank.

    nbytes: the bytes of the full tensor (the input of reduce_scatter_tensor, the output of all_gather_into_tensor,
    the tensor of all_reduce); for any other function, the bytes of every tensor among its arguments.
    world_size: the size of the group it ran on.
    """

    name: str
    nbytes: int
    world_size: int


class CallRecorder(Recorder):
    """Context manager that records this rank's calls to torch.distributed's communicating functions in `calls`.

    The functions still run: recording changes nothing else. Recorders do not nest.
    """

    def __init__(self) -> None:
        self.calls: list[Call] = []

    def install(self, swaps: Swaps) -> None:
        recording = {name: self._recording(name, getattr(dist, name)) for name in COMMUNICATING
                     if hasattr(dist, name) and name != "batch_isend_irecv"}
        for name, replacement in recording.items():
            if name in P2P:
                swap_p2p(swaps, name, replacement, P2P[name][0])
            else:
                swaps.swap(dist, name, replacement)
        swap_grouped(swaps, self._recording_group(dist.batch_isend_irecv))

    def _recording(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(original)

        @functools.wraps(original)
        def record(*args: Any, **kwargs: Any) -> Any:
            arguments = signature.bind(*args, **kwargs).arguments
            full = arguments[_FULL_TENSOR[name]] if name in _FULL_TENSOR else list(arguments.values())
            world = dist.get_world_size(arguments.get("group"))
            self.calls.append(Call(name, tensor_bytes(full), world))  # before the call: a receive may fill it
            return original(*args, **kwargs)

        return record

    def _recording_group(self, batch: Callable[..., list[Any]]) -> Callable[..., list[Any]]:
        """dist.batch_isend_irecv that writes down one Call per P2POp: an isend or an irecv, as if called alone."""

        @functools.wraps(batch)
        def record(p2p_op_list: list[dist.P2POp]) -> list[Any]:
            ops = torch_ops(p2p_op_list)
            self.calls += [Call("isend" if p2p_kind(op.op) == "send" else "irecv", tensor_bytes(op.tensor),
                                dist.get_world_size(op.group)) for op in ops]
            return batch(ops)

        return record


def ring_bytes(calls: Iterable[Call]) -> int:
    """The bytes that one rank sends (and receives) for `calls` when each runs as a ring over its N ranks.

    A ring cuts the full tensor of B bytes into N chunks and passes N - 1 of them on per pass: (N-1)/N * B per
    rank for a reduce-scatter or an all-gather, 2 (N-1)/N * B for an all-reduce. This is the algorithm's count,
    not a measurement of packets.

    Raises:
        ValueError: a call other than reduce_scatter_tensor, all_gather_into_tensor (or torch 2.13's names of the two,
            reduce_scatter_single and all_gather_single) or all_reduce, or a full
            tensor whose bytes do not split into N equal chunks (pad it to a multiple of N elements).
    """
    total = 0
    for call in calls:
        if call.name not in _RING_PASSES:
            raise ValueError(f"ring_bytes counts reduce_scatter_tensor, all_gather_into_tensor (or their _single "
                             f"names) and all_reduce, not {call.name}")
        if call.nbytes % call.world_size:
            raise ValueError(f"{call.name} of {call.nbytes} bytes: not N = {call.world_size} equal chunks; pad the "
                             f"tensor to a multiple of N elements")
        total += _RING_PASSES[call.name] * (call.world_size - 1) * (call.nbytes // call.world_size)
    return total

