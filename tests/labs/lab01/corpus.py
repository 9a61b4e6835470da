"""Lab 01 (collectives): one broken or cheating collective costs exactly its own points.

Three submissions reach torch's communication by a route that the module-level ban of the ledger alone would
miss: torch.distributed.distributed_c10d.broadcast; an all_gather imported with `from torch.distributed import ...`
in a cell that runs before the tests; and, below the process group, a functional all_reduce
(torch.distributed._functional_collectives) and a scatter made of the backend's own send and recv (the messages
would go uncounted). The ledger refuses each of them (it watches the process group, its backends and the
dispatcher), so each scores zero on what it cheats and keeps every other point; the last one is also flagged
for naming torch's private internals (autograder.tamper.private_internals).

The broken reduce_scatter also proves that exercise 1.7 (all_reduce_rs_ag, built from reduce_scatter and
all_gather) is graded on its own: its test uses reference versions of both.

The derivations 1.8 and 1.9 each lose their point twice: to a nearby but wrong formula (the oracle's search tells on
N <= 3), and to the right counts found by walking an algorithm's messages (a ring's steps, a chain's links): correct,
but at N = 10^4 hundreds of times as slow as a table lookup, where the tests allow 30.
"""

from tests.corpus.common import Case, append, body, chain, replace
from utils.nccl_rules import FIX

ASSIGNMENT = "01_collectives"
UNGROUPED_ALL_GATHER = """check_tensor_list("tensor_list", tensor_list, tensor, same_shape=False)
rank, world = dist.get_rank(), dist.get_world_size()
requests = []
for peer in range(world):
    if peer != rank:
        requests.append(dist.irecv(tensor_list[peer], src=peer))
        requests.append(dist.isend(tensor, dst=peer))
tensor_list[rank].copy_(tensor)
for request in requests:
    request.wait()
return
"""

# The right counts, by walking the messages of an algorithm that meets every floor: correct, and linear in N.
SIMULATED_TRAFFIC = """\
if collective not in ("broadcast", "scatter", "gather", "all_gather", "reduce_scatter", "all_reduce"):
    raise ValueError(f"unknown collective {collective!r}")
if isinstance(N, bool) or not isinstance(N, numbers.Integral) or N < 1 or piece_bytes < 0:
    raise ValueError(f"need an integer N >= 1 and piece_bytes >= 0, got N={N!r}, piece_bytes={piece_bytes!r}")
sent = 0
if collective in ("broadcast", "scatter", "gather"):
    for _peer in range(1, int(N)):  # the direct algorithm: one piece between the root and each other rank
        sent += piece_bytes
    return sent
for _step in range(2 * (int(N) - 1) if collective == "all_reduce" else int(N) - 1):  # the ring's steps
    sent += int(N) * piece_bytes  # every rank sends one piece
return sent
"""
SIMULATED_MESSAGES = """\
if collective not in ("broadcast", "scatter", "gather", "all_gather", "reduce_scatter", "all_reduce"):
    raise ValueError(f"unknown collective {collective!r}")
if isinstance(N, bool) or not isinstance(N, numbers.Integral) or N < 1:
    raise ValueError(f"need an integer N >= 1, got N={N!r}")
messages = 0
for _link in range(1, int(N)):  # a chain into rank 0 (or out of it, for a broadcast or a scatter)
    messages += 1
if collective not in ("broadcast", "scatter", "gather"):
    for _link in range(1, int(N)):  # and back out, carrying everything
        messages += 1
return messages
"""

CASES = [
    # The built-in broadcast under another name: the right result and no message to count. And exercise 1.9's
    # floors taken from the direct algorithms: N (N - 1) messages for AllGather and ReduceScatter, N (N - 1) for
    # AllReduce too. And reduce_scatter forgets to add the other ranks' contributions; 1.8 takes one rank's floor
    # for the floor of all of them; all_gather posts its irecv and isend with each peer ungrouped: right on Gloo, a
    # hang on NCCL (the tests' run under NCCL's rules refuses it, and says how to post them).
    Case("cheat_c10d_broadcast_direct_messages_broken_reduce_scatter_ungrouped_all_gather", chain(
        body("broadcast", 'check_root(src, "src")\n'
             "torch.distributed.distributed_c10d.broadcast(tensor, src)\nreturn\n"),
        body("minimum_messages",
             'return N - 1 if collective in ("broadcast", "scatter", "gather") else N * (N - 1)\n'),
        body("reduce_scatter", "output.copy_(input_list[dist.get_rank()])\nreturn\n"),
        body("minimum_traffic", "return (N - 1) * piece_bytes\n"),
        body("all_gather", UNGROUPED_ALL_GATHER)),
         loses={"test_broadcast", "test_minimum_messages", "test_reduce_scatter", "test_minimum_traffic",
                "test_all_gather"},
         says=("test_broadcast (2 points) failed", "this exercise must be built only from",
               "minimum_messages('all_gather', 3): expected 4 (an int: the search's fewest), got 6",
               "minimum_messages('all_reduce', 3): expected 4 (an int: the search's fewest), got 6",
               "test_all_gather (3 points) failed", "NCCL would hang here", FIX,
               "rank 0: element [0]: expected 3, got 0",
               "got is this rank's own input_list[rank]: the other ranks' contributions were never added",
               "minimum_traffic('all_gather', 2, 8): expected 16 (an int: the search's fewest bytes), got 8")),
    # The built-in all_gather, imported by name when the cell runs, before any ledger swaps the module's names. And
    # the floors of 1.8 and 1.9 counted by walking an algorithm's messages, not derived.
    Case("cheat_imported_all_gather_simulated_floors", chain(
        body("all_gather", "check_tensor_list(\"tensor_list\", tensor_list, tensor, same_shape=False)\n"
             "_builtin_all_gather(tensor_list, tensor)\nreturn\n"),
        append("all_gather", "from torch.distributed import all_gather as _builtin_all_gather  # noqa: E402\n"),
        body("minimum_traffic", SIMULATED_TRAFFIC), body("minimum_messages", SIMULATED_MESSAGES),
    ), loses={"test_all_gather", "test_minimum_traffic", "test_minimum_messages"},
         says=("test_all_gather (3 points) failed", "this exercise must be built only from",
               "minimum_traffic('all_gather', N, 4) for N from 10**6 to 10**6 + 699 took",
               "minimum_messages('all_gather', N) for N from 10**6 to 10**6 + 699 took",
               "times as long as a few exact operations on the same arguments (allowed: 100)")),
    # Below the process group: the functional all_reduce, and a scatter whose messages the backend sends.
    Case("cheat_below_the_group", chain(
        body("all_reduce", 'summed = functional.all_reduce(tensor, "sum", dist.group.WORLD)\n'
             "tensor.copy_(functional.wait_tensor(summed))\nreturn\n"),
        append("all_reduce", "import torch.distributed._functional_collectives as functional  # noqa: E402\n"),
        replace("scatter", "dist.recv(tensor, src=src)",
                "dist.group.WORLD._get_backend(tensor.device).recv([tensor], src, 0).wait()"),
        replace("scatter", "dist.send(scatter_list[peer], dst=peer)",
                "dist.group.WORLD._get_backend(tensor.device).send([scatter_list[peer]], peer, 0).wait()"),
    ), loses={"test_all_reduce", "test_scatter"}, tampered=True,
         says=("(it reached the operator _c10d_functional::all_reduce)",
               "a point-to-point message reached Backend.recv",
               "all_reduce uses torch's private distributed internals (_functional_collectives)",
               "scatter uses torch's private distributed internals (_get_backend)")),
]
