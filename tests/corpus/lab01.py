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

CASES = [
    # The built-in broadcast under another name: the right result and no message to count. And exercise 1.9's
    # floors taken from the direct algorithms: N (N - 1) messages for AllGather and ReduceScatter, N (N - 1) for
    # AllReduce too.
    Case("cheat_c10d_broadcast_messages_of_the_direct_algorithms", chain(
        body("broadcast", 'check_root(src, "src")\n'
             "torch.distributed.distributed_c10d.broadcast(tensor, src)\nreturn\n"),
        body("minimum_messages",
             'return N - 1 if collective in ("broadcast", "scatter", "gather") else N * (N - 1)\n')),
         loses={"test_broadcast", "test_minimum_messages"},
         says=("test_broadcast (2 points) failed", "this exercise must be built only from",
               "N = 3, all_gather: expected 4 (the search's fewest), got 6 (the direct algorithm's count: one message"
               " may carry several pieces)", "N = 3, all_reduce: expected 4 (the search's fewest), got 6")),
    # The built-in all_gather, imported by name when the cell runs, before any ledger swaps the module's names.
    Case("cheat_imported_all_gather", chain(
        body("all_gather", "check_tensor_list(\"tensor_list\", tensor_list, tensor, same_shape=False)\n"
             "_builtin_all_gather(tensor_list, tensor)\nreturn\n"),
        append("all_gather", "from torch.distributed import all_gather as _builtin_all_gather  # noqa: E402\n"),
    ), loses={"test_all_gather"}, says=("test_all_gather (3 points) failed", "this exercise must be built only from")),
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
    # Forgets to add the other ranks' contributions; takes one rank's floor for the floor of all of them; and posts
    # all_gather's irecv and isend with each peer ungrouped: right on Gloo, a hang on NCCL (the tests' run under
    # NCCL's rules refuses it, and says how to post them).
    Case("broken_reduce_scatter_ungrouped_all_gather", chain(
        body("reduce_scatter", "output.copy_(input_list[dist.get_rank()])\nreturn\n"),
        body("minimum_traffic", "return (N - 1) * piece_bytes\n"),
        body("all_gather", UNGROUPED_ALL_GATHER),
    ), loses={"test_reduce_scatter", "test_minimum_traffic", "test_all_gather"},
         says=("test_all_gather (3 points) failed", "NCCL would hang here", FIX,
               "rank 0: element [0]: expected 3, got 0",
               "got is this rank's own input_list[rank]: the other ranks' contributions were never added",
               "expected 96, section 5's 2 (N - 1) M", "got 16; that is (N - 1) m, what one rank sends in one phase")),
]
