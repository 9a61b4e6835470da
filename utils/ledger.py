"""Record every point-to-point message a rank sends and receives; optionally forbid the built-in collectives.

    import torch.distributed as dist
    from utils.ledger import Ledger

    def body():                                    # runs on every rank, e.g. through utils.launch.launch
        with Ledger(forbid_collectives=True) as ledger:
            my_all_gather(outputs, tensor)         # may use only dist.send / recv / isend / irecv
        return ledger.totals()                     # Totals(sent_messages=..., sent_bytes=..., ...)

The ledger works at two levels:

- torch.distributed's send, recv, isend and irecv are swapped for versions that write down (kind, peer, bytes,
  blocking, tag) before calling the real function; the Work that isend / irecv return is wrapped so that its
  `wait()` is written down too (`ledger.waits`), which is what utils.netsim needs to know where a step ends.
- Below them, the process group's own methods (torch.distributed.ProcessGroup: send, recv, allreduce,
  broadcast, barrier, ...) are swapped as well, for every group. Every call of torch.distributed reaches one of
  them, whatever name it was called by. A point-to-point call that reaches the group without passing through
  the module's name (`from torch.distributed import send`, `torch.distributed.distributed_c10d.send`) would go
  unrecorded, so it raises UnrecordedMessageError; with `forbid_collectives`, every collective raises
  ForbiddenCollectiveError, by any name (`dist.all_reduce`, a from-import, distributed_c10d's).

Code must therefore call the point-to-point functions through the module (`dist.send(...)`), as the labs do.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.distributed as dist

__all__ = [
    "COLLECTIVES", "ForbiddenCollectiveError", "Ledger", "Message", "Totals", "UnrecordedMessageError", "unrestricted",
]

# The built-in collectives an exercise may be asked not to use, by their torch.distributed names (for the message).
COLLECTIVES = (
    "all_gather", "all_gather_into_tensor", "all_gather_object", "all_reduce", "all_reduce_coalesced",
    "all_to_all", "all_to_all_single", "barrier", "broadcast", "broadcast_object_list", "gather",
    "gather_object", "reduce", "reduce_scatter", "reduce_scatter_tensor", "scatter", "scatter_object_list",
)
# What they all call on the process group: every method of ProcessGroup that moves data, except send and recv.
_GROUP_COLLECTIVES = (
    "_allgather_base", "_reduce_scatter_base", "all_gather_single", "all_gather_single_coalesced",
    "all_to_all_single", "allgather", "allgather_coalesced", "allgather_into_tensor_coalesced", "allreduce",
    "allreduce_coalesced", "alltoall", "alltoall_base", "barrier", "broadcast", "gather", "monitored_barrier",
    "reduce", "reduce_scatter", "reduce_scatter_single", "reduce_scatter_single_coalesced",
    "reduce_scatter_tensor_coalesced", "scatter",
)
_GROUP_P2P = ("send", "recv", "recv_anysource")
_P2P = {"send": ("send", "dst"), "isend": ("send", "dst"), "recv": ("recv", "src"), "irecv": ("recv", "src")}


class ForbiddenCollectiveError(RuntimeError):
    """A built-in collective was called where only point-to-point messages are allowed."""


class UnrecordedMessageError(RuntimeError):
    """A point-to-point call reached the process group by a name the ledger does not record."""


@dataclass(frozen=True)
class Message:
    """One point-to-point call, as posted: `peer` is None for a receive from any source that is still pending."""

    kind: Literal["send", "recv"]
    peer: int | None
    nbytes: int
    blocking: bool
    tag: int = 0


@dataclass(frozen=True)
class Totals:
    """A rank's traffic: how many messages and bytes it sent and received."""

    sent_messages: int
    sent_bytes: int
    recv_messages: int
    recv_bytes: int


class _Calls(threading.local):
    depth = 0  # > 0 while a recorded torch.distributed function runs: its process-group call is expected
    unrestricted = 0  # > 0 inside `unrestricted()`


_calls = _Calls()
_INHERITED = object()  # marks an attribute that the swapped owner did not hold itself


@contextmanager
def unrestricted() -> Iterator[None]:
    """Lift the active ledger's ban for a block: for graders' reference code built on the built-ins.

    What runs inside is neither recorded nor refused. Without an active ledger it does nothing.
    """
    _calls.unrestricted += 1
    try:
        yield
    finally:
        _calls.unrestricted -= 1


class _RecordedWork:
    """A Work handle whose wait() the ledger writes down; everything else goes to the real handle."""

    def __init__(self, work: Any, ledger: Ledger, index: int):
        self._work, self._ledger, self._index = work, ledger, index

    def wait(self, *args: Any, **kwargs: Any) -> Any:
        result = self._work.wait(*args, **kwargs)
        if Ledger._active is self._ledger:
            self._ledger.waits.append((len(self._ledger.messages), self._index))
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._work, name)


class Ledger:
    """Context manager that records this rank's point-to-point messages, in call order, in `messages`.

    `waits` lists every wait() on a non-blocking call as (how many messages had been posted then, the index in
    `messages` of the call waited for).
    """

    _active: Ledger | None = None

    def __init__(self, forbid_collectives: bool = False):
        self.forbid_collectives = forbid_collectives
        self.messages: list[Message] = []
        self.waits: list[tuple[int, int]] = []
        self._originals: list[tuple[Any, str, Callable[..., Any]]] = []

    def __enter__(self) -> Ledger:
        if Ledger._active is not None:
            raise RuntimeError("a Ledger is already recording on this rank; ledgers do not nest")
        Ledger._active = self
        for name in _P2P:
            self._swap(dist, name, self._recording(name, getattr(dist, name)))
        for name in _GROUP_P2P:
            if hasattr(dist.ProcessGroup, name):
                self._swap(dist.ProcessGroup, name, _guarded(getattr(dist.ProcessGroup, name), _unrecorded))
        if self.forbid_collectives:
            for name in COLLECTIVES:  # the usual names first, for an error message that names the call
                if hasattr(dist, name):
                    self._swap(dist, name, _named_refusal(name))
            for name in _GROUP_COLLECTIVES:  # ... then what every name of them reaches
                if hasattr(dist.ProcessGroup, name):
                    self._swap(dist.ProcessGroup, name, _guarded(getattr(dist.ProcessGroup, name), _forbidden))
        return self

    def __exit__(self, *exc_info: object) -> None:
        for owner, name, original in reversed(self._originals):
            if original is _INHERITED:
                delattr(owner, name)
            else:
                setattr(owner, name, original)
        self._originals.clear()
        Ledger._active = None

    def totals(self) -> Totals:
        sent = [m for m in self.messages if m.kind == "send"]
        received = [m for m in self.messages if m.kind == "recv"]
        return Totals(len(sent), sum(m.nbytes for m in sent), len(received), sum(m.nbytes for m in received))

    def _swap(self, owner: Any, name: str, replacement: Callable[..., Any]) -> None:
        # What owner itself holds, as it holds it: a class keeps pybind11's method descriptor, which getattr
        # would unwrap into a function that no longer binds `self`.
        self._originals.append((owner, name, vars(owner).get(name, _INHERITED)))
        setattr(owner, name, replacement)

    def _recording(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        kind, peer_argument = _P2P[name]
        signature = inspect.signature(original)
        blocking = name in ("send", "recv")

        @functools.wraps(original)
        def record(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            tensor: torch.Tensor = bound.arguments["tensor"]
            peer = bound.arguments.get(peer_argument)
            if peer is None:  # torch >= 2.6 also accepts a rank within the group
                peer = bound.arguments.get(f"group_{peer_argument}")
            _calls.depth += 1
            try:
                result = original(*args, **kwargs)
            finally:
                _calls.depth -= 1
            if name == "recv" and peer is None:
                peer = result  # a blocking receive from any source returns the sender's rank
            tag = bound.arguments.get("tag") or 0
            self.messages.append(Message(kind, peer, tensor.numel() * tensor.element_size(), blocking, tag))
            if blocking or result is None:  # a rank outside the group gets no Work
                return result
            return _RecordedWork(result, self, len(self.messages) - 1)

        return record


def _guarded(original: Callable[..., Any], refuse: Callable[[str], None]) -> Callable[..., Any]:
    """A ProcessGroup method that runs only where it is expected (refuse(name) raises otherwise)."""

    @functools.wraps(original)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        if not (_calls.depth or _calls.unrestricted):
            refuse(original.__name__)
        return original(*args, **kwargs)

    return guarded


def _unrecorded(name: str) -> None:
    raise UnrecordedMessageError(
        f"a point-to-point call reached the process group ({name}) without passing through dist.send, dist.recv, "
        "dist.isend or dist.irecv: call them through the module (import torch.distributed as dist; dist.send(...)), "
        "not by an imported name, so that the ledger counts the message."
    )


def _named_refusal(name: str) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        if _calls.unrestricted:
            return getattr(dist.distributed_c10d, name)(*args, **kwargs)
        raise ForbiddenCollectiveError(
            f"dist.{name} is a built-in collective, and this exercise must be built only from "
            "dist.send, dist.recv, dist.isend and dist.irecv."
        )

    return refuse


def _forbidden(name: str) -> None:
    raise ForbiddenCollectiveError(
        f"a built-in collective was called (it reached the process group's {name}), and this exercise must be "
        "built only from dist.send, dist.recv, dist.isend and dist.irecv."
    )
