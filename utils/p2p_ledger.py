"""Record every point-to-point message a rank sends and receives; optionally forbid the built-in collectives.

    import torch.distributed as dist
    from utils.p2p_ledger import Ledger

    def body():                                    # runs on every rank, e.g. through utils.launch.launch
        with Ledger(forbid_collectives=True) as ledger:
            my_all_gather(outputs, tensor)         # may use only dist.send / recv / isend / irecv / batch_isend_irecv
        return ledger.totals()                     # Totals(sent_messages=..., sent_bytes=..., ...)

The ledger works at three levels:

- torch.distributed's send, recv, isend and irecv are swapped for versions that write down (kind, peer, bytes,
  blocking, tag) before calling the real function; the Work that isend / irecv return is wrapped so that its
  `wait()` is written down too (`ledger.waits`), which is what utils.netsim needs to know where a step ends (a
  second wait() on a request of CPU tensors raises SecondWaitError: on Gloo it would never return). A
  group (`dist.batch_isend_irecv` of `dist.P2POp`s) is recorded operation by operation, like as many isend and
  irecv calls, whenever its P2POps were made (utils.recording).
- Every Python-visible method that moves data is swapped, for every object: those of the process group
  (torch.distributed.ProcessGroup: send, recv, allreduce, broadcast, barrier, ...) and those of the backends
  under it (torch._C._distributed_c10d.Backend, which ProcessGroupGloo and ProcessGroupNCCL inherit; a group
  hands them out through `_get_backend`, and a backend calls its library directly, below the third level).
- A TorchDispatchMode watches the dispatcher while the ledger is active on its thread. Every process-group call
  runs one of the operators of the c10d namespace there (dist.all_reduce runs c10d::allreduce_, dist.isend
  c10d::send), on CPU and CUDA tensors alike, and so does every functional collective
  (torch.distributed._functional_collectives, torch.ops._c10d_functional), whatever name it was called by:
  `torch.ops.c10d.allreduce_`, a from-import, an operator or a group's method fetched before the ledger started.
  (torch's own CommDebugMode, torch.distributed.tensor.debug, counts collectives the same way, NCCL's included.)
  The recorded calls step it aside while torch runs them: they need no watching, and their operators would pay
  the mode's price on every message. Every other operator pays a few microseconds.

Every collective or point-to-point call reaches one of these levels. A point-to-point call that does not pass
through the module's four names or batch_isend_irecv (`from torch.distributed import send`, a backend's send,
`_functional_collectives`' isend) would go unrecorded, so it raises UnrecordedMessageError; with
`forbid_collectives`, every collective raises ForbiddenCollectiveError, by any of those names. Code must therefore
call the point-to-point functions through the module (`dist.send(...)`), as the labs do.

What stays outside: the third level watches the ledger's own thread only, so in a thread started inside the
ledger only the names that the first two swap are caught (a functional collective there, or a method bound
before the ledger started, would pass); and a backend method bound before the ledger started passes the second.
The grader flags a submission that names torch's private internals (autograder.tamper.private_internals), which
every one of those routes but a thread calling a group's bound method needs.
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
from torch._C._distributed_c10d import Backend
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode, _pop_mode_temporarily

from utils.memory import nbytes
from utils.recording import COLLECTIVES, P2P, Recorder, Swaps, p2p_kind, swap_grouped, swap_p2p, torch_ops

__all__ = [
    "COLLECTIVES", "WAIT_ONCE", "ForbiddenCollectiveError", "Ledger", "Message", "SecondWaitError", "Totals",
    "UnrecordedMessageError", "unrestricted",
]

# What they all call on the process group: every method of ProcessGroup (and of Backend) that moves data, except
# send and recv.
_GROUP_COLLECTIVES = (
    "_allgather_base", "_reduce_scatter_base", "all_gather_single", "all_gather_single_coalesced",
    "all_to_all_single", "allgather", "allgather_coalesced", "allgather_into_tensor_coalesced", "allreduce",
    "allreduce_coalesced", "alltoall", "alltoall_base", "barrier", "broadcast", "gather", "monitored_barrier",
    "reduce", "reduce_scatter", "reduce_scatter_single", "reduce_scatter_single_coalesced",
    "reduce_scatter_tensor_coalesced", "scatter",
)
_GROUP_P2P = ("send", "recv", "recv_anysource")
# The dispatcher's namespaces of operators that move data between ranks: c10d (every process-group call), the
# functional collectives (native and legacy, with autograd), DTensor's own, and symmetric memory's (CUDA only).
_OPERATOR_NAMESPACES = frozenset({"c10d", "_c10d_functional", "c10d_functional", "_c10d_functional_autograd",
                                  "_dtensor", "symm_mem"})
_RECORDED_OPERATORS = frozenset({"c10d::send", "c10d::recv_", "c10d::recv_any_source_"})  # what dist.send etc. run
_LOCAL_OPERATORS = frozenset({"c10d::check_for_nan", "_c10d_functional::wait_tensor", "c10d_functional::wait_tensor"})
# Messages that no recorded call sends: the functional point-to-point calls (and every symm_mem operator).
_UNRECORDABLE_OPERATORS = frozenset({f"{namespace}::{name}" for namespace in ("_c10d_functional", "c10d_functional")
                                     for name in ("isend", "irecv", "batch_p2p_ops")})


class ForbiddenCollectiveError(RuntimeError):
    """A built-in collective was called where only point-to-point messages are allowed."""


class UnrecordedMessageError(RuntimeError):
    """A point-to-point call reached the process group by a name the ledger does not record."""


# Measured with torch 2.13 (tests/test_launch.py shows it); SecondWaitError and a hang's report (utils.launch_report)
# both say it.
WAIT_ONCE = "on Gloo, wait() on a request whose wait() already returned never returns. Wait on each request once."


class SecondWaitError(RuntimeError):
    """wait() again on a request of a CPU tensor whose wait() had returned: on Gloo that call never returns."""


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
    """A Work handle whose wait() the ledger writes down; everything else goes to the real handle.

    A second wait() on a handle of CPU tensors raises SecondWaitError instead of hanging (WAIT_ONCE).
    """

    def __init__(self, work: Any, ledger: Ledger, indices: list[int], on_cpu: bool):
        self._work, self._ledger, self._indices = work, ledger, indices  # the messages it completes
        self._on_cpu, self._waited = on_cpu, False

    def wait(self, *args: Any, **kwargs: Any) -> Any:
        if self._waited and self._on_cpu:
            first = self._ledger.messages[self._indices[0]]
            peer = "any rank" if first.peer is None else f"rank {first.peer}"
            call = f"isend to {peer}" if first.kind == "send" else f"irecv from {peer}"
            raise SecondWaitError(f"wait() a second time on one request (the {call}, tag {first.tag}): {WAIT_ONCE}")
        result = self._work.wait(*args, **kwargs)
        self._waited = result is not False  # a wait that timed out may be tried again
        if Ledger.active() is self._ledger:
            self._ledger.waits += [(len(self._ledger.messages), index) for index in self._indices]
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._work, name)


class Ledger(Recorder):
    """Context manager that records this rank's point-to-point messages, in call order, in `messages`.

    `waits` lists every wait() on a non-blocking call as (how many messages had been posted then, the index in
    `messages` of the call waited for). Ledgers do not nest.
    """

    def __init__(self, forbid_collectives: bool = False):
        self.forbid_collectives = forbid_collectives
        self.messages: list[Message] = []
        self.waits: list[tuple[int, int]] = []
        self._dispatcher_guard = _DispatcherGuard(forbid_collectives)

    def install(self, swaps: Swaps) -> None:
        recording = {name: self._recording(name, getattr(dist, name)) for name in P2P}
        for name, replacement in recording.items():
            swap_p2p(swaps, name, replacement, P2P[name][0])
        swap_grouped(swaps, self._recording_group(dist.batch_isend_irecv))
        self._guard_methods(swaps, _GROUP_P2P, _unrecorded)
        if self.forbid_collectives:
            for name in COLLECTIVES:  # the usual names first, for an error message that names the call
                if hasattr(dist, name):
                    swaps.swap(dist, name, _named_refusal(name))
            self._guard_methods(swaps, _GROUP_COLLECTIVES, _forbidden)  # ... then what every name of them reaches
        self._dispatcher_guard.__enter__()  # last: nothing above raises

    def __exit__(self, *exc_info: object) -> None:
        self._dispatcher_guard.__exit__(*exc_info)
        super().__exit__(*exc_info)

    def totals(self) -> Totals:
        sent = [m for m in self.messages if m.kind == "send"]
        received = [m for m in self.messages if m.kind == "recv"]
        return Totals(len(sent), sum(m.nbytes for m in sent), len(received), sum(m.nbytes for m in received))

    @staticmethod
    def _guard_methods(swaps: Swaps, names: tuple[str, ...], refuse: Callable[[str], None]) -> None:
        """Swap each method `names` lists, on the process group, the backend and every subclass that overrides it."""
        for owner in _with_subclasses(dist.ProcessGroup) + _with_subclasses(Backend):
            for name in names:
                if name in vars(owner):
                    where = f"{owner.__name__}.{name}"
                    swaps.swap(owner, name, _guarded(getattr(owner, name), functools.partial(refuse, where)))

    def _recording(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        kind, peer_argument = P2P[name]
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
                with self._dispatcher_guard.stepped_aside():
                    result = original(*args, **kwargs)
            finally:
                _calls.depth -= 1
            if name == "recv" and peer is None:
                peer = result  # a blocking receive from any source returns the sender's rank
            tag = bound.arguments.get("tag") or 0
            self.messages.append(Message(kind, peer, nbytes(tensor), blocking, tag))
            if blocking or result is None:  # a rank outside the group gets no Work
                return result
            return _RecordedWork(result, self, [len(self.messages) - 1], tensor.device.type == "cpu")

        return record

    def _recording_group(self, batch: Callable[..., list[Any]]) -> Callable[..., list[Any]]:
        """dist.batch_isend_irecv that writes down each of its P2POps, as a non-blocking isend or irecv."""

        @functools.wraps(batch)
        def record(p2p_op_list: list[dist.P2POp]) -> list[Any]:
            ops = torch_ops(p2p_op_list)
            _calls.depth += 1
            try:
                with self._dispatcher_guard.stepped_aside():
                    works = batch(ops)
            finally:
                _calls.depth -= 1
            first = len(self.messages)
            self.messages += [Message(p2p_kind(op.op), op.peer, nbytes(op.tensor), False, op.tag) for op in ops]
            indices = range(first, len(self.messages))
            on_cpu = all(op.tensor.device.type == "cpu" for op in ops)
            if len(works) == len(ops):  # one Work per operation (Gloo)
                return [_RecordedWork(work, self, [index], on_cpu) for work, index in zip(works, indices, strict=True)]
            return [_RecordedWork(work, self, list(indices), on_cpu) for work in works]  # one for the group (NCCL)

        return record


def _with_subclasses(cls: type) -> list[type]:
    return [cls] + [sub for direct in cls.__subclasses__() for sub in _with_subclasses(direct)]


def _guarded(original: Callable[..., Any], refuse: Callable[[], None]) -> Callable[..., Any]:
    """A method that runs only where it is expected (refuse() raises otherwise)."""

    @functools.wraps(original)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        if not (_calls.depth or _calls.unrestricted):
            refuse()
        return original(*args, **kwargs)

    return guarded


class _DispatcherGuard(TorchDispatchMode):
    """Refuses, on its thread, the operators that move data other than through the recorded calls.

    Every operator that runs while it is active comes here first (the data-moving ones are a few of them); the
    others pass straight on, at the cost of one Python call each (about 4 us on the 2-core test machine).
    """

    def __init__(self, forbid_collectives: bool):
        super().__init__()
        self.forbid_collectives = forbid_collectives

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # Else torch wraps __torch_dispatch__ in torch._dynamo.disable, whose first call imports torch._dynamo:
        # about 1.5 s in every rank that launch forks, and a few microseconds more on every operator after that.
        return False

    @contextmanager
    def stepped_aside(self) -> Iterator[None]:
        """Off the dispatch stack for a block, if on top of it: for the recorded calls, torch's own code.

        A c10d operator called through the mode costs about 0.2 ms more than the call itself (its process group
        goes back and forth between Python and C++): lab 02's test of the pipelined ring, down to 8-byte segments,
        took 1.7 times as long.
        """
        if _get_current_dispatch_mode() is not self:  # a mode of the student's own is on top: let it be
            yield
            return
        with _pop_mode_temporarily():
            yield

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if func.namespace in _OPERATOR_NAMESPACES and not _calls.unrestricted:
            name = func.name()
            where = f"the operator {name}"
            if name in _RECORDED_OPERATORS:
                if not _calls.depth:
                    _unrecorded(where)
            elif name in _UNRECORDABLE_OPERATORS or func.namespace == "symm_mem":
                _unrecorded(where)
            elif name not in _LOCAL_OPERATORS and self.forbid_collectives:
                _forbidden(where)
        return func(*args, **(kwargs or {}))


def _unrecorded(where: str) -> None:
    raise UnrecordedMessageError(
        f"a point-to-point message reached {where} without passing through dist.send, dist.recv, dist.isend or "
        "dist.irecv: call those through the module (import torch.distributed as dist; dist.send(...)), not by an "
        "imported name nor through torch's lower layers, so that the ledger counts the message."
    )


def _named_refusal(name: str) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        if _calls.unrestricted:
            return getattr(dist.distributed_c10d, name)(*args, **kwargs)
        raise ForbiddenCollectiveError(
            f"dist.{name} is a built-in collective, and this exercise must be built only from "
            "dist.send, dist.recv, dist.isend and dist.irecv (and dist.batch_isend_irecv of them)."
        )

    return refuse


def _forbidden(where: str) -> None:
    raise ForbiddenCollectiveError(
        f"a built-in collective was called (it reached {where}), and this exercise must be built only from "
        "dist.send, dist.recv, dist.isend and dist.irecv (and dist.batch_isend_irecv of them)."
    )
