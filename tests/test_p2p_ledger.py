"""The traffic ledger: exact per-rank counts, message order, and the ban on built-in collectives."""

from collections.abc import Callable

import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

from utils.launch import RankFailedError, launch
from utils.p2p_ledger import (
    ForbiddenCollectiveError,
    Ledger,
    Message,
    SecondWaitError,
    Totals,
    UnrecordedMessageError,
    unrestricted,
)


def _shift_right_nonblocking(numel: int) -> tuple[list[Message], Totals]:
    rank, world = dist.get_rank(), dist.get_world_size()
    out, inbox = torch.full((numel,), float(rank)), torch.empty(numel)
    with Ledger() as ledger:
        requests = [dist.irecv(inbox, src=(rank - 1) % world), dist.isend(out, (rank + 1) % world)]
        for request in requests:
            request.wait()
    assert inbox[0].item() == (rank - 1) % world
    return ledger.messages, ledger.totals()


def test_nonblocking_ring_shift_is_counted_exactly_per_rank() -> None:
    world, numel = 3, 5
    for rank, (messages, totals) in enumerate(launch(_shift_right_nonblocking, world, numel)):
        nbytes = numel * 4  # float32
        assert messages == [Message("recv", (rank - 1) % world, nbytes, False),
                            Message("send", (rank + 1) % world, nbytes, False)]
        assert totals == Totals(sent_messages=1, sent_bytes=nbytes, recv_messages=1, recv_bytes=nbytes)


def _blocking_gather_to_zero() -> list[Message]:
    rank, world = dist.get_rank(), dist.get_world_size()
    with Ledger() as ledger:
        if rank == 0:
            for _ in range(world - 1):
                dist.recv(torch.empty(2, dtype=torch.int64))  # from whichever rank is first
        else:
            dist.send(torch.tensor([rank, rank]), dst=0)
    return ledger.messages


def test_blocking_receive_from_any_source_records_the_sender() -> None:
    messages = launch(_blocking_gather_to_zero, 3)
    assert sorted(m.peer for m in messages[0]) == [1, 2]
    assert all(m == Message("recv", m.peer, 16, True) for m in messages[0])
    assert messages[1] == [Message("send", 0, 16, True)] and messages[2] == [Message("send", 0, 16, True)]


def _all_reduce_inside_and_after() -> float:
    t = torch.ones(1)
    with Ledger(forbid_collectives=True):
        dist.all_reduce(t)
    return t.item()


def test_forbidden_collective_raises_with_its_name() -> None:
    with pytest.raises(RankFailedError, match="dist.all_reduce is a built-in collective"):
        launch(_all_reduce_inside_and_after, 2)


def _collectives_restored_after_the_ledger() -> tuple[bool, float, int]:
    t = torch.ones(1)
    with Ledger(forbid_collectives=True) as ledger:
        try:
            dist.broadcast(t, src=0)
            refused = False
        except ForbiddenCollectiveError:
            refused = True
    dist.all_reduce(t)  # works again outside the ledger
    with Ledger() as allowed:
        dist.all_reduce(t)  # not forbidden, and not a point-to-point message
    return refused, t.item(), len(ledger.messages) + len(allowed.messages)


def test_collectives_are_restored_and_uncounted_when_allowed() -> None:
    assert launch(_collectives_restored_after_the_ledger, 2) == [(True, 4.0, 0)] * 2


def test_ledgers_do_not_nest_and_restore_the_originals() -> None:
    original_send, original_all_reduce = dist.send, dist.all_reduce
    with Ledger(forbid_collectives=True), pytest.raises(RuntimeError, match="do not nest"), Ledger():
        pass
    assert dist.send is original_send and dist.all_reduce is original_all_reduce


def _collective_by_other_names() -> list[str]:
    from torch.distributed import all_reduce  # bound before the ledger starts, as in a cell run earlier
    from torch.distributed.distributed_c10d import broadcast

    refused = []
    t = torch.ones(1)
    for name, call in [("from-import", lambda: all_reduce(t)), ("distributed_c10d", lambda: broadcast(t, src=0)),
                       ("c10d module", lambda: dist.distributed_c10d.barrier())]:
        with Ledger(forbid_collectives=True):
            try:
                call()
            except ForbiddenCollectiveError:
                refused.append(name)
    with Ledger(forbid_collectives=True), unrestricted():
        all_reduce(t)  # a grader's reference code may use the built-ins
    return refused + [t.item()]


def test_a_collective_is_refused_by_every_name() -> None:
    assert launch(_collective_by_other_names, 2) == [["from-import", "distributed_c10d", "c10d module", 2.0]] * 2


def _send_by_an_imported_name() -> str:
    from torch.distributed import isend

    with Ledger():
        try:
            isend(torch.ones(1), dst=1 - dist.get_rank()).wait()
        except UnrecordedMessageError as error:
            return str(error)
    return "not refused"


def test_a_message_the_ledger_cannot_see_is_refused() -> None:
    assert all("through the module" in text for text in launch(_send_by_an_imported_name, 2))


def _waits_and_tags() -> tuple[list[Message], list[tuple[int, int]]]:
    rank = dist.get_rank()
    with Ledger() as ledger:
        first = dist.irecv(torch.empty(3), src=1 - rank, tag=7)
        second = dist.isend(torch.ones(3), dst=1 - rank, tag=7)
        second.wait()
        first.wait()
        assert first.is_completed()  # everything else goes to the real handle
    return ledger.messages, ledger.waits


def test_waits_and_tags_are_recorded() -> None:
    for rank, (messages, waits) in enumerate(launch(_waits_and_tags, 2)):
        assert messages == [Message("recv", 1 - rank, 12, False, 7), Message("send", 1 - rank, 12, False, 7)]
        assert waits == [(2, 1), (2, 0)]


def _second_waits() -> list[str]:
    """Each rank's isend and irecv, alone and in a group, each waited twice: what each second wait() raised."""
    peer, out, inbox = 1 - dist.get_rank(), torch.ones(3), torch.empty(3)
    refused = []
    with Ledger():
        singles = [dist.isend(out, peer, tag=4), dist.irecv(inbox, peer, tag=4)]
        grouped = dist.batch_isend_irecv([dist.P2POp(dist.isend, out, peer), dist.P2POp(dist.irecv, inbox, peer)])
        for request in singles + grouped:
            request.wait()  # the first wait: returns
        for request in singles + grouped:
            try:
                request.wait()  # on Gloo, without the ledger, this would never return
            except SecondWaitError as error:
                refused.append(str(error).split(":")[0])
    return refused


def test_a_second_wait_on_one_request_is_refused_where_gloo_would_hang() -> None:
    for rank, refused in enumerate(launch(_second_waits, 2, timeout=20)):  # a hang: RankHangError after 20 s
        peer = 1 - rank
        calls = [f"isend to rank {peer}, tag 4", f"irecv from rank {peer}, tag 4",  # alone, then in a group
                 f"isend to rank {peer}, tag 0", f"irecv from rank {peer}, tag 0"]
        assert refused == [f"wait() a second time on one request (the {call})" for call in calls]


def _refusals(calls: dict[str, Callable[[], object]], forbid_collectives: bool = True) -> dict[str, str]:
    """Each call run inside a ledger of its own: the name of the error it raised, or "ran"."""
    outcomes = {}
    for name, call in calls.items():
        with Ledger(forbid_collectives=forbid_collectives):
            try:
                call()
                outcomes[name] = "ran"
            except (ForbiddenCollectiveError, UnrecordedMessageError) as error:
                outcomes[name] = type(error).__name__
    return outcomes


def _collectives_below_the_process_group() -> dict[str, str]:
    t, world = torch.ones(4), dist.get_world_size()
    group = dist.group.WORLD
    backend = group._get_backend(torch.device("cpu"))
    fetched_early = torch.ops.c10d.allreduce_.default  # an operator fetched before the ledger starts ...
    bound_early = group.allreduce  # ... and a method bound to the group: the class's swap cannot reach it
    return _refusals({
        "functional all_reduce": lambda: funcol.all_reduce(t, "sum", group),
        "functional all_gather": lambda: funcol.all_gather_tensor(t, 0, group),
        "functional reduce_scatter": lambda: funcol.reduce_scatter_tensor(t, "sum", 0, group),
        "_c10d_functional.all_reduce": lambda: torch.ops._c10d_functional.all_reduce(t, "sum", group.group_name),
        "_c10d_functional.all_gather_into_tensor":
            lambda: torch.ops._c10d_functional.all_gather_into_tensor(t, world, group.group_name),
        "_c10d_functional.reduce_scatter_tensor":
            lambda: torch.ops._c10d_functional.reduce_scatter_tensor(t, "sum", world, group.group_name),
        "_c10d_functional.broadcast": lambda: torch.ops._c10d_functional.broadcast(t, 0, group.group_name),
        "c10d.allreduce_": lambda: fetched_early([t], group.boxed(), torch.classes.c10d.ReduceOp(), None, False),
        "group method bound early": lambda: bound_early([t]),
        "c10d.broadcast_": lambda: torch.ops.c10d.broadcast_([t], group.boxed(), 0, 0, False),
        "c10d.barrier": lambda: torch.ops.c10d.barrier(t, group.boxed(), [], False),
        "backend allreduce": lambda: backend.allreduce([t]),
        "backend broadcast": lambda: backend.broadcast([t]),
        "backend barrier": lambda: backend.barrier(),
    })


def test_a_collective_is_refused_below_the_process_group() -> None:
    """The functional collectives, the dispatcher's operators and the backend's methods: none escapes the ban."""
    outcomes = launch(_collectives_below_the_process_group, 2, timeout=60)
    assert outcomes[0] == outcomes[1]
    assert outcomes[0] == dict.fromkeys(outcomes[0], "ForbiddenCollectiveError"), outcomes[0]


def _messages_below_the_process_group() -> dict[str, str]:
    rank, peer, group = dist.get_rank(), 1 - dist.get_rank(), dist.group.WORLD
    backend = group._get_backend(torch.device("cpu"))

    def one_way(send: Callable[[], object], recv: Callable[[], object]) -> Callable[[], object]:
        return send if rank == 0 else recv

    t = torch.ones(3)
    return _refusals({
        "backend send / recv": one_way(lambda: backend.send([t], peer, 0), lambda: backend.recv([t], peer, 0)),
        "backend recv_anysource": one_way(lambda: backend.send([t], peer, 0), lambda: backend.recv_anysource([t], 0)),
        "c10d.send / recv_": one_way(lambda: torch.ops.c10d.send([t], group.boxed(), peer, 0),
                                     lambda: torch.ops.c10d.recv_([t], group.boxed(), peer, 0)),
        "functional isend / irecv": one_way(lambda: funcol.isend_inplace(t, peer),
                                            lambda: funcol.irecv_inplace(t, peer)),
    }, forbid_collectives=False)


def test_a_message_below_the_process_group_is_refused_even_where_collectives_are_allowed() -> None:
    outcomes = launch(_messages_below_the_process_group, 2, timeout=60)
    assert outcomes == [dict.fromkeys(outcomes[0], "UnrecordedMessageError")] * 2, outcomes


def _allowed_below_the_process_group() -> tuple[float, float, list[Message]]:
    t = torch.ones(2)
    with Ledger() as allowed:  # collectives allowed: the functional one runs, and is no message
        funcol.wait_tensor(funcol.all_reduce(t, "sum", dist.group.WORLD))
    with Ledger(forbid_collectives=True), unrestricted():  # a grader's reference code
        summed = funcol.wait_tensor(funcol.all_reduce(t, "sum", dist.group.WORLD))
    return t.sum().item(), summed.sum().item(), allowed.messages


def test_the_functional_collectives_run_where_they_are_allowed() -> None:
    assert launch(_allowed_below_the_process_group, 2, timeout=60) == [(2.0, 4.0, [])] * 2
