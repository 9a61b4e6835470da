"""Lab 01 (collectives): one broken or cheating collective costs exactly its own points.

Two submissions call a built-in collective where the exercise allows only messages, each by a name that the
module-level ban of the ledger alone would miss: torch.distributed.distributed_c10d.broadcast, and an all_gather
imported with `from torch.distributed import ...` in a cell that runs before the tests. The ledger refuses both
(it watches the process group), so each scores zero on what it cheats and keeps every other point.

The broken reduce_scatter also proves that exercise 1.7 (all_reduce_rs_ag, built from reduce_scatter and
all_gather) is graded on its own: its test uses reference versions of both.
"""

from tests.corpus.common import Case, append, body, chain

ASSIGNMENT = "01_collectives"

CASES = [
    # The built-in broadcast under another name: the right result and no message to count.
    Case("cheat_c10d_broadcast", body("broadcast", 'check_root(src, "src")\n'
                                      "torch.distributed.distributed_c10d.broadcast(tensor, src)\nreturn\n"),
         loses={"test_broadcast"}),
    # The built-in all_gather, imported by name when the cell runs, before any ledger swaps the module's names.
    Case("cheat_imported_all_gather", chain(
        body("all_gather", "check_tensor_list(\"tensor_list\", tensor_list, tensor, same_shape=False)\n"
             "_builtin_all_gather(tensor_list, tensor)\nreturn\n"),
        append("all_gather", "from torch.distributed import all_gather as _builtin_all_gather  # noqa: E402\n"),
    ), loses={"test_all_gather"}),
    # Forgets to add the other ranks' contributions; and takes one rank's floor for the floor of all of them.
    Case("broken_reduce_scatter", chain(
        body("reduce_scatter", "output.copy_(input_list[dist.get_rank()])\nreturn\n"),
        body("minimum_traffic", "return (N - 1) * piece_bytes\n"),
    ), loses={"test_reduce_scatter", "test_minimum_traffic"}),
]
