"""NCCL's ordering of point-to-point operations, emulated on Gloo: what would hang on GPUs fails on a CPU too.

    from utils.launch import launch

    launch(ring_shift_test, 2, emulate="nccl")    # or COURSE_EMULATE=nccl in the environment, for every launch

Under the emulation, dist.send, recv, isend, irecv and batch_isend_irecv follow NCCL's rules on every rank:

- the operations between two ranks (on one process group) form one queue, as they share one NCCL communicator
  and one CUDA stream: they complete one after the other, in the order they were posted, whatever their direction;
- an operation runs only when it is at the head of its queue, so a send completes only when the peer's matching
  receive is at the head of the peer's queue (the n-th send to a peer meets its n-th receive: NCCL has no tags);
- the operations of one dist.batch_isend_irecv progress together: a group's send and receive with one peer run at
  once, and every Work of the group completes when the whole group has;
- dist.send and dist.isend return before the transfer is done, as NCCL's do once the work is queued (dist.send
  copies its tensor first, as the stream order protects it on a GPU); dist.recv returns once the data is there.

Each queue is served by a thread of its own that runs the real Gloo calls one queue entry at a time. A pattern
that needs two of a pair's operations in flight at once therefore hangs, as it can on GPUs, and a watchdog names
it at once: when the heads of both ends of a queue have waited for a while, each rank publishes its head in the
launch's store, reads the peer's, and where each head waits for an operation that the other has queued behind its
own, every operation of that queue fails with NcclOrderError (the ranks, the peer, the fix). The two classic cases:
both ranks irecv then isend to each other, ungrouped; both ranks send first. A hang the watchdog cannot prove
(a cycle through several queues, a receive that no rank posts) ends in the launch's RankHangError.

Two groups are two communicators, two queues here. NCCL asks that operations on different communicators be posted in
one order on every rank: a GPU need not run two communicators' kernels at once, so a rank whose first operation is
on one communicator and a peer whose first is on the other can wait for each other for ever. The emulation checks it
per pair of ranks: once a rank has posted operations with a peer on more than one group, the sequence of groups of
its entries with that peer (an entry: one call's operations with that peer) must be the peer's sequence with it,
entry by entry; the first difference fails the posting call with NcclOrderError. (Per pair only: a cycle through
three ranks' communicators is not checked.)

What the model assumes: one queue per pair of ranks and group, as ungrouped operations have in ProcessGroupNCCL.
In torch 2.13 a batch_isend_irecv runs on the group's own communicator (the one its collectives use), not the
pair's: the emulation puts it in the pair's queue all the same, which is stricter than NCCL where grouped and
ungrouped operations with one peer are mixed, and the course never mixes them. Only the five functions above
follow the rules; collectives, and what torch calls internally (send_object_list), run on Gloo as usual.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import json
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d

from utils.memory import nbytes
from utils.p2p_ledger import unrestricted
from utils.recording import P2P, Recorder, Swaps, p2p_kind, swap_grouped, swap_p2p

__all__ = ["ENVIRONMENT", "FIX", "NcclOrderError", "NcclRules", "emulating"]

ENVIRONMENT = "COURSE_EMULATE"  # set to "nccl": every launch emulates NCCL's rules (the grader's and tests' switch)
FIX = "post both with dist.batch_isend_irecv"
_STUCK_S = 0.2  # how long both heads of a queue wait before the watchdog compares them (a normal op takes < 1 ms)
_WATCH_S = 0.05
_OPPOSITE = {"send": "recv", "recv": "send"}
# Every NcclRules gets the next number, the same on every rank (they enter it in the same order: once per launch), and
# keeps its keys in the store under it: a later one in the same store (a second launch under torchrun, or a second
# `with NcclRules()` in one launch) must not read the keys of an earlier one.
_INSTANCES = itertools.count()


class NcclOrderError(RuntimeError):
    """Point-to-point operations that NCCL would never complete (they wait for each other), or cannot run at all."""


def emulating(fn: Callable[..., Any], emulate: str | None) -> Callable[..., Any]:
    """`fn`, to run on every rank under NCCL's rules if `emulate` (or else $COURSE_EMULATE) is "nccl"; else `fn`.

    Raises:
        ValueError: `emulate` (or the variable) is neither None, "" nor "nccl".
    """
    mode = emulate if emulate is not None else os.environ.get(ENVIRONMENT) or None
    if mode is None:
        return fn
    if mode != "nccl":
        source = "emulate" if emulate is not None else ENVIRONMENT
        raise ValueError(f'{source} must be "nccl" (or unset), got {mode!r}')

    @functools.wraps(fn)
    def under_nccl_rules(*args: Any, **kwargs: Any) -> Any:
        with NcclRules() as rules:
            result = fn(*args, **kwargs)
            rules.drain()  # what was sent is received before the rank reports its result, as on a GPU
        return result

    return under_nccl_rules


@dataclass(eq=False)
class _Op:
    """One point-to-point operation as posted: `seq` is its number among the queue's operations of its kind."""

    call: str  # the function that posted it: send, isend, recv, irecv or batch_isend_irecv
    kind: str  # "send" or "recv"
    tensor: torch.Tensor
    peer: int  # the peer's global rank
    group: Any
    tag: int
    seq: int = -1
    work: Any = None  # Gloo's Work, once the queue's thread has posted it

    def describe(self) -> str:
        way = f"to rank {self.peer}" if self.kind == "send" else f"from rank {self.peer}"
        return f"dist.{self.call} ({self.kind} {way}, {nbytes(self.tensor)} bytes)"

    def key(self) -> tuple[str, int]:
        return self.kind, self.seq


@dataclass(eq=False)
class _Item:
    """What one call puts in one queue: one operation, or a group's operations with that peer."""

    ops: list[_Op]
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None
    _finishing: threading.Lock = field(default_factory=threading.Lock)

    def finish(self, error: BaseException | None = None) -> None:
        """Mark it done, with `error` if it failed: the first to finish it (its queue, or the watchdog) decides."""
        with self._finishing:
            if not self.done.is_set():
                self.error = error
                self.done.set()


class _Work:
    """The handle an emulated isend, irecv or group returns: wait() blocks until its queue entries are done."""

    def __init__(self, items: list[_Item]):
        self._items = items

    def wait(self, timeout: Any = None) -> bool:
        for item in self._items:
            item.done.wait()
            if item.error is not None:
                raise item.error
        return True

    def is_completed(self) -> bool:
        return all(item.done.is_set() for item in self._items)

    def is_success(self) -> bool:
        return self.is_completed() and all(item.error is None for item in self._items)


class _Queue:
    """The operations between this rank and one peer on one group, run one entry at a time by a thread."""

    def __init__(self, group: Any, me: int, peer: int, prefix: str):
        self.group, self.me, self.peer = group, me, peer
        self.key = f"{prefix}/{group.group_name}/{me}->{peer}"  # where this rank's stuck head is published
        self.their_key = f"{prefix}/{group.group_name}/{peer}->{me}"  # ... and the peer's
        self.items: deque[_Item] = deque()
        self.posted = {"send": 0, "recv": 0}  # operations of each kind ever posted
        self.completed = {"send": 0, "recv": 0}  # ... and those of completed entries
        self.head_since: float | None = None  # when the entry at the head was started
        self.published: _Item | None = None  # the head last written to the store
        self.failed: NcclOrderError | None = None
        self.lock = threading.Condition()
        self.thread = threading.Thread(target=self._serve, name=f"nccl-rules {me}->{peer}", daemon=True)
        self.thread.start()

    def post(self, ops: list[_Op]) -> _Item:
        with self.lock:
            if self.failed is not None:
                raise self.failed
            for op in ops:
                op.seq = self.posted[op.kind]
                self.posted[op.kind] += 1
            item = _Item(ops)
            self.items.append(item)
            self.lock.notify()
        return item

    def close(self) -> None:
        with self.lock:
            self.items.append(None)  # type: ignore[arg-type]  # the end of the queue
            self.lock.notify()

    def _serve(self) -> None:
        with unrestricted():  # the real calls below were recorded (or refused) when they were posted
            while True:
                with self.lock:
                    while not self.items:
                        self.lock.wait()
                    item = self.items[0]
                    if item is None:
                        return
                    self.head_since = time.monotonic()
                error = self._run(item)
                with self.lock:
                    if self.items and self.items[0] is item:
                        self.items.popleft()
                    for op in item.ops:
                        self.completed[op.kind] += 1
                    self.head_since = None
                item.finish(error)

    def _run(self, item: _Item) -> BaseException | None:
        try:
            for op in item.ops:  # a group's operations all at once: they progress together
                post = distributed_c10d.isend if op.kind == "send" else distributed_c10d.irecv
                op.work = post(op.tensor, op.peer, group=op.group, tag=op.tag)
            for op in item.ops:
                op.work.wait()
        except Exception as error:  # a peer gone, Gloo's own timeout: the waiting call raises it
            return error
        return None

    def stuck_head(self) -> _Item | None:
        """The entry at the head if it has waited longer than _STUCK_S, else None."""
        with self.lock:
            if self.head_since is None or time.monotonic() - self.head_since < _STUCK_S or not self.items:
                return None
            return self.items[0]

    def fail(self, error: NcclOrderError) -> None:
        """Fail every entry of the queue, and every later post: NCCL would never run them."""
        with self.lock:
            self.failed = error
            pending = [item for item in self.items if item is not None]
        for item in pending:
            item.finish(error)


class NcclRules(Recorder):
    """Context manager: on this rank, dist's point-to-point functions follow NCCL's rules (module docstring).

    Every rank of the launch enters it (launch(..., emulate="nccl") does), before its first point-to-point call.
    """

    def __init__(self) -> None:
        self._queues: dict[tuple[str, int], _Queue] = {}
        self._lock = threading.Lock()
        # The order of entries with each peer, on two groups or more (_check_group_order, under _order_lock):
        self._groups_with: dict[int, list[str]] = {}  # peer -> the group of each entry posted with it, in order
        self._published: dict[int, int] = {}  # peer -> how many of those entries are in the store
        self._compared: dict[int, int] = {}  # peer -> how many of them have been compared with the peer's
        self._order_lock = threading.Lock()
        self._store = distributed_c10d._get_default_store()
        self._prefix = f"nccl_rules/{next(_INSTANCES)}"  # this instance's keys in the store
        self._stop = threading.Event()
        self._watchdog = threading.Thread(target=self._watch, name="nccl-rules watchdog", daemon=True)

    def install(self, swaps: Swaps) -> None:
        for name, (kind, _) in P2P.items():
            swap_p2p(swaps, name, self._emulated(name, getattr(dist, name)), kind)
        swap_grouped(swaps, self._batch)
        self._watchdog.start()

    def uninstall(self) -> None:
        self._stop.set()
        for queue in self._queues.values():
            queue.close()

    def drain(self) -> None:
        """Wait until every operation posted so far is done (raising the first error among them)."""
        for queue in list(self._queues.values()):
            with queue.lock:
                items = [item for item in queue.items if item is not None]
            _Work(items).wait()

    # ------------------------------------------------------------------------------------- the posting side

    def _emulated(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        kind, peer_argument = P2P[name]
        signature = inspect.signature(original)

        @functools.wraps(original)
        def emulated(*args: Any, **kwargs: Any) -> Any:
            arguments = signature.bind(*args, **kwargs).arguments
            group = arguments.get("group") or dist.group.WORLD
            peer = arguments.get(peer_argument)
            if peer is None and arguments.get(f"group_{peer_argument}") is not None:
                peer = dist.get_global_rank(group, arguments[f"group_{peer_argument}"])
            tensor = arguments["tensor"]
            if name == "send":
                tensor = tensor.clone()  # the caller may change its tensor at once: NCCL's stream order allows it
            op = _Op(name, kind, tensor, self._checked_peer(name, peer, group), group, arguments.get("tag") or 0)
            work = _Work(self._post([op]))
            if name == "recv":
                work.wait()
                return op.peer
            return None if name == "send" else work

        return emulated

    def _batch(self, p2p_op_list: list[dist.P2POp]) -> list[_Work]:
        if not isinstance(p2p_op_list, list) or not p2p_op_list or \
                not all(isinstance(op, dist.P2POp) for op in p2p_op_list):
            raise ValueError("dist.batch_isend_irecv takes a non-empty list of dist.P2POp")
        ops = []
        for op in p2p_op_list:
            kind = p2p_kind(op.op)
            call = "batch_isend_irecv"
            ops.append(_Op(call, kind, op.tensor, self._checked_peer(call, op.peer, op.group), op.group, op.tag))
        work = _Work(self._post(ops))
        return [work] * len(ops)  # one Work per operation, as on Gloo; each completes with the whole group

    def _checked_peer(self, call: str, peer: int | None, group: Any) -> int:
        if peer is None:
            raise NcclOrderError(f"dist.{call} from any source: NCCL has no such receive; name the peer (src=...)")
        if peer == dist.get_rank() or not 0 <= peer < dist.get_world_size():
            raise ValueError(f"dist.{call}: the peer must be another rank of the group, got {peer}")
        return peer

    def _post(self, ops: list[_Op]) -> list[_Item]:
        """Put the operations in their queues, one entry per peer (a group's operations with one peer together)."""
        by_queue: dict[tuple[str, int], list[_Op]] = {}
        for op in ops:
            by_queue.setdefault((op.group.group_name, op.peer), []).append(op)
        for group_name, peer in by_queue:
            self._check_group_order(group_name, peer)
        return [self._queue(ops[0].group, key).post(ops) for key, ops in by_queue.items()]

    def _check_group_order(self, group_name: str, peer: int) -> None:
        """Record an entry with `peer` on `group_name`; once more than one group is in use with that peer, publish
        this rank's new entries and compare those that both ranks have posted with the peer's (module docstring).
        Each entry is written once, under a key of its own, and compared once: a long run costs a few store calls
        per entry, not its whole sequence each time. Raises NcclOrderError."""
        with self._order_lock:
            mine = self._groups_with.setdefault(peer, [])
            mine.append(group_name)
            if peer not in self._published and group_name == mine[0]:
                return  # one group so far with this peer: no order between groups to keep
            me = dist.get_rank()
            my_key, their_key = f"{self._prefix}/order/{me}->{peer}", f"{self._prefix}/order/{peer}->{me}"
            for n in range(self._published.get(peer, 0), len(mine)):
                self._store.set(f"{my_key}/{n}", mine[n])
            self._published[peer] = len(mine)
            self._store.set(f"{my_key}/count", str(len(mine)))  # after the entries: a reader of it finds them all
            if not self._store.check([f"{their_key}/count"]):
                return  # the peer compares when it posts on a second group
            common = min(len(mine), int(self._store.get(f"{their_key}/count")))
            for n in range(self._compared.get(peer, 0), common):
                their_group = self._store.get(f"{their_key}/{n}").decode()
                if mine[n] != their_group:
                    raise NcclOrderError(
                        f"ranks {me} and {peer} post on two groups in different orders: entry {n} between them is on "
                        f"group {mine[n]!r} on rank {me} and on group {their_group!r} on rank {peer}. Each group is "
                        "a communicator of its own, and a GPU need not run two at once: NCCL asks that operations on "
                        "different communicators be posted in one order on every rank. Post them in one sequence of "
                        "groups on both ranks: where a rank sends on one group and receives on the other, both ranks "
                        "put the same group's operation first.")
            self._compared[peer] = common  # both counts only grow

    def _queue(self, group: Any, key: tuple[str, int]) -> _Queue:
        with self._lock:
            if key not in self._queues:
                self._queues[key] = _Queue(group, dist.get_rank(), key[1], self._prefix)
            return self._queues[key]

    # ------------------------------------------------------------------------------------------ the watchdog

    def _watch(self) -> None:
        """Compare the stuck heads of every queue with the peer's, and fail the queues that can never progress."""
        while not self._stop.wait(_WATCH_S):
            with self._lock:
                queues = list(self._queues.values())
            for queue in queues:
                head = queue.stuck_head()
                if head is not None and queue.failed is None:
                    self._check(queue, head)

    def _check(self, queue: _Queue, head: _Item) -> None:
        if queue.published is not head:
            self._store.set(queue.key, json.dumps([[op.kind, op.seq, op.tag, op.describe()]
                                                   for op in head.ops]))
            queue.published = head
        if not self._store.check([queue.their_key]):
            return
        theirs = {(kind, seq): (tag, text) for kind, seq, tag, text in json.loads(self._store.get(queue.their_key))}
        with queue.lock:
            completed = dict(queue.completed)
        mine = {op.key(): op for op in head.ops}
        pending = [op for op in head.ops if op.work is None or not op.work.is_completed()]
        # Mine waits behind theirs: one of my pending operations has its match outside their head.
        blocked_here = [op for op in pending if (_OPPOSITE[op.kind], op.seq) not in theirs]
        # Theirs waits behind mine: one of theirs has its match here, not done and not in my head. (So their head
        # is current: an entry that completed would have had its match done here.)
        blocked_there = [(kind, seq) for kind, seq in theirs
                         if seq >= completed[_OPPOSITE[kind]] and (_OPPOSITE[kind], seq) not in mine]
        mismatched = [op for op in pending if (match := theirs.get((_OPPOSITE[op.kind], op.seq))) and
                      match[0] != op.tag]
        if blocked_here and blocked_there:
            queue.fail(NcclOrderError(_deadlock_message(queue, head, [text for _, text in theirs.values()])))
        elif mismatched:
            op = mismatched[0]
            queue.fail(NcclOrderError(
                f"ranks {queue.me} and {queue.peer}: {op.describe()} has tag {op.tag}, and the operation it "
                f"meets on rank {queue.peer} has tag {theirs[(_OPPOSITE[op.kind], op.seq)][0]}. NCCL has no tags: "
                f"between two ranks the n-th send meets the n-th receive, so post them in the same order on both."))


def _deadlock_message(queue: _Queue, head: _Item, theirs: list[str]) -> str:
    """The same words on both ranks: the lower rank is named first."""
    heads = {queue.me: [op.describe() for op in head.ops], queue.peer: theirs}
    low, high = sorted(heads)
    first = "; ".join(f"rank {rank}'s first unfinished operation with rank {other} is {' and '.join(heads[rank])}"
                      for rank, other in ((low, high), (high, low)))
    return (f"NCCL would hang here: ranks {low} and {high} wait for each other. {first[0].upper()}{first[1:]}. "
            "Between two ranks NCCL runs the operations one at a time, in the order each rank posted them, and a send "
            "completes only when the peer's matching receive is at the head of the peer's queue: each of these waits "
            f"for an operation that the other rank has queued behind it. The fix: {FIX}([dist.P2POp(dist.irecv, "
            "incoming, peer), dist.P2POp(dist.isend, outgoing, peer)]), whose operations run together (or let one "
            "rank send first while the other receives first).")
