"""Record every point-to-point message a rank sends and receives; optionally forbid the built-in collectives.

    import torch.distributed as dist
    from utils.ledger import Ledger

    def body():                                    # runs on every rank, e.g. through utils.launch.launch
        with Ledger(forbid_collectives=True) as ledger:
            my_all_gather(outputs, tensor)         # may use only dist.send / recv / isend / irecv
        return ledger.totals()                     # Totals(sent_messages=..., sent_bytes=..., ...)

The ledger swaps torch.distributed's send, recv, isend and irecv for versions that write down (kind, peer,
bytes) before calling the real function, and, with `forbid_collectives`, swaps every built-in collective for
one that raises. Code must call them through the module (`dist.send(...)`), as the labs do: a name imported
with `from torch.distributed import send` keeps pointing at the original.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.distributed as dist

__all__ = ["COLLECTIVES", "ForbiddenCollectiveError", "Ledger", "Message", "Totals"]

# The built-in collectives an exercise may be asked not to use (only those this torch version has are swapped).
COLLECTIVES = (
    "all_gather", "all_gather_into_tensor", "all_gather_object", "all_reduce", "all_reduce_coalesced",
    "all_to_all", "all_to_all_single", "barrier", "broadcast", "broadcast_object_list", "gather",
    "gather_object", "reduce", "reduce_scatter", "reduce_scatter_tensor", "scatter", "scatter_object_list",
)
_P2P = {"send": ("send", "dst"), "isend": ("send", "dst"), "recv": ("recv", "src"), "irecv": ("recv", "src")}


class ForbiddenCollectiveError(RuntimeError):
    """A built-in collective was called where only point-to-point messages are allowed."""


@dataclass(frozen=True)
class Message:
    """One point-to-point call, as posted: `peer` is None for a receive from any source that is still pending."""

    kind: Literal["send", "recv"]
    peer: int | None
    nbytes: int
    blocking: bool


@dataclass(frozen=True)
class Totals:
    """A rank's traffic: how many messages and bytes it sent and received."""

    sent_messages: int
    sent_bytes: int
    recv_messages: int
    recv_bytes: int


class Ledger:
    """Context manager that records this rank's point-to-point messages, in call order, in `messages`."""

    _active: Ledger | None = None

    def __init__(self, forbid_collectives: bool = False):
        self.forbid_collectives = forbid_collectives
        self.messages: list[Message] = []
        self._originals: dict[str, Callable[..., Any]] = {}

    def __enter__(self) -> Ledger:
        if Ledger._active is not None:
            raise RuntimeError("a Ledger is already recording on this rank; ledgers do not nest")
        Ledger._active = self
        for name in _P2P:
            self._swap(name, self._recording(name, getattr(dist, name)))
        if self.forbid_collectives:
            for name in COLLECTIVES:
                if hasattr(dist, name):
                    self._swap(name, _forbidden(name))
        return self

    def __exit__(self, *exc_info: object) -> None:
        for name, original in self._originals.items():
            setattr(dist, name, original)
        self._originals.clear()
        Ledger._active = None

    def totals(self) -> Totals:
        sent = [m for m in self.messages if m.kind == "send"]
        received = [m for m in self.messages if m.kind == "recv"]
        return Totals(len(sent), sum(m.nbytes for m in sent), len(received), sum(m.nbytes for m in received))

    def _swap(self, name: str, replacement: Callable[..., Any]) -> None:
        self._originals[name] = getattr(dist, name)
        setattr(dist, name, replacement)

    def _recording(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        kind, peer_argument = _P2P[name]
        signature = inspect.signature(original)

        @functools.wraps(original)
        def record(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            tensor: torch.Tensor = bound.arguments["tensor"]
            peer = bound.arguments.get(peer_argument)
            if peer is None:  # torch >= 2.6 also accepts a rank within the group
                peer = bound.arguments.get(f"group_{peer_argument}")
            result = original(*args, **kwargs)
            if name == "recv" and peer is None:
                peer = result  # a blocking receive from any source returns the sender's rank
            self.messages.append(Message(kind, peer, tensor.numel() * tensor.element_size(), name in ("send", "recv")))
            return result

        return record


def _forbidden(name: str) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise ForbiddenCollectiveError(
            f"dist.{name} is a built-in collective, and this exercise must be built only from "
            "dist.send, dist.recv, dist.isend and dist.irecv."
        )

    return refuse
