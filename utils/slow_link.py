"""A slow link, emulated: collectives that take a known extra time without using the CPU, so that overlap of
communication with compute can be measured on a few busy cores.

    from utils.slow_link import SlowLink

    with SlowLink(0.02, names=("all_gather_single", "reduce_scatter_single")):
        work = dist.all_gather_single(full, shard, async_op=True)   # returns at once
        ...                                                         # compute here overlaps the gather
        work.wait()                                                 # 20 ms after the link started on it
        dist.reduce_scatter_single(shard, full)                     # blocks: 20 ms more

Inside the block, on this rank, every call to one of `names` (functions of torch.distributed, called as
`dist.<name>`) is queued and served by one thread, one at a time, in the order of the calls, as a process group runs
its collectives; the thread sleeps `seconds` before each call named in `delayed` (all of `names` by default), then
makes the real call. Every rank must wrap the same calls, or they would pair up differently. With async_op=True a
call returns a handle at once (`wait()`, `is_completed()`, and `finished`, its perf_counter time once done); without
it, the call returns once served. A call that fails raises its error from wait(). `trace` lists (name, start, end)
of each call served, in perf_counter seconds. `seconds` may be changed inside the block (0: the same calls on an
instant link). Leaving the block serves the calls made so far, then restores torch.distributed. Used by lab 08's
overlap test and timeline (its all-gathers and reduce-scatters, both delayed), and lab 04's (all_reduce alone, the
default).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

import torch.distributed as dist

from utils.recording import Recorder, Swaps

__all__ = ["SlowLink"]


class SlowLink(Recorder):
    """Context manager: the named collectives of torch.distributed, served in order by one thread, some delayed."""

    class Work:
        """The handle of a call made with async_op=True."""

        def __init__(self) -> None:
            self.done, self.finished, self.error = threading.Event(), None, None

        def wait(self, timeout: float | None = None) -> bool:
            self.done.wait()
            if self.error is not None:  # the real call failed on the link's thread: fail here, in the caller
                raise self.error
            return True

        def is_completed(self) -> bool:
            return self.done.is_set()

    def __init__(self, seconds: float, names: Iterable[str] = ("all_reduce",), delayed: Iterable[str] | None = None):
        self.seconds, self.names = seconds, tuple(names)
        self.delayed = set(self.names if delayed is None else delayed)
        unknown = [name for name in (*self.names, *self.delayed) if not hasattr(dist, name)]
        if seconds < 0 or unknown or not self.delayed <= set(self.names):
            raise ValueError(f"SlowLink needs seconds >= 0 and delayed names among `names`, all of torch.distributed:"
                             f" seconds={seconds}, names={self.names}, delayed={sorted(self.delayed)}, unknown="
                             f"{unknown}")
        self.trace: list[tuple[str, float, float]] = []

    def install(self, swaps: Swaps) -> None:
        self.calls: queue.Queue = queue.Queue()
        self.server = threading.Thread(target=self._serve, daemon=True)
        self.server.start()
        for name in self.names:
            swaps.swap(dist, name, partial(self._call, name, getattr(dist, name)))

    def _serve(self) -> None:
        while (call := self.calls.get()) is not None:
            name, original, args, kwargs, work = call
            start = time.perf_counter()
            if name in self.delayed:
                time.sleep(self.seconds)
            try:
                original(*args, **kwargs)
            except Exception as error:  # noqa: BLE001  (handed to whoever waits for this call)
                work.error = error
            work.finished = time.perf_counter()
            self.trace.append((name, start, work.finished))
            work.done.set()

    def _call(self, name: str, original: Callable[..., Any], *args: Any, async_op: bool = False,
              **kwargs: Any) -> SlowLink.Work | None:
        work = SlowLink.Work()
        self.calls.put((name, original, args, kwargs, work))
        if async_op:
            return work
        work.wait()
        return None

    def uninstall(self) -> None:  # after the swaps are undone: the calls made so far are served first
        self.calls.put(None)
        self.server.join()
