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
the real one. It counts calls, not packets: `ring_bytes` turns the calls into the bytes a rank sends with the
ring algorithms (what Gloo's and NCCL's rings move), and a ring reduce-scatter plus a ring all-gather is a ring
all-reduce, byte for byte. Code must call the functions through the module (`dist.all_reduce(...)`): a name
imported with `from torch.distributed import all_reduce` keeps pointing at the original, unrecorded.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch.distributed as dist

from utils.memory import tensor_bytes
from utils.p2p_ledger import Swaps

__all__ = ["COMMUNICATING", "Call", "CallRecorder", "ring_bytes"]

# Every function of torch.distributed that communicates (only those this torch version has are recorded).
COMMUNICATING = (
    "all_gather", "all_gather_into_tensor", "all_gather_object", "all_reduce", "all_reduce_coalesced",
    "all_to_all", "all_to_all_single", "barrier", "batch_isend_irecv", "broadcast", "broadcast_object_list",
    "gather", "gather_object", "irecv", "isend", "recv", "reduce", "reduce_scatter", "reduce_scatter_tensor",
    "scatter", "scatter_object_list", "send",
)
# The argument that holds the full tensor (N chunks) of the collectives that ring_bytes knows.
_FULL_TENSOR = {"all_reduce": "tensor", "reduce_scatter_tensor": "input", "all_gather_into_tensor": "output_tensor"}
# A ring sends (N-1)/N of the full tensor per rank for each pass: one for a reduce-scatter or an all-gather, two
# for an all-reduce (its reduce-scatter, then its all-gather).
_RING_PASSES = {"reduce_scatter_tensor": 1, "all_gather_into_tensor": 1, "all_reduce": 2}


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


class CallRecorder:
    """Context manager that records this rank's calls to torch.distributed's communicating functions in `calls`.

    The functions still run: recording changes nothing else. Recorders do not nest.
    """

    _active: CallRecorder | None = None

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self._swaps = Swaps()

    def __enter__(self) -> CallRecorder:
        if CallRecorder._active is not None:
            raise RuntimeError("a CallRecorder is already recording on this rank; recorders do not nest")
        CallRecorder._active = self
        for name in COMMUNICATING:
            if hasattr(dist, name):
                self._swaps.swap(dist, name, self._recording(name, getattr(dist, name)))
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._swaps.restore()
        CallRecorder._active = None

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


def ring_bytes(calls: Iterable[Call]) -> int:
    """The bytes that one rank sends (and receives) for `calls` when each runs as a ring over its N ranks.

    A ring cuts the full tensor of B bytes into N chunks and passes N - 1 of them on per pass: (N-1)/N * B per
    rank for a reduce-scatter or an all-gather, 2 (N-1)/N * B for an all-reduce. This is the algorithm's count,
    not a measurement of packets.

    Raises:
        ValueError: a call other than reduce_scatter_tensor, all_gather_into_tensor or all_reduce, or a full
            tensor whose bytes do not split into N equal chunks (pad it to a multiple of N elements).
    """
    total = 0
    for call in calls:
        if call.name not in _RING_PASSES:
            raise ValueError(f"ring_bytes counts reduce_scatter_tensor, all_gather_into_tensor and all_reduce, "
                             f"not {call.name}")
        if call.nbytes % call.world_size:
            raise ValueError(f"{call.name} of {call.nbytes} bytes: not N = {call.world_size} equal chunks; pad the "
                             f"tensor to a multiple of N elements")
        total += _RING_PASSES[call.name] * (call.world_size - 1) * (call.nbytes // call.world_size)
    return total

