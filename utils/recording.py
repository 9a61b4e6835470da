"""What the course's recorders of torch.distributed share: one list of its communicating functions, one way to swap
them in and out, and grouped point-to-point operations (dist.batch_isend_irecv) kept recordable.

    from utils.recording import COMMUNICATING, Recorder

    class Counter(Recorder):                         # a recorder: install() swaps, exit restores, no nesting
        def install(self, swaps):
            swaps.swap(dist, "all_reduce", counting(dist.all_reduce))

Users: utils.p2p_ledger (every point-to-point message), utils.collective_calls (every call) and utils.nccl_rules
(NCCL's ordering, emulated). `dist.P2POp` accepts an operation only if it *is* torch's own isend or irecv, and
`dist.batch_isend_irecv` tells sends from receives the same way; so `swap_p2p` marks each swapped function with
its kind, and `swap_grouped` lets P2POp accept the marked ones. A grouped call is recorded per operation: each
recorder's batch_isend_irecv writes its P2POps down, then hands torch (or the recorder below) copies that hold
torch's own isend and irecv (`torch_ops`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Literal

import torch.distributed as dist
from torch.distributed import distributed_c10d

__all__ = [
    "COLLECTIVES", "COMMUNICATING", "P2P", "Recorder", "Swaps", "p2p_kind", "swap_grouped", "swap_p2p", "torch_ops",
]

# Every function of torch.distributed that communicates (a recorder swaps those this torch version has).
COMMUNICATING = (
    "all_gather", "all_gather_into_tensor", "all_gather_object", "all_gather_single", "all_reduce",
    "all_reduce_coalesced", "all_to_all", "all_to_all_single", "barrier", "batch_isend_irecv", "broadcast",
    "broadcast_object_list", "gather", "gather_object", "irecv", "isend", "recv", "reduce", "reduce_scatter",
    "reduce_scatter_single", "reduce_scatter_tensor", "scatter", "scatter_object_list", "send",
)  # all_gather_single and reduce_scatter_single: torch 2.13's names of the tensor collectives, which FSDP2 calls
# The point-to-point functions, each with the kind of message it makes and the name of its peer argument.
P2P: dict[str, tuple[Literal["send", "recv"], str]] = {
    "send": ("send", "dst"), "isend": ("send", "dst"), "recv": ("recv", "src"), "irecv": ("recv", "src"),
}
# The built-in collectives: everything else that communicates.
COLLECTIVES = tuple(name for name in COMMUNICATING if name not in P2P and name != "batch_isend_irecv")

# torch's own isend and irecv, as imported (before any recorder): a P2POp made outside a recorder holds these.
_TORCH_P2P = {distributed_c10d.isend: "send", distributed_c10d.irecv: "recv"}


class Swaps:
    """Attributes replaced for a while (functions of a module, methods of a class), put back by `restore`.

    Example: `swaps.swap(dist, "send", recording_send)` ... `swaps.restore()` (dist.send is the original again).
    """

    _INHERITED = object()  # marks an attribute that the owner did not hold itself (a class inheriting it)

    def __init__(self) -> None:
        self._originals: list[tuple[Any, str, Any]] = []

    def swap(self, owner: Any, name: str, replacement: Callable[..., Any]) -> None:
        # What owner itself holds, as it holds it: a class keeps pybind11's method descriptor, which getattr
        # would unwrap into a function that no longer binds `self`.
        self._originals.append((owner, name, vars(owner).get(name, Swaps._INHERITED)))
        setattr(owner, name, replacement)

    def restore(self) -> None:
        """Every swapped attribute as it was, in reverse order (a name swapped twice ends as before the first)."""
        for owner, name, original in reversed(self._originals):
            if original is Swaps._INHERITED:
                delattr(owner, name)
            else:
                setattr(owner, name, original)
        self._originals.clear()


class Recorder:
    """Base of a context manager that swaps torch.distributed's functions while it is active, on this rank.

    A subclass writes `install(swaps)`; entering calls it (after refusing a second recorder of the same class: they
    do not nest), leaving restores every swap and then calls `uninstall()`. `active()` is the one recording now.
    """

    _active: ClassVar[Recorder | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._active = None  # one slot per class: a ledger and a call recorder may run together

    def install(self, swaps: Swaps) -> None:
        raise NotImplementedError(f"{type(self).__name__}.install")

    def uninstall(self) -> None:
        """What to undo after the swaps are restored (nothing by default)."""

    @classmethod
    def active(cls) -> Recorder | None:
        return cls._active

    def __enter__(self) -> Any:
        cls = type(self)
        if cls._active is not None:
            raise RuntimeError(f"a {cls.__name__} is already recording on this rank; recorders do not nest")
        self._swaps = Swaps()
        cls._active = self
        try:
            self.install(self._swaps)
        except BaseException:
            self._swaps.restore()
            cls._active = None
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._swaps.restore()
        self.uninstall()
        type(self)._active = None


def swap_p2p(swaps: Swaps, name: str, replacement: Callable[..., Any], kind: str) -> None:
    """Swap the point-to-point function `name` of torch.distributed, marked with its `kind` ("send" or "recv").

    Only torch.distributed's own name is swapped: torch's send and recv call the isend and irecv of their module,
    which must stay torch's (or a message would be counted twice).
    """
    replacement.p2p_kind = kind  # type: ignore[attr-defined]
    swaps.swap(dist, name, replacement)


def swap_grouped(swaps: Swaps, replacement: Callable[[list[dist.P2POp]], list[Any]]) -> None:
    """Swap dist.batch_isend_irecv (by both its names), and let dist.P2POp accept the swapped isend and irecv.

    `replacement` gets the P2POps as the caller made them; `torch_ops` turns them into ones that torch runs.
    """
    swaps.swap(dist, "batch_isend_irecv", replacement)
    swaps.swap(distributed_c10d, "batch_isend_irecv", replacement)
    swaps.swap(distributed_c10d, "_check_op", _check_op)  # P2POp's own check: torch's isend / irecv only


def _check_op(op: Callable[..., Any]) -> None:
    p2p_kind(op)


def p2p_kind(op: Callable[..., Any]) -> Literal["send", "recv"]:
    """Whether a P2POp's `op` sends or receives: torch's isend or irecv, or a recorder's swap of one.

    Raises:
        ValueError: `op` is neither.
    """
    kind = _TORCH_P2P.get(op) or getattr(op, "p2p_kind", None)
    if kind not in ("send", "recv"):
        raise ValueError(f"a P2POp's op must be dist.isend or dist.irecv, got {op!r}")
    return kind


def torch_ops(p2p_op_list: list[dist.P2POp]) -> list[dist.P2POp]:
    """Copies of the P2POps that hold torch's own isend and irecv (what torch's batch_isend_irecv can run).

    Anything but a list of P2POps is passed on unchanged, for torch to refuse with its own message.
    """
    if not isinstance(p2p_op_list, list) or not all(isinstance(op, dist.P2POp) for op in p2p_op_list):
        return p2p_op_list
    copies = []
    for op in p2p_op_list:
        twin = object.__new__(dist.P2POp)  # P2POp.__new__ would check the op again
        twin.__dict__.update(vars(op))
        twin.op = distributed_c10d.isend if p2p_kind(op.op) == "send" else distributed_c10d.irecv
        copies.append(twin)
    return copies
