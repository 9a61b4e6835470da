"""utils.nccl_rules: every point-to-point exchange of the course runs under NCCL's rules, and what would hang on GPUs
is refused at once, on a CPU.

The solutions of labs 00-02, utils.halving_doubling, utils.timing.shift_time and the reference implementations run on
2 to 5 ranks on plain Gloo and under the emulation, with the same results and the same messages; the two classic bad
patterns, refused with the ranks and the fix; grouped operations recorded like the calls they group.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d

import benchmark.reference as reference
from tests.common import source
from tests.corpus.common import solution_notebook
from utils.collective_calls import Call, CallRecorder
from utils.halving_doubling import halving_doubling_all_reduce
from utils.launch import RankFailedError, RankHangError, launch, one_way_groups, rank_device
from utils.nccl_rules import ENVIRONMENT, FIX, NcclRules
from utils.p2p_ledger import ForbiddenCollectiveError, Ledger, Message
from utils.timing import shift_time


def _cells(assignment: str, ids: list[str]) -> dict[str, Any]:
    """The namespace of a solution notebook after its cells `ids` ran (its setup first): the solutions as graded."""
    cells = {c.get("id"): c for c in json.loads(solution_notebook(assignment).read_text())["cells"]}
    namespace: dict[str, Any] = {"__name__": f"solution_{assignment}"}
    for cell_id in ["setup", *ids]:
        exec(compile(source(cells[cell_id]), f"{assignment}:{cell_id}", "exec"), namespace)
    return namespace


LAB00 = _cells("00_ranks_and_alpha_beta", ["ping_pong", "ring_shift"])
LAB01 = _cells("01_collectives", ["helpers", "broadcast", "scatter", "gather", "all_gather", "reduce_scatter",
                                  "all_reduce", "all_reduce_rs_ag"])
LAB02 = _cells("02_ring_allreduce", ["ring_all_reduce", "tree_all_reduce", "pipelined_ring_all_reduce"])
NUMEL = 11  # not a multiple of any N from 2 to 5: uneven chunks


def _summed(fn: Callable[[torch.Tensor], None]) -> Callable[[], bool]:
    """Run an in-place all-reduce on rank r's [0, 1, ..., n-1] * (r + 1); whether every element is the sum."""

    def run() -> bool:
        rank, world, device = dist.get_rank(), dist.get_world_size(), rank_device()
        tensor = torch.arange(NUMEL, device=device) * (rank + 1)
        fn(tensor)
        return torch.equal(tensor, torch.arange(NUMEL, device=device) * (world * (world + 1) // 2))

    return run


def _rooted() -> dict[str, Callable[[], bool]]:
    """Lab 01's broadcast, scatter and gather, and its all_gather and reduce_scatter, each with its check."""
    rank, world, device = dist.get_rank(), dist.get_world_size(), rank_device()

    def full(n: int, value: int) -> torch.Tensor:
        return torch.full((n,), value, device=device)  # int64

    def broadcast() -> bool:
        tensor = full(3, rank)
        LAB01["broadcast"](tensor, src=world - 1)
        return torch.equal(tensor, full(3, world - 1))

    def scatter() -> bool:
        tensor = full(3, -1)
        LAB01["scatter"](tensor, [full(3, 10 * j) for j in range(world)] if rank == 0 else None, src=0)
        return torch.equal(tensor, full(3, 10 * rank))

    def gather() -> bool:
        pieces = [full(3, -1) for _ in range(world)] if rank == world - 1 else None
        LAB01["gather"](full(3, rank), pieces, dst=world - 1)
        return pieces is None or all(torch.equal(p, full(3, j)) for j, p in enumerate(pieces))

    def all_gather() -> bool:
        pieces = [full(j + 1, -1) for j in range(world)]  # unequal pieces
        LAB01["all_gather"](pieces, full(rank + 1, rank))
        return all(torch.equal(p, full(j + 1, j)) for j, p in enumerate(pieces))

    def reduce_scatter() -> bool:
        output = full(2, -1)
        LAB01["reduce_scatter"](output, [full(2, 10 * j + rank) for j in range(world)])
        return torch.equal(output, full(2, 10 * rank * world + world * (world - 1) // 2))

    return {"lab01 broadcast": broadcast, "lab01 scatter": scatter, "lab01 gather": gather,
            "lab01 all_gather": all_gather, "lab01 reduce_scatter": reduce_scatter}


def _every_exchange() -> dict[str, tuple[bool, list[tuple[str, int, int]]]]:
    """Each point-to-point implementation of the course, once: whether its result is right, and its messages."""
    rank, world, device = dist.get_rank(), dist.get_world_size(), rank_device()

    def ring_shift() -> bool:
        shifted = LAB00["ring_shift"](torch.full((2, 3), rank, device=device))
        return torch.equal(shifted, torch.full((2, 3), (rank - 1) % world, device=device))

    def ping_pong() -> bool:
        t = LAB00["ping_pong"](64, 2)
        return t > 0 if rank == 0 else t is None

    runs: dict[str, Callable[[], bool]] = {
        "lab00 ring_shift": ring_shift, "lab00 ping_pong": ping_pong, **_rooted(),
        "lab01 all_reduce": _summed(LAB01["all_reduce"]), "lab01 all_reduce_rs_ag": _summed(LAB01["all_reduce_rs_ag"]),
        "lab02 ring": _summed(LAB02["ring_all_reduce"]), "lab02 tree": _summed(LAB02["tree_all_reduce"]),
        "lab02 pipelined ring, 16-byte segments": _summed(lambda t: LAB02["pipelined_ring_all_reduce"](t, 16)),
        "lab02 pipelined ring, one segment": _summed(lambda t: LAB02["pipelined_ring_all_reduce"](t, 1 << 20)),
        "utils halving-doubling": _summed(halving_doubling_all_reduce),
        "utils shift_time": lambda: shift_time(64, 2) > 0,
        "reference ring": _summed(reference.ring_all_reduce), "reference tree": _summed(reference.tree_all_reduce),
        "reference naive": _summed(reference.naive_all_reduce),
    }
    results = {}
    for name, run in runs.items():
        with Ledger(forbid_collectives=name != "utils shift_time") as ledger:  # shift_time's barrier is allowed
            right = run()
        results[name] = (right, sorted((m.kind, m.peer, m.nbytes) for m in ledger.messages))
    return results


def _on_gloo_then_under_nccl_rules() -> tuple[dict, dict]:
    """_every_exchange on plain Gloo, then under NCCL's rules, in one launch (what emulate="nccl" runs it under)."""
    on_gloo = _every_exchange()
    with NcclRules() as rules:
        under_nccl_rules = _every_exchange()
        rules.drain()
    return on_gloo, under_nccl_rules


@pytest.mark.parametrize("world", [2, 3, 4, 5])
def test_every_exchange_runs_under_nccl_rules_with_the_traffic_it_has_on_gloo(world: int) -> None:
    for rank, (gloo, nccl) in enumerate(launch(_on_gloo_then_under_nccl_rules, world, timeout=90)):
        wrong = [name for name, (right, _) in {**gloo, **nccl}.items() if not right]
        assert not wrong, f"N={world} rank {rank}: wrong results {wrong}"
        differ = [name for name in gloo if gloo[name][1] != nccl[name][1]]
        assert not differ, f"N={world} rank {rank}: other messages under NCCL's rules than on Gloo: {differ}"


def _classic(pattern: str, numel: int = 3) -> bool:
    """One of the two exchanges that hang on NCCL, between ranks 0 and 1; True if it completed."""
    peer = 1 - dist.get_rank()
    outgoing, incoming = torch.ones(numel, device=rank_device()), torch.empty(numel, device=rank_device())
    if pattern == "irecv then isend":
        for request in [dist.irecv(incoming, src=peer), dist.isend(outgoing, dst=peer)]:
            request.wait()
    else:  # both send first
        dist.send(outgoing, dst=peer)
        dist.recv(incoming, src=peer)
    return torch.equal(incoming, outgoing)


@pytest.mark.parametrize("pattern", ["irecv then isend", "send first"])
def test_the_classic_patterns_are_refused_at_once_with_the_ranks_and_the_fix(pattern: str) -> None:
    with pytest.raises(RankFailedError) as refused:  # a hang would be a RankHangError, after the 30 s
        launch(_classic, 2, pattern, timeout=30, emulate="nccl")
    message = str(refused.value)
    assert "NcclOrderError: NCCL would hang here: ranks 0 and 1 wait for each other" in message, message
    assert "Rank 0's first unfinished operation with rank 1 is dist." in message, message
    assert FIX in message, message
    if pattern == "irecv then isend":  # what Gloo itself runs: only NCCL's rules refuse it
        assert launch(_classic, 2, pattern, timeout=30) == [True, True]


def _tags_out_of_order() -> bool:
    rank = dist.get_rank()
    if rank == 0:
        requests = [dist.isend(torch.zeros(2), dst=1, tag=0), dist.isend(torch.ones(2), dst=1, tag=1)]
    else:
        requests = [dist.irecv(torch.empty(2), src=0, tag=1), dist.irecv(torch.empty(2), src=0, tag=0)]
    for request in requests:
        request.wait()
    return True


def test_nccl_has_no_tags_so_messages_posted_out_of_order_are_refused() -> None:
    assert launch(_tags_out_of_order, 2, timeout=30) == [True, True]  # Gloo matches by tag
    with pytest.raises(RankFailedError, match="NCCL has no tags"):
        launch(_tags_out_of_order, 2, timeout=30, emulate="nccl")


def _one_way_exchange(sends_first: bool) -> bool:
    """Ranks 0 and 1 swap tensors on two groups, one per direction. Each rank posts its send first (`sends_first`:
    rank 0's first entry is on the 0 -> 1 group, rank 1's on the 1 -> 0 group) or, on both, the 0 -> 1 group's
    operation first (rank 0's send, rank 1's receive) and then the other's."""
    rank, peer = dist.get_rank(), 1 - dist.get_rank()
    one_way = one_way_groups()  # [0 -> 1, 1 -> 0]
    outgoing, incoming = torch.full((3,), float(rank)), torch.empty(3)
    post = [lambda: dist.isend(outgoing, peer, group=one_way[rank]),
            lambda: dist.irecv(incoming, peer, group=one_way[peer])]
    if not sends_first and rank == 1:
        post.reverse()
    for request in [p() for p in post]:
        request.wait()
    return torch.equal(incoming, torch.full((3,), float(peer)))


def test_two_groups_are_refused_in_different_orders_and_run_in_one() -> None:
    """Two one-way groups are two NCCL communicators: posted in one order on both ranks they run; each rank's send
    first (both run on Gloo) is refused with the entry and the groups named."""
    assert launch(_one_way_exchange, 2, False, timeout=30, emulate="nccl") == [True, True]
    assert launch(_one_way_exchange, 2, True, timeout=30) == [True, True]
    with pytest.raises(RankFailedError, match="post on two groups in different orders: entry 0 between them is on"):
        launch(_one_way_exchange, 2, True, timeout=30, emulate="nccl")


def _two_emulations_in_one_launch() -> bool:
    """Two NcclRules one after the other on the same ranks and store: in the first, both ranks post the 0 -> 1
    group's operation first; in the second, the 1 -> 0 group's, rank 1 only once rank 0 has posted both (so rank 0
    compares first, while rank 1's sequence from the first one is all the store held under the old keys)."""
    rank, peer = dist.get_rank(), 1 - dist.get_rank()
    one_way, store = one_way_groups(), distributed_c10d._get_default_store()
    swapped = []
    for first in (0, 1):  # the index of the group whose operation both ranks post first
        outgoing, incoming = torch.full((3,), float(rank + 10 * first)), torch.empty(3)
        with NcclRules():
            if first == 1 and rank == 1:
                store.wait(["rank 0 posted"])
            post = {rank: functools.partial(dist.isend, outgoing, peer, group=one_way[rank]),  # the emulated ones
                    peer: functools.partial(dist.irecv, incoming, peer, group=one_way[peer])}
            requests = [post[first](), post[1 - first]()]
            if first == 1 and rank == 0:
                store.set("rank 0 posted", "")
            for request in requests:
                request.wait()
        swapped.append(torch.equal(incoming, torch.full((3,), float(peer + 10 * first))))
    return all(swapped)


def test_an_emulation_never_reads_the_keys_of_an_earlier_one_in_the_same_store() -> None:
    # Each order is one sequence on both ranks: neither is refused (with keys shared, the second was: entry 0 on the
    # 1 -> 0 group on rank 0 against the first's 0 -> 1 group on rank 1).
    assert launch(_two_emulations_in_one_launch, 2, timeout=30) == [True, True]


class _CountingStore:
    """The launch's store, counting what is written under the emulation's order keys."""

    def __init__(self, store: Any):
        self.store, self.sets, self.largest = store, 0, 0

    def set(self, key: str, value: str | bytes) -> None:
        if "/order/" in key:
            self.sets += 1
            self.largest = max(self.largest, len(value))
        self.store.set(key, value)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


def _many_one_way_exchanges(count: int, flip_at: int | None) -> tuple[bool, int, int]:
    """`count` of _one_way_exchange's swaps in one order, but each rank its send first in swap `flip_at`: (every swap
    delivered, the writes under the order keys, the largest value written) on this rank."""
    one_way_groups()  # dist.new_group the first time: before the store is swapped
    store = _CountingStore(distributed_c10d._get_default_store())
    real = distributed_c10d._get_default_store
    distributed_c10d._get_default_store = lambda: store  # NcclRules takes its store at construction
    try:
        rules = NcclRules()
    finally:
        distributed_c10d._get_default_store = real
    with rules:
        delivered = [_one_way_exchange(sends_first=n == flip_at) for n in range(count)]
    return all(delivered), store.sets, store.largest


def test_the_order_of_a_long_run_is_written_once_per_entry_and_checked_to_its_end() -> None:
    # 300 entries per rank: each written once, a few bytes (the whole sequence each time wrote 1.5 KB at the end,
    # 225 KB in all); a difference at entry 200 is still found.
    for delivered, sets, largest in launch(_many_one_way_exchanges, 2, 150, None, timeout=60):
        assert delivered and sets <= 2 * 300 and largest <= 8, (delivered, sets, largest)
    with pytest.raises(RankFailedError, match="different orders: entry 200 between them is on group"):
        launch(_many_one_way_exchanges, 2, 150, 100, timeout=60)


def _send_then_late_receive(delay: float) -> float | None:
    """Rank 1 posts its receive `delay` later; rank 0: how long its send took, as a share of the whole exchange."""
    if dist.get_rank() == 1:
        time.sleep(delay)
        dist.recv(torch.empty(4), src=0)
        dist.send(torch.ones(1), dst=0)  # the acknowledgement
        return None
    start = time.perf_counter()
    dist.send(torch.ones(4), dst=1)
    returned = time.perf_counter() - start
    dist.recv(torch.empty(1), src=1)
    return returned / (time.perf_counter() - start)


def test_send_returns_before_its_receive_is_posted_and_a_lost_receive_hangs_until_the_timeout() -> None:
    nccl_share = launch(_send_then_late_receive, 2, 0.5, timeout=30, emulate="nccl")[0]
    gloo_share = launch(_send_then_late_receive, 2, 0.5, timeout=30)[0]
    assert nccl_share < 0.2 < 0.8 < gloo_share, (nccl_share, gloo_share)  # Gloo's send waits for the receive
    with pytest.raises(RankHangError):  # rank 1 never sends: nothing to prove, only the timeout ends it
        launch(lambda: dist.recv(torch.empty(1), src=1) if dist.get_rank() == 0 else None, 2, timeout=2,
               emulate="nccl")


def _grouped_and_recorded() -> tuple[list[Message], list[tuple[int, int]], list[Call], str]:
    peer = 1 - dist.get_rank()
    made_before = dist.P2POp(dist.isend, torch.ones(3), peer)  # holds torch's own isend
    with Ledger(forbid_collectives=True) as ledger:
        group = [dist.P2POp(dist.irecv, torch.empty(3), peer), made_before]
        for request in dist.batch_isend_irecv(group):
            request.wait()
        try:
            dist.all_reduce(torch.ones(1))
            refused = "not refused"
        except ForbiddenCollectiveError:
            refused = "refused"
    with CallRecorder() as recorder:
        for request in dist.batch_isend_irecv([dist.P2POp(dist.irecv, torch.empty(3), peer),
                                               dist.P2POp(dist.isend, torch.ones(3), peer)]):
            request.wait()
    return ledger.messages, ledger.waits, recorder.calls, refused


@pytest.mark.parametrize("emulate", [None, "nccl"])
def test_grouped_operations_are_recorded_like_the_calls_they_group(emulate: str | None) -> None:
    for rank, (messages, waits, calls, refused) in enumerate(launch(_grouped_and_recorded, 2, emulate=emulate)):
        assert messages == [Message("recv", 1 - rank, 12, False), Message("send", 1 - rank, 12, False)]
        assert waits == [(2, 0), (2, 1)]
        assert calls == [Call("irecv", 12, 2), Call("isend", 12, 2)]
        assert refused == "refused", "the built-in collectives stay banned under the emulation"


def test_the_emulation_is_chosen_by_argument_or_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    def active() -> bool:
        return NcclRules.active() is not None

    assert launch(active, 1) == [False]
    with pytest.raises(ValueError, match='emulate must be "nccl"'):
        launch(active, 1, emulate="mpi")
    monkeypatch.setenv(ENVIRONMENT, "nccl")
    assert launch(active, 1) == [True]


# ----------------------------------------------------------------------- on GPUs (make test-gpu): NCCL itself

GPUS = torch.cuda.device_count()


@pytest.mark.gpu
@pytest.mark.skipif(GPUS < 2, reason="needs at least two CUDA GPUs")
@pytest.mark.parametrize("world", [2, 3, 4, 5])
def test_every_exchange_runs_on_nccl_with_the_messages_of_the_emulation(world: int) -> None:
    """What the emulation stands for: on the GPUs, over NCCL, every exchange completes with the same messages."""
    if world > GPUS:
        pytest.skip(f"{world} ranks need {world} GPUs, this machine has {GPUS}")
    on_nccl = launch(_every_exchange, world, timeout=120, backend="nccl")
    emulated = launch(_every_exchange, world, timeout=120, backend="gloo", emulate="nccl")
    for rank, (nccl, gloo) in enumerate(zip(on_nccl, emulated, strict=True)):
        assert not [name for name, (right, _) in nccl.items() if not right], f"N={world} rank {rank}: {nccl}"
        assert {name: m for name, (_, m) in nccl.items()} == {name: m for name, (_, m) in gloo.items()}


@pytest.mark.gpu
@pytest.mark.skipif(GPUS < 2, reason="needs at least two CUDA GPUs")
def test_the_ungrouped_exchange_hangs_on_nccl_as_the_emulation_says() -> None:
    """The premise: on 2 GPUs, an ungrouped irecv then isend of 64 MiB never completes (NVIDIA/nccl#479)."""
    with pytest.raises(RankHangError):
        launch(_classic, 2, "irecv then isend", 16 << 20, timeout=30, backend="nccl")


# ------------------------------------------------- lab 04 on CUDA: a result is only there once wait() returned


class _LateAllReduce:
    """dist.all_reduce whose result, with async_op=True, lands only when wait() is called, as a CUDA stream sees it.

    On Gloo an asynchronous all-reduce may well be done before wait(); on GPUs the host (and any other stream) can
    read the tensor before NCCL has written it. Here the tensor keeps its old values until wait(), which reduces
    what the tensor held when the call was made (NCCL's stream waits for the launching stream, not for later work).
    """

    def __init__(self) -> None:
        self.original = dist.all_reduce

    def __call__(self, tensor: torch.Tensor, *args: Any, async_op: bool = False, **kwargs: Any) -> Any:
        if not async_op:
            return self.original(tensor, *args, **kwargs)
        launched = tensor.clone()
        late = self

        class Work:
            def wait(self, *_: Any, **__: Any) -> bool:
                late.original(launched, *args, **kwargs)
                tensor.copy_(launched)
                return True

        return Work()


def _bucketed_ddp_steps(late: bool) -> list[torch.Tensor]:
    """Lab 04's BucketedDDP, 3 steps of SGD on a small net; with `late`, all-reduce results land only at wait()."""
    torch.manual_seed(0)  # the same model on every rank
    device = rank_device()
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3)).to(device)
    ddp = reference.bucketed_ddp()(model, bucket_cap_mb=1e-4)  # a bucket per parameter or so: several in flight
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(dist.get_rank())  # each rank its own samples
    original = dist.all_reduce
    if late:
        dist.all_reduce = _LateAllReduce()
    try:
        for _ in range(3):
            x, y = torch.randn(4, 6, generator=generator).to(device), torch.randn(4, 3, generator=generator).to(device)
            model.zero_grad(set_to_none=True)
            torch.nn.functional.mse_loss(ddp(x), y).backward()
            ddp.finish_gradient_synchronization()
            optimizer.step()
    finally:
        dist.all_reduce = original
    return [p.detach().cpu() for p in model.parameters()]


def test_lab04_reads_every_bucket_only_after_its_wait_as_cuda_streams_require() -> None:
    for on_time, late in launch(lambda: (_bucketed_ddp_steps(False), _bucketed_ddp_steps(True)), 2, timeout=60):
        assert all(torch.equal(a, b) for a, b in zip(on_time, late, strict=True))
