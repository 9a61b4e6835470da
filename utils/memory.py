"""What tensors weigh, in bytes, what a block of code allocates, and receive buffers that stay allocated between calls.

    from utils.memory import NewMemory, chunk_bytes, nbytes, scratch, tensor_bytes

    nbytes(x)                                        # what one message of x carries
    chunk_bytes(10, 4, 4)                            # [12, 12, 8, 8]: torch.tensor_split's N chunks, in bytes
    tensor_bytes(optimizer.state)                    # every tensor in a structure of dicts, lists and tuples
    inbox = scratch(("ring", 0), 1024, x)            # the same memory at the next call by that name and size
    with NewMemory() as new:                         # new.peak: the most bytes that the block's ops had allocated
        loss.backward()                              # and not yet freed, at any moment (new.resident(): now)

`nbytes` is the one byte count of the library: the ledgers (utils.p2p_ledger, utils.collective_calls) count a
message's bytes with it.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

__all__ = ["NewMemory", "chunk_bytes", "nbytes", "scratch", "tensor_bytes"]


def nbytes(tensor: torch.Tensor) -> int:
    """Bytes of the tensor's data: what one message of it carries.

    >>> nbytes(torch.zeros(5, dtype=torch.float64))
    40
    """
    return tensor.numel() * tensor.element_size()


def chunk_bytes(numel: int, world: int, itemsize: int) -> list[int]:
    """Bytes of each of the N chunks of torch.tensor_split(flat, N) on `numel` elements of `itemsize` bytes.

    The first numel % N chunks have numel // N + 1 elements, the others numel // N.

    >>> chunk_bytes(10, 4, 4)
    [12, 12, 8, 8]
    """
    return [(numel // world + (k < numel % world)) * itemsize for k in range(world)]


def tensor_bytes(obj: object) -> int:
    """The bytes of every tensor found in `obj`, through dicts, lists and tuples (e.g. an optimizer's state).

    >>> tensor_bytes({"exp_avg": torch.zeros(10), "step": torch.tensor(3.0)})
    44
    """
    if isinstance(obj, torch.Tensor):
        return nbytes(obj)
    if isinstance(obj, dict):
        return tensor_bytes(list(obj.values()))
    if isinstance(obj, Iterable) and not isinstance(obj, str | bytes):
        return sum(tensor_bytes(item) for item in obj)
    return 0


_SCRATCH: dict[tuple[Hashable, torch.dtype, torch.device, int], torch.Tensor] = {}
_SCRATCH_KEPT = 8  # buffers kept at most: a benchmark that sweeps sizes must not hoard memory


def scratch(name: Hashable, numel: int, like: torch.Tensor) -> torch.Tensor:
    """A receive buffer of `numel` elements with `like`'s dtype and device: the same memory at every call with the
    same name, numel, dtype and device (its contents are whatever the last user left; never return it).

    Why: memory fresh from the allocator is faulted in page by page by the kernel, on every call. For a pipelined
    ring's two receive buffers that was about 10 % of its CPU time at 4-64 MB on 2 cores (N = 3 and 4).

    >>> x = torch.zeros(3)
    >>> scratch(("ring", 0), 1024, x) is scratch(("ring", 0), 1024, x)
    True
    """
    key = (name, like.dtype, like.device, numel)
    if key not in _SCRATCH:
        if len(_SCRATCH) >= _SCRATCH_KEPT:
            _SCRATCH.clear()
        _SCRATCH[key] = torch.empty(numel, dtype=like.dtype, device=like.device)
    return _SCRATCH[key]


class NewMemory(TorchDispatchMode):
    """Inside `with NewMemory() as new:`, every storage that an op creates is watched: new.resident() is the bytes of
    those still alive (wherever they are held: autograd's buffers, .grad, a list), and new.peak the largest value it
    had after any op of the block. Memory that existed before the block is not counted, even when an op writes into
    it or a storage is resized (storage.resize_ is no op). Ops run in autograd's backward are seen too (they run on
    this thread on the CPU).

    Why a dispatch mode: the CPU allocator keeps no statistics; every tensor an op returns passes here, and so does
    every transient (a gradient before autograd adds it into .grad, a copy made for a collective).
    """

    def __enter__(self) -> NewMemory:
        self.watched: dict[int, StorageWeakRef] = {}
        self.peak = 0
        return super().__enter__()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        written = {t.untyped_storage()._cdata for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        for t in tree_leaves(out):  # outputs whose storage no input had: new memory (views and in-place ops share)
            if isinstance(t, torch.Tensor) and t.untyped_storage()._cdata not in written:
                ref = StorageWeakRef(t.untyped_storage())
                self.watched[ref.cdata] = ref  # replaces an expired one whose address was reused
        self.peak = max(self.peak, self.resident())
        return out

    def resident(self) -> int:
        """Bytes of the watched storages still alive."""
        self.watched = {key: ref for key, ref in self.watched.items() if not ref.expired()}
        return sum(torch.UntypedStorage._new_with_weak_ptr(ref.cdata).nbytes() for ref in self.watched.values())
