"""Lab 01 (collectives): one broken collective costs exactly its own points.

The broken reduce_scatter also proves that exercise 1.7 (all_reduce_rs_ag, built from reduce_scatter and
all_gather) is graded on its own: its test uses reference versions of both.
"""

from tests.corpus.common import Case, body

ASSIGNMENT = "01_collectives"

CASES = [
    # Checks src, then returns: the other ranks keep their own data.
    Case("broken_broadcast", body("broadcast", 'check_root(src, "src")\nreturn\n'), loses={"test_broadcast"}),
    # Copies its own tensor everywhere instead of receiving the others'.
    Case("broken_all_gather", body("all_gather", "for piece in tensor_list:\n    piece.copy_(tensor)\nreturn\n"),
         loses={"test_all_gather"}),
    # Forgets to add the other ranks' contributions.
    Case("broken_reduce_scatter", body("reduce_scatter", "output.copy_(input_list[dist.get_rank()])\nreturn\n"),
         loses={"test_reduce_scatter"}),
]
